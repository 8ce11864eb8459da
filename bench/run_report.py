#!/usr/bin/env python3
"""run_report.py: where the wall time of a `dflash train` run goes (issue 26's whole-run benchmark).

    python3 bench/run_report.py OUT [--json]

OUT is what scripts/gpu-run-bench.sh leaves: one directory per run (packed/, buckets/) with the run's
metrics.jsonl, its TensorBoard event file, train.log and times.json ({"start": s, "end": s, "rc": n}:
the process's start and end in Unix seconds, taken by the script around the command), and peer/peer.json
(bench/run_peer.py). OUT may also be a run's own --out directory: then what only times.json gives is n/a.
Standard library only.

Per run, on stdout:
- samples/s: wall (samples over the time from the first step's start to the last step's end), steps
  only (samples over the steps' own time), and whole process (over start to exit);
- the split of the process's time: start to the first step (loading, data, compiling), steps,
  evaluations and checkpoint stalls between the first and the last step, other time between steps, and
  after the last step the final evaluation and the final checkpoint with the export;
- the padding waste: the mean of the steps' pad_frac;
- the ratios: wall over steps only, packed over bucketed wall samples/s, dflash over the peer.

Sources. A train record of metrics.jsonl carries time (seconds from train.Run's start to the record),
tokens (cumulative), tokens_per_s and samples_per_s (of its step): a step lasted its tokens over
tokens_per_s and counted samples_per_s times that many samples. Records that carry the cumulative
time_steps_s, time_eval_s, time_ckpt_s, time_wall_s (from the first step) and samples give those
directly; without them the evaluations are timed from the eval records (written when each ends, after
the step's record) and the checkpoint stalls are n/a (they are in "other"). The event file's wall clock
(each scalar event's wall_time, written with its record) places the records in Unix time, so that
times.json's start and end split the rest.
"""
import argparse
import glob
import json
import math
import os
import struct
import sys

NA = "n/a"


def read_metrics(path):
    train, evals = [], []
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        (train if r.get("kind") == "train" else evals if r.get("kind") == "eval" else []).append(r)
    return train, evals


def varint(b, i):
    v, shift = 0, 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return v, i


def read_events(path):
    """[(step, wall_time)] of the scalar events (those with a summary) of a TensorBoard event file:
    TFRecords (length, its CRC, data, its CRC) of Event {double wall_time = 1; int64 step = 2;
    Summary summary = 5; ...}."""
    b = open(path, "rb").read()
    out, i = [], 0
    while i + 12 <= len(b):
        (n,) = struct.unpack_from("<Q", b, i)
        rec, i = b[i + 12:i + 12 + n], i + 12 + n + 4
        wall, step, summary, j = None, 0, False, 0
        while j < len(rec):
            key, j = varint(rec, j)
            field, wire = key >> 3, key & 7
            if wire == 0:
                v, j = varint(rec, j)
                if field == 2:
                    step = v
            elif wire == 1:
                if field == 1:
                    (wall,) = struct.unpack_from("<d", rec, j)
                j += 8
            elif wire == 2:
                ln, j = varint(rec, j)
                summary |= field == 5
                j += ln
            elif wire == 5:
                j += 4
            else:
                break  # not an Event: stop reading this record
        if summary and wall is not None:
            out.append((step, wall))
    return out


def step_times(train):
    """Each step's seconds and samples."""
    dts, samples = [], []
    prev = {"tokens": 0, "time_steps_s": 0.0, "samples": 0}
    for r in train:
        if "time_steps_s" in r:
            dt = r["time_steps_s"] - prev["time_steps_s"]
        else:
            dt = (r["tokens"] - prev["tokens"]) / r["tokens_per_s"] if r.get("tokens_per_s") else 0.0
        if "samples" in r:
            n = r["samples"] - prev["samples"]
        else:
            n = r.get("samples_per_s", 0.0) * dt
        dts.append(dt)
        samples.append(n)
        prev = r
    return dts, samples


def began_unix(run_dir, train):
    """Unix time of train.Run's start (time 0 of metrics.jsonl), from the event file; None without one."""
    by_step = {r["step"]: r["time"] for r in train}
    for path in sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))):
        for step, wall in read_events(path):
            if step in by_step:
                return wall - by_step[step]  # the first scalar event of a step is its train record's
    return None


def load_run(run_dir):
    train, evals = read_metrics(os.path.join(run_dir, "metrics.jsonl"))
    if not train:
        return None
    times = {}
    p = os.path.join(run_dir, "times.json")
    if os.path.exists(p):
        times = json.load(open(p))
    dts, samples = step_times(train)
    first, last = train[0], train[-1]
    first_begin = first["time"] - dts[0]
    wall = last["time_wall_s"] if "time_wall_s" in last else last["time"] - first_begin
    steps_s = last["time_steps_s"] if "time_steps_s" in last else sum(dts)
    n = last["samples"] if "samples" in last else sum(samples)
    train_at = {r["step"]: r["time"] for r in train}
    eval_at = {e["step"]: e["time"] - train_at[e["step"]] for e in evals if e["step"] in train_at}
    if "time_eval_s" in last:
        eval_s = last["time_eval_s"]
    else:
        eval_s = sum(d for s, d in eval_at.items() if s < last["step"])
    ckpt_s = last.get("time_ckpt_s")
    other = wall - steps_s - eval_s - (ckpt_s or 0.0)
    r = {"dir": run_dir, "steps": last["step"] - first["step"] + 1, "first_step": first["step"],
         "last_step": last["step"], "samples": n, "rc": times.get("rc"),
         "samples_per_s_wall": n / wall if wall > 0 else None,
         "samples_per_s_steps": n / steps_s if steps_s > 0 else None,
         "samples_per_s_process": None,
         "split_s": {"start_to_first_step": None, "steps": steps_s, "eval": eval_s, "checkpoint": ckpt_s,
                     "other_between_steps": other, "final_eval": eval_at.get(last["step"]),
                     "final_checkpoint_export": None, "total": None},
         "wall_s": wall,
         "pad_frac_mean": mean([t["pad_frac"] for t in train if "pad_frac" in t]),
         "log_split": log_split(os.path.join(run_dir, "train.log"))}
    began = began_unix(run_dir, train)
    if began is not None and "start" in times and "end" in times:
        sp = r["split_s"]
        sp["start_to_first_step"] = began + first_begin - times["start"]
        after = times["end"] - (began + last["time"])
        sp["final_checkpoint_export"] = after - (sp["final_eval"] or 0.0)
        sp["total"] = times["end"] - times["start"]
        r["samples_per_s_process"] = n / sp["total"] if sp["total"] > 0 else None
    return r


