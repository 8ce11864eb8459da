#!/usr/bin/env python3
"""make_chats.py: conversations with a real chat length distribution, for issue 26's whole-run benchmark.

    python3 bench/make_chats.py OUT.jsonl [--n 2500] [--seed 1] [--lengths FILE]

Writes --n lines of `messages` JSONL (docs/conversations.example.jsonl's format: user and assistant
turns, no system prompt), deterministic from --seed, and prints the intended length distribution on
stderr.

Why it stands for a real run: a drafter training step costs what its batch's shape costs (rows, padded
length, anchor blocks), and the anchors are drawn among supervised positions; which tokens fill the
rows does not change the work. So a run on these conversations spends its time as a run on real chat
data of the same lengths and the same supervised share would. The lengths are those issue 26 measured
for chat training data rendered with the Qwen3 chat template: total tokens per conversation
log-normal with median 763 and 90th percentile 1918, capped at 3072. The turns (1 to 4 user/assistant
pairs) and the assistant's share (about 70% of the tokens, the supervised share) are this script's
choice of a typical chat. What the drafter
learns from them is noise: the benchmark measures time, not acceptance.

How: the totals T are drawn from that log-normal, stratified so that the sample's quantiles are the
distribution's, and clamped to [96, 3072]; per conversation a turn count (1-4, fewer for short ones)
and the assistant's share of the text (uniform in [0.62, 0.78]) are drawn, and the text is
split among the turns at random. The text is random words from WORDS, each of which the Qwen3
tokenizer encodes as one token with or without a leading space (checked with `dflash data tokenize`),
in sentences ending in "." (one token), so a turn's token count is exact and T is the length that
`dflash data prep` finds: the template adds 5 tokens per turn (<|im_start|>, the role, a newline,
<|im_end|>, a newline) and 4 to the last assistant turn (its empty think block). Check with
`dflash data prep --tokenizer DIR --data OUT.jsonl --out PREP` and `dflash data stats PREP`.
"""
import argparse
import json
import math
import random
import statistics
import sys

LENGTH_MEDIAN, LENGTH_P90, LENGTH_MIN, LENGTH_MAX = 763, 1918, 96, 3072
MU = math.log(LENGTH_MEDIAN)
SIGMA = math.log(LENGTH_P90 / LENGTH_MEDIAN) / statistics.NormalDist().inv_cdf(0.9)
TURN_WEIGHTS = {1: 0.4, 2: 0.3, 3: 0.2, 4: 0.1}
TOKENS_PER_TURN = 128  # the least text a turn gets on average: short conversations have fewer turns
ASSISTANT_SHARE = (0.62, 0.78)
TURN_OVERHEAD = 5  # <|im_start|> role \n ... <|im_end|> \n
THINK_OVERHEAD = 4  # <think> \n\n </think> \n\n before the last assistant turn
MIN_USER, MIN_ASSISTANT = 3, 8

# Common English words that the Qwen3 tokenizer encodes as a single token, both as "word" and " word".
WORDS = """
the of and to in is that for it as was with be by on not he this are or his from at which but have an
they you were her she there been one all we their has would when if so no will more can said who what
out about up them some could him into its then two time only do may other new these first like than any
now over my such our man me even most made after also did many before must through back years where much
your way well down should because each just those people how too little state good very make world still
own see men work long here get both between life being under never day same another know while last
might us great old year off come since against go came right used take three place house hand part small
number high every large group begin country help talk turn start show hear play run move live point city
tree cross farm hard light thought head story left few along close night real almost above girl
sometimes cut young soon list song leave family body music color stand sun question fish area mark dog
horse birds problem complete room ever piece usually friends easy heard order red door sure top ship
today during short better best however low hours black products whole measure remember early waves
listen wind rock space covered fast hold five step passed true pattern table north money map busy draw
voice seen cold plan notice south sing war ground fall king town unit figure field travel wood fire upon
""".split()


def totals(rng, n):
    """n lengths from the log-normal, stratified: the i-th smallest from quantile (i + u)/n, u uniform,
    so that the sample's median and p90 are the distribution's, not off by sampling noise; shuffled."""
    z = statistics.NormalDist()
    out = [max(LENGTH_MIN, min(LENGTH_MAX, round(math.exp(MU + SIGMA * z.inv_cdf((i + rng.random()) / n)))))
           for i in range(n)]
    rng.shuffle(out)
    return out


def split(rng, n, parts, least):
    """n split into parts random positive shares, each at least least (when n allows)."""
    least = min(least, n // parts)
    w = [rng.random() + 0.25 for _ in range(parts)]
    out = [least + int((n - least * parts) * x / sum(w)) for x in w]
    out[-1] += n - sum(out)
    return out


def text(rng, n):
    """Exactly n tokens: sentences of 6-20 words and a period, one token each."""
    sentences = []
    while n > 0:
        m = n if n <= 21 else rng.randint(7, 21)
        if n - m == 1:
            m -= 1  # never leave a lone period
        words = [rng.choice(WORDS) for _ in range(m - 1)]
        sentences.append(" ".join(words) + "." if words else rng.choice(WORDS))
        n -= m
    return " ".join(sentences)


def conversation(rng, total):
    """One conversation of total tokens after the Qwen3 template."""
    turns = rng.choices(list(TURN_WEIGHTS), weights=list(TURN_WEIGHTS.values()))[0]
    turns = max(1, min(turns, total // TOKENS_PER_TURN))
    content = total - 2 * TURN_OVERHEAD * turns - THINK_OVERHEAD
    assistant = round(content * rng.uniform(*ASSISTANT_SHARE))
    users = split(rng, content - assistant, turns, MIN_USER)
    answers = split(rng, assistant, turns, MIN_ASSISTANT)
    msgs = []
    for u, a in zip(users, answers):
        msgs += [{"role": "user", "content": text(rng, u)}, {"role": "assistant", "content": text(rng, a)}]
    return {"messages": msgs}, assistant, turns


def pct(sorted_values, p):
    return sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="JSONL file to write")
    ap.add_argument("--n", type=int, default=2500, help="conversations")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lengths", metavar="FILE", help="write each conversation's token count after the template, one a line")
    a = ap.parse_args()
    if a.n < 1:
        ap.error(f"--n {a.n}: must be at least 1")
    rng = random.Random(a.seed)
    lengths, assistant, turns = [], 0, {}
    with open(a.out, "w") as f:
        for t in totals(rng, a.n):
            conv, at, k = conversation(rng, t)
            f.write(json.dumps(conv) + "\n")
            lengths.append(t)
            assistant += at
            turns[k] = turns.get(k, 0) + 1
    if a.lengths:
        with open(a.lengths, "w") as f:
            f.write("".join(f"{n}\n" for n in lengths))
    s = sorted(lengths)
    print(f"{a.out}: {a.n} conversations, {sum(s)} tokens after the Qwen3 template; lengths min {s[0]}, "
          f"median {pct(s, 0.5)}, p90 {pct(s, 0.9)}, max {s[-1]} (intended: median {LENGTH_MEDIAN}, "
          f"p90 {LENGTH_P90}, cap {LENGTH_MAX}); assistant text {100 * assistant / sum(s):.1f}% of the tokens; "
          f"turns {dict(sorted(turns.items()))}", file=sys.stderr)


if __name__ == "__main__":
    main()
