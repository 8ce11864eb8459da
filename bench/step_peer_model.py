"""step_peer_model.py: the DFlash drafter of docs/DRAFTER.md as the PyTorch trainers write it (bf16
compute, fp32 master weights in AdamW, flex_attention with the DFlash block mask, chunked
cross-entropy under checkpointing), and the batch pieces of one step. Used by bench/step_peer.py.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

LR, BETAS, EPS, WEIGHT_DECAY, CLIP = 6e-4, (0.9, 0.95), 1e-8, 0.01, 1.0  # dflash's train.DefaultConfig

# ---------------------------------------------------------------- the drafter (docs/DRAFTER.md 2)

class RMSNorm(nn.Module):
    """Qwen3's RMSNorm: computed in fp32, weight applied in the input dtype."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dt)


def rope_cos_sin(pos, D, theta, dtype):
    """cos, sin [R, 1, L, D] for positions pos [R, L] (rotate-half layout)."""
    inv = theta ** (-torch.arange(0, D, 2, device=pos.device, dtype=torch.float32) / D)
    ang = pos.float()[..., None] * inv
    ang = torch.cat([ang, ang], dim=-1)[:, None]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rope(x, cos, sin):
    d = x.shape[-1] // 2
    rot = torch.cat([-x[..., d:], x[..., :d]], dim=-1)
    return x * cos + rot * sin


class Attention(nn.Module):
    def __init__(self, H, nh, nkv, D, eps):
        super().__init__()
        self.nh, self.nkv, self.D = nh, nkv, D
        self.q_proj = nn.Linear(H, nh * D, bias=False)
        self.k_proj = nn.Linear(H, nkv * D, bias=False)
        self.v_proj = nn.Linear(H, nkv * D, bias=False)
        self.o_proj = nn.Linear(nh * D, H, bias=False)
        self.q_norm = RMSNorm(D, eps)
        self.k_norm = RMSNorm(D, eps)


class MLP(nn.Module):
    def __init__(self, H, I):
        super().__init__()
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)


class DrafterLayer(nn.Module):
    """One drafter layer (docs/DRAFTER.md 2.3): K/V over [context u ; block rows g]."""

    def __init__(self, H, I, nh, nkv, D, eps):
        super().__init__()
        self.input_layernorm = RMSNorm(H, eps)
        self.self_attn = Attention(H, nh, nkv, D, eps)
        self.post_attention_layernorm = RMSNorm(H, eps)
        self.mlp = MLP(H, I)

    def forward(self, z, u, rope_q, rope_k, block_mask, attn):
        a_ = self.self_attn
        R, Lq, _ = z.shape
        S = u.shape[1]
        g = self.input_layernorm(z)
        q = a_.q_proj(g).view(R, Lq, a_.nh, a_.D)
        kv_in = torch.cat([u, g], dim=1)
        k = a_.k_proj(kv_in).view(R, S + Lq, a_.nkv, a_.D)
        v = a_.v_proj(kv_in).view(R, S + Lq, a_.nkv, a_.D).transpose(1, 2)
        q = apply_rope(a_.q_norm(q).transpose(1, 2), *rope_q)
        k = apply_rope(a_.k_norm(k).transpose(1, 2), *rope_k)
        o = attn(q, k, v, block_mask=block_mask, enable_gqa=a_.nh != a_.nkv)
        z = z + a_.o_proj(o.transpose(1, 2).reshape(R, Lq, a_.nh * a_.D))
        g2 = self.post_attention_layernorm(z)
        m = self.mlp
        return z + m.down_proj(F.silu(m.gate_proj(g2)) * m.up_proj(g2))


class Drafter(nn.Module):
    """The DFlash drafter with the published parameter names (docs/DRAFTER.md 6.1)."""

    def __init__(self, H, I, nh, nkv, D, n_layers, k, eps=1e-6):
        super().__init__()
        self.fc = nn.Linear(k * H, H, bias=False)
        self.hidden_norm = RMSNorm(H, eps)
        self.layers = nn.ModuleList(DrafterLayer(H, I, nh, nkv, D, eps) for _ in range(n_layers))
        self.norm = RMSNorm(H, eps)

    def forward(self, taps, z, rope_q, rope_k, block_mask, attn):
        u = self.hidden_norm(self.fc(torch.cat(taps, dim=-1)))
        for layer in self.layers:
            z = layer(z, u, rope_q, rope_k, block_mask, attn)
        return self.norm(z)


