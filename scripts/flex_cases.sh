# flex_cases.sh: the issue's GPU flex attention cases as `dflash bench
# attention` arguments, one "name args..." string each; sourced by
# scripts/gpu-attn.sh and scripts/gpu-attn-quick.sh. bench/flex_peer.py has
# the same shapes for PyTorch under the same names.
CASES=(
  "a_causal_d128 --mask causal --batch 4 --heads 16 --kv-heads 16 --seq 4096 --head-dim 128"
  "b_dflash --mask dflash --batch 1 --heads 32 --kv-heads 8 --anchors 512 --block-size 16 --context 3072 --head-dim 128"
  "c_document --mask document --batch 1 --heads 16 --kv-heads 16 --seq 8192 --doc-len 1024 --head-dim 128"
  "d_window --mask window --batch 1 --heads 16 --kv-heads 16 --seq 16384 --window 1024 --head-dim 128"
  "a_causal_d64 --mask causal --batch 4 --heads 16 --kv-heads 16 --seq 4096 --head-dim 64"
  "a_causal_d256 --mask causal --batch 4 --heads 16 --kv-heads 16 --seq 4096 --head-dim 256"
)
