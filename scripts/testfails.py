#!/usr/bin/env python3
"""testfails.py prints, from a `go test -v` log, the output of every failed test (the lines
between its "=== RUN" and its "--- FAIL"), passing checks left out: the part of a long GPU test
log worth reading. Usage: python3 scripts/testfails.py LOG [MAXLINES]"""
import re
import sys

lines = open(sys.argv[1], errors="replace").read().splitlines()
limit = int(sys.argv[2]) if len(sys.argv) > 2 else 60
failed = {m.group(1) for l in lines if (m := re.match(r"\s*--- FAIL: (\S+)", l))}
out, cur = [], None
for l in lines:
    m = re.match(r"=== (RUN|CONT)\s+(\S+)", l)
    if m:
        cur = m.group(2)
        continue
    if cur in failed and "pass=true" not in l and not l.lstrip().startswith("--- PASS"):
        out.append(l)
print("\n".join(out[:limit]))
if len(out) > limit:
    print(f"... {len(out) - limit} more lines")
