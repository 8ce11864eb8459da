#!/usr/bin/env bash
# build-device.sh builds here, with CGO_ENABLED=0, everything that
# scripts/gpu-check.sh runs on the GPU machine (which has no Go): the dflash
# binary and the test binaries of cuda, gpu and jit, into .devbuild/runtime/
# (git-ignored). Then run, through the device tool:
#   command: bash scripts/gpu-check.sh    carry: [".devbuild/runtime"]
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .devbuild/runtime
export CGO_ENABLED=0 GOOS=linux GOARCH=amd64
go build -trimpath -ldflags="-s -w" -o .devbuild/runtime/dflash ./cmd/dflash
for p in cuda gpu jit; do
	go test -c -trimpath -ldflags="-s -w" -o ".devbuild/runtime/$p.test" "./$p"
done
ls -l .devbuild/runtime
du -sh .devbuild/runtime
