#!/usr/bin/env python3
"""tb_check.py RUN_DIR: the TensorBoard event files of a `dflash train` output
directory, loaded as `tensorboard --logdir RUN_DIR` loads them (tensorboard's
EventAccumulator: files in name order, orphaned points dropped at a SessionLog
START), must hold exactly the values of RUN_DIR/metrics.jsonl: the scalar
<kind>/<name> at each record's step, equal to the value rounded to float32.
Null values of metrics.jsonl (non-finite) must be non-finite scalars.

Prints "tb_check: N scalars match" and exits 0, or lists the mismatches and
exits 1. Needs tensorboard (installed on the GPU machine, not on the
development VM)."""
import json
import math
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator as ea


def metrics(path):
    """(tag, step) -> value (None for null) of every record of metrics.jsonl;
    a torn last line is skipped, as train.ReadMetrics does."""
    want = {}
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind, step = r.pop("kind"), r.pop("step")
            r.pop("time", None)
            for name, v in r.items():
                want[(f"{kind}/{name}", step)] = v
    return want


def events(run_dir):
    acc = ea.EventAccumulator(run_dir, size_guidance={ea.SCALARS: 0}, purge_orphaned_data=True)
    acc.Reload()
    got = {}
    for tag in acc.Tags()["scalars"]:
        for e in acc.Scalars(tag):
            got[(tag, e.step)] = e.value
    return got


def f32(v):
    """v rounded to float32, as the event files store it."""
    try:
        return struct.unpack("<f", struct.pack("<f", v))[0]
    except OverflowError:  # past float32's range: rounds to an infinity
        return math.copysign(math.inf, v)


def same(tb, v):
    if v is None:
        return not math.isfinite(tb)
    return tb == f32(v)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: tb_check.py RUN_DIR")
    run_dir = sys.argv[1]
    want, got = metrics(f"{run_dir}/metrics.jsonl"), events(run_dir)
    bad = []
    for key, v in sorted(want.items()):
        if key not in got:
            bad.append(f"{key[0]} @ {key[1]}: in metrics.jsonl ({v}), not in the event files")
        elif not same(got[key], v):
            bad.append(f"{key[0]} @ {key[1]}: event files {got[key]!r}, metrics.jsonl {v!r}")
    for key in sorted(set(got) - set(want)):
        bad.append(f"{key[0]} @ {key[1]}: in the event files ({got[key]}), not in metrics.jsonl")
    if not want:
        bad.append("metrics.jsonl holds no values")
    if bad:
        print(f"tb_check: {len(bad)} mismatches of {len(want)} scalars in {run_dir}")
        for b in bad[:40]:
            print("  " + b)
        sys.exit(1)
    print(f"tb_check: {len(want)} scalars match")


if __name__ == "__main__":
    main()