def mean(v):
    return sum(v) / len(v) if v else None


def log_split(path):
    """The last line of the log that names the run's split, verbatim (None: no log or no such line)."""
    if not os.path.exists(path):
        return None
    found = None
    for line in open(path, errors="replace"):
        if "split" in line:
            found = line.strip()
    return found


def load_peer(out):
    for p in (os.path.join(out, "peer", "peer.json"), os.path.join(out, "peer.json")):
        if os.path.exists(p) and os.path.getsize(p) > 0:
            return json.load(open(p))
    return None


def report(out):
    runs = {}
    if os.path.exists(os.path.join(out, "metrics.jsonl")):
        runs[os.path.basename(os.path.normpath(out))] = out
    order = {"packed": 0, "buckets": 1}  # the benchmark's runs first, then any other
    found = [os.path.dirname(d) for d in glob.glob(os.path.join(out, "*", "metrics.jsonl"))]
    for d in sorted(found, key=lambda d: (order.get(os.path.basename(d), 2), os.path.basename(d))):
        runs[os.path.basename(d)] = d
    res = {"runs": {}, "peer": load_peer(out), "ratios": {}}
    for name, d in runs.items():
        r = load_run(d)
        if r:
            res["runs"][name] = r
    ra, peer = res["ratios"], res["peer"]
    for name, r in res["runs"].items():
        ra[f"{name} wall/steps-only"] = div(r["samples_per_s_wall"], r["samples_per_s_steps"])
        if peer:
            ra[f"{name}/peer wall"] = div(r["samples_per_s_wall"], peer.get("samples_per_s"))
            ra[f"{name}/peer steps-only"] = div(r["samples_per_s_steps"], peer.get("samples_per_s"))
    if "packed" in res["runs"] and "buckets" in res["runs"]:
        ra["packed/buckets wall"] = div(res["runs"]["packed"]["samples_per_s_wall"],
                                        res["runs"]["buckets"]["samples_per_s_wall"])
    return res


def div(a, b):
    return a / b if a is not None and b else None


def f(v, fmt="{:.2f}"):
    return NA if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def print_report(res, w=sys.stdout):
    if not res["runs"]:
        print("no runs (no metrics.jsonl with train records)", file=w)
    for name, r in res["runs"].items():
        sp = r["split_s"]
        print(f"run {name} ({r['dir']}): steps {r['first_step']}-{r['last_step']}, {r['samples']:.0f} samples, "
              f"exit {f(r['rc'], '{}')}", file=w)
        print(f"  samples/s   wall {f(r['samples_per_s_wall'])} (first step to last, {r['wall_s']:.1f} s), "
              f"steps only {f(r['samples_per_s_steps'])}, whole process {f(r['samples_per_s_process'])}", file=w)
        parts = [("start to first step", "start_to_first_step"), ("steps", "steps"), ("eval", "eval"),
                 ("checkpoint stall", "checkpoint"),
                 ("other between steps" if sp["checkpoint"] is not None else "other between steps (with checkpoints)",
                  "other_between_steps"),
                 ("final eval", "final_eval"), ("final checkpoint+export", "final_checkpoint_export"),
                 ("total", "total")]
        print("  split (s)   " + " | ".join(f"{label} {f(sp[k], '{:.1f}')}" for label, k in parts), file=w)
        print(f"  padding     mean pad_frac {f(r['pad_frac_mean'], '{:.3f}')}", file=w)
        if r["log_split"]:
            print(f"  log         {r['log_split']}", file=w)
    peer = res["peer"]
    if peer:
        grid = ", ".join(f"{g['len']}: {g['step_ms']:.0f}" for g in peer.get("grid", []))
        print(f"peer ({peer.get('mode', '?')}, batch {peer.get('batch', '?')} padded to its longest row): "
              f"{f(peer.get('samples_per_s'))} samples/s over {peer.get('batches', '?')} batches; "
              f"step ms by padded length {grid}", file=w)
    if res["ratios"]:
        print("ratios      " + " | ".join(f"{k} {f(v)}" for k, v in res["ratios"].items()), file=w)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="the benchmark's output directory, or one run's --out directory")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args()
    if not os.path.isdir(a.out):
        sys.exit(f"run_report.py: {a.out}: not a directory")
    res = report(a.out)
    if a.json:
        json.dump(res, sys.stdout, indent=1)
        print()
    else:
        print_report(res)


if __name__ == "__main__":
    main()
