#!/usr/bin/env bash
# Builds the server and the counter guest from this checkout into a scratch
# directory and measures them. With `engines` first, `wasmkeep bench`
# compares the runtime engines and writes
# bench/results/<date>-<commit>-engines-<engines>.csv; otherwise
# bench/cmd/wkbench measures the configured one and writes
# bench/results/<date>-<commit>.csv. The other arguments go to the tool, for
# example -quick (wkbench), --quick or --engines wasmtime,wazero (engines).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# wasmkeep bench names the build after the commit go build records in the
# binary, which GOFLAGS=-buildvcs=false would leave out.
go build -buildvcs=true -o "$tmp/wasmkeep" ./cmd/wasmkeep
GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o "$tmp/counter.wasm" ./examples/counter
if [[ ${1-} == engines ]]; then
	shift
	"$tmp/wasmkeep" bench --actor counter="$tmp/counter.wasm" --out bench/results "$@"
else
	go build -o "$tmp/wkbench" ./bench/cmd/wkbench
	"$tmp/wkbench" -wasmkeep "$tmp/wasmkeep" -guest "$tmp/counter.wasm" -out bench/results "$@"
fi
