#!/usr/bin/env bash
# Builds the server and the counter guest from this checkout into a scratch
# directory, measures them with bench/cmd/wkbench and writes
# bench/results/<date>-<commit>.csv. Arguments go to wkbench, for example
# -serve-arg=--config=other-engine.yaml or -quick.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/wasmkeep" ./cmd/wasmkeep
GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o "$tmp/counter.wasm" ./examples/counter
go build -o "$tmp/wkbench" ./bench/cmd/wkbench
"$tmp/wkbench" -wasmkeep "$tmp/wasmkeep" -guest "$tmp/counter.wasm" -out bench/results "$@"