def init_drafter(d):
    with torch.no_grad():
        for p in d.parameters():
            p.normal_(0.0, 0.02) if p.dim() == 2 else p.fill_(1.0)


class MasterAdamW:
    """bf16 parameters for compute, fp32 master copies in AdamW (as SpecForge)."""

    def __init__(self, params):
        self.params = list(params)
        self.master = [p.detach().float().clone().requires_grad_(True) for p in self.params]
        fused = self.params[0].is_cuda
        self.opt = torch.optim.AdamW(self.master, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY,
                                     fused=fused)

    def step(self):
        for m, p in zip(self.master, self.params):
            m.grad = p.grad.float()
            p.grad = None
        torch.nn.utils.clip_grad_norm_(self.master, CLIP)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            for p, m in zip(self.params, self.master):
                p.copy_(m)


# ---------------------------------------------------------------- batch, anchors, mask, loss

def make_batch(R, S, V, dev, gen):
    """Random ids (never the mask token V-1); the first S/8 tokens are the prompt (loss mask 0)."""
    ids = torch.randint(0, V - 1, (R, S), device=dev, generator=gen)
    loss_mask = torch.ones(R, S, device=dev)
    loss_mask[:, : S // 8] = 0
    return ids, loss_mask


def sample_anchors(loss_mask, n, gen):
    """n anchors per row, uniform without replacement among t with m_t = m_{t+1} = 1, sorted."""
    R, S = loss_mask.shape
    cand = torch.zeros_like(loss_mask, dtype=torch.bool)
    cand[:, : S - 1] = (loss_mask[:, :-1] > 0) & (loss_mask[:, 1:] > 0)
    score = torch.rand(R, S, device=loss_mask.device, generator=gen).masked_fill(~cand, -1.0)
    return torch.sort(score.topk(n, dim=1).indices, dim=1).values


def assemble(ids, loss_mask, anchors, B, M, gamma):
    """Block ids [R, nB], block positions [R, nB], labels and weights [R*n, B] (docs/DRAFTER.md 4.3)."""
    R, S = ids.shape
    n = anchors.shape[1]
    slot = torch.arange(B, device=ids.device)
    idx = anchors[:, :, None] + slot                                  # [R, n, B]
    safe = idx.clamp(max=S - 1)
    lab = torch.gather(ids, 1, safe.view(R, -1)).view(R, n, B)
    m = torch.gather(loss_mask, 1, safe.view(R, -1)).view(R, n, B)
    valid = (slot >= 1) & (idx < S) & (m > 0)
    w = torch.exp(-(slot - 1).clamp(min=0).float() / gamma) if gamma > 0 else torch.ones(B, device=ids.device)
    weights = valid.float() * w
    blk = torch.full((R, n, B), M, dtype=ids.dtype, device=ids.device)
    blk[:, :, 0] = torch.gather(ids, 1, anchors)
    return blk.view(R, n * B), idx.view(R, n * B), lab.view(R * n, B), weights.view(R * n, B)


def dflash_mask_mod(anchors_buf, S, B):
    """docs/DRAFTER.md 3 as a flex mask_mod over a persistent anchors buffer [R, n]."""
    last = anchors_buf.shape[1] - 1

    def mask_mod(b, h, q, kv):
        j = torch.clamp(q // B, max=last)  # the kernel may evaluate padded rows q >= n*B: never index past n
        ctx = (kv < S) & (kv < anchors_buf[b, j])
        own = (kv >= S) & ((kv - S) // B == j)
        return ctx | own
    return mask_mod


def chunk_loss(o, W_lm, lab, w):
    """Weighted CE numerator of one chunk: LM head, fp32 logits, per-slot CE."""
    logits = (o @ W_lm.T).float()
    ce = F.cross_entropy(logits.view(-1, logits.shape[-1]), lab.reshape(-1), reduction="none")
    return (ce * w.reshape(-1)).sum()


def chunked_loss(o, W_lm, lab, weights, chunk_blocks):
    """Loss of docs/DRAFTER.md 4.4, chunk_blocks blocks at a time under checkpointing."""
    from torch.utils.checkpoint import checkpoint
    R, nB, H = o.shape
    B = lab.shape[1]
    ob = o.reshape(-1, B, H)
    total = o.new_zeros((), dtype=torch.float32)
    for c in range(0, ob.shape[0], chunk_blocks):
        sl = slice(c, c + chunk_blocks)
        total = total + checkpoint(chunk_loss, ob[sl], W_lm, lab[sl], weights[sl], use_reentrant=False)
    return total / weights.sum()
