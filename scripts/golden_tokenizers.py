#!/usr/bin/env python3
"""golden_tokenizers.py writes the golden files of dflash's data/ tests.

Run on the GPU machine (it has HF tokenizers and transformers), from the repo
root, after scripts/fetch-testdata.sh has filled testdata-cache/tokenizers/:

    python3 scripts/golden_tokenizers.py OUTDIR

It writes OUTDIR/tokenizer_golden.json (ids from tokenizers.Tokenizer.encode
with add_special_tokens=False for data/tokenizer/testdata/texts.json plus
seeded random strings) and OUTDIR/chat_golden.json (apply_chat_template text
and ids for data/chat/testdata/conversations.json, and the assistant-only loss
mask computed from HF offsets by the rule documented in data/chat). Copy them
to data/tokenizer/testdata/golden.json and data/chat/testdata/golden.json.
"""
import json
import random
import sys

import tokenizers
import transformers
from transformers import AutoTokenizer

NAMES = ["qwen3", "llama3"]
CACHE = "testdata-cache/tokenizers/"

# Assistant header, end of turn and the empty think block, per template family
# (the same table as data/chat/family.go).
FAMILIES = {
    "qwen3": ("<|im_start|>assistant\n", "<|im_end|>", "<think>\n\n</think>\n\n"),
    "llama3": ("<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>", None),
}

PALETTE = (
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") * 4
    + list("0123456789") * 3
    + [" "] * 30 + ["\n"] * 8 + ["\r", "\t", "\r\n", "  ", "\n\n"]
    + list("'.,!?-_()[]{}<>\"/\\@#$%^&*:;|`~+=") * 2
    + ["'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'ſ"]
    + list("你好世界中文训练模型") + list("こんにちはカタカナ") + list("안녕하세요")
    + ["🤗", "🚀", "👍🏽", "❤️", "👨‍👩‍👧"] + list("ÀéüñßøÅçЖжΩω")
    + ["e\u0301", "A\u030a", "\u00a0", "\u3000", "\u2028", "\u0085", "\u000b", "\u000c"]
    + list("²½٣٤Ⅻ") + list("مرحبا") + ["न", "म", "स", "्", "त", "े"] + ["ſ", "ǅ", "ﬁ"]
    + ["<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|eot_id|>", "<|begin_of_text|>", "<|", "|>"]
)


def random_texts(n, seed):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        k = rng.randint(1, 80)
        out.append({"name": f"random_{i}", "text": "".join(rng.choice(PALETTE) for _ in range(k))})
    return out


def long_texts():
    rng = random.Random(7)
    b64 = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") for _ in range(3000))
    han = "".join(rng.choice("的一是不了人我在有他这为之大来以个中上们到说时") for _ in range(1500))
    return [
        {"name": "long_a", "text": "a" * 2000},
        {"name": "long_spaces", "text": "x" + " " * 700 + "y"},
        {"name": "long_base64", "text": b64},
        {"name": "long_han", "text": han},
        {"name": "long_digits", "text": "".join(str(rng.randint(0, 9)) for _ in range(1000))},
    ]


def tokenizer_golden():
    texts = json.load(open("data/tokenizer/testdata/texts.json", encoding="utf-8"))
    texts += long_texts() + random_texts(400, 20261129)
    out = {"tokenizers_version": tokenizers.__version__, "texts": texts, "ids": {}, "pieces": {}}
    for name in NAMES:
        tok = tokenizers.Tokenizer.from_file(CACHE + name + "/tokenizer.json")
        ids = [tok.encode(t["text"], add_special_tokens=False).ids for t in texts]
        out["ids"][name] = ids
        # Pre-tokenizer pieces (byte-level alphabet) of the normalised text,
        # without added-token matching: a direct check of the split scanners.
        norm = tok.normalizer.normalize_str if tok.normalizer is not None else (lambda s: s)
        out["pieces"][name] = [[p for p, _ in tok.pre_tokenizer.pre_tokenize_str(norm(t["text"]))] for t in texts]
        # HF's own round trip, for the record (NFC changes some texts for qwen3).
        bad = sum(tok.decode(x, skip_special_tokens=False) != t["text"] for x, t in zip(ids, texts))
        print(f"{name}: {len(texts)} texts, {sum(map(len, ids))} ids, {bad} not round-tripping", flush=True)
    return out


def mask_spans(text, family, enable_thinking):
    """Character spans of assistant-generated text, by the data/chat rule."""
    header, eot, empty_think = FAMILIES[family]
    spans, cur = [], 0
    while True:
        h = text.find(header, cur)
        if h < 0:
            break
        start = h + len(header)
        e = text.find(eot, start)
        end = len(text) if e < 0 else e + len(eot)
        if not enable_thinking and empty_think and text.startswith(empty_think, start):
            start += len(empty_think)
        if end > start:
            spans.append((start, end))
        cur = end
    return spans


def chat_golden():
    conv = json.load(open("data/chat/testdata/conversations.json", encoding="utf-8"))
    by_name = {c["name"]: c["messages"] for c in conv["conversations"]}
    out = {"transformers_version": transformers.__version__, "cases": {}}
    for name in NAMES:
        tok = AutoTokenizer.from_pretrained(CACHE + name)
        rows = []
        for case in conv["cases"]:
            msgs = by_name[case["conversation"]]
            kw = dict(add_generation_prompt=case["add_generation_prompt"], enable_thinking=case["enable_thinking"])
            text = tok.apply_chat_template(msgs, tokenize=False, **kw)
            templ_ids = tok.apply_chat_template(msgs, tokenize=True, **kw)
            if isinstance(templ_ids, dict) or hasattr(templ_ids, "keys"):
                templ_ids = templ_ids["input_ids"]
            enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
            ids = enc["input_ids"]
            if list(ids) != list(templ_ids):
                print(f"WARNING {name} {case['name']}: apply_chat_template ids differ from encoding its text", flush=True)
            spans = mask_spans(text, name, case["enable_thinking"])
            mask = [int(any(s <= a < e for s, e in spans)) for a, _ in enc["offset_mapping"]]
            rows.append({"case": case["name"], "text": text, "ids": list(ids), "template_ids": list(templ_ids), "mask": mask})
        out["cases"][name] = rows
        print(f"{name}: {len(rows)} chat cases", flush=True)
    return out


def time_english():
    """Prints HF tokenizers' single-thread encode speed on the English text of
    data/tokenizer's benchmark, when testdata-cache/english.txt holds it."""
    import os
    path = "testdata-cache/english.txt"
    if not os.path.exists(path):
        return
    text = open(path, encoding="utf-8").read()
    for name in NAMES:
        tok = tokenizers.Tokenizer.from_file(CACHE + name + "/tokenizer.json")
        tok.encode(text, add_special_tokens=False)
        best = min(_timed(lambda: tok.encode(text, add_special_tokens=False)) for _ in range(5))
        print(f"HF tokenizers {tokenizers.__version__} {name}: {len(text.encode()) / best / 1e6:.1f} MB/s single call, "
              f"{len(text.encode())} bytes, {os.cpu_count()} cores", flush=True)


def _timed(f):
    import time
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "."
    time_english()
    with open(outdir + "/tokenizer_golden.json", "w", encoding="utf-8") as f:
        json.dump(tokenizer_golden(), f, ensure_ascii=False, separators=(",", ":"))
    with open(outdir + "/chat_golden.json", "w", encoding="utf-8") as f:
        json.dump(chat_golden(), f, ensure_ascii=False, separators=(",", ":"))


if __name__ == "__main__":
    main()
