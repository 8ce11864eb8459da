"""qwen3_shapes.py: the Qwen3 target shapes of recipe/stepbench/targets.go, for the Python side.

TARGETS maps a --target-config name to (hidden, intermediate, layers, heads, kv heads, tied), copied
from the config.json of each HF repository (huggingface.co/Qwen/Qwen3-0.6B, Qwen3-1.7B, Qwen3-4B,
Qwen3-8B) as targets.go has them; the rest is common to the four. recipe/stepbench/targets.go is the
source: cmd/dflash's TestRandomQwen3Script checks that bench/random_qwen3.py's config.json for each
name parses to stepbench.Target(name). Standard library only.
"""

QWEN3_VOCAB = 151936  # vocab_size
HEAD_DIM = 128
RMS_NORM_EPS = 1e-6
ROPE_THETA = 1e6
MAX_POSITIONS = 40960  # max_position_embeddings
BOS_TOKEN_ID = 151643  # <|endoftext|>, as the HF config.json files give it
EOS_TOKEN_ID = 151645  # <|im_end|>

# name: hidden, intermediate, layers, heads, kv heads, tied
TARGETS = {
    "qwen3-0.6b": (1024, 3072, 28, 16, 8, True),
    "qwen3-1.7b": (2048, 6144, 28, 16, 8, True),
    "qwen3-4b": (2560, 9728, 36, 32, 8, True),
    "qwen3-8b": (4096, 12288, 36, 32, 8, False),
}
