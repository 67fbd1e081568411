#!/usr/bin/env bash
# Builds the server and the counter guest from this checkout into a scratch
# directory and measures them.
#   ./bench/run.sh            bench/cmd/wkbench: the configured engine, the Go
#                             counter; writes bench/results/<date>-<commit>.csv
#   ./bench/run.sh engines    wasmkeep bench: every engine side by side;
#                             writes ...-engines-<engines>.csv
#   ./bench/run.sh workerd    bench/cmd/compare: workerd (installed here from
#                             bench/workerd/package-lock.json with npm ci), then
#                             the Go and the C counter (sdk/c/wkcc) on wazero and
#                             wasmtime, 3 runs; writes ...-workerd-run<N>.csv
#                             and ...-workerd-median.csv. BEFORE=COMMIT also
#                             runs every guest and engine on that commit's
#                             build (before/ENGINE/LANG) and sets each
#                             resident row after against before
#   ./bench/run.sh restart    bench/cmd/wkrestart: restarts with 1,000, 10,000
#                             and 100,000 actors on disk (built once, in
#                             $TMPDIR/wkrestart); writes ...-restart.csv
#   ./bench/run.sh bucket     bench/cmd/wkbucket: durable writes on a node alone,
#                             on bucket-fs and on bucket-s3 (VersityGW, and
#                             MinIO with -stores local,fs,s3,minio), restores
#                             against history length; writes ...-bucket.csv
#   ./bench/run.sh hostile    bench/cmd/wkhostile: the counter alone and beside
#                             the hostile guest (cmd/wasmkeep/testdata/guests/
#                             hostile); writes ...-hostile-<engine>.csv
#   ./bench/run.sh cluster    bench/cmd/wkcluster: three nodes on bucket-fs: takeover
#                             after SIGKILL at the default lease timings (20 kills,
#                             about 7 minutes; -kills N), a forwarded GET's added
#                             latency over mutual TLS and in plain HTTP, and
#                             actors.call across nodes against one node, and a
#                             deploy's rollout to every node under load (20
#                             deploys, -deploys N), a secret's (20 secrets
#                             set, -secrets N), alarm recovery after the
#                             holder's death (-alarms N) and the 503s
#                             relocation avoids when one node is full
#                             (-relocate N), and a moved actor's
#                             unavailability (-move N); writes ...-cluster.csv
#   ./bench/run.sh kv         bench/cmd/wkkv: the key-value shard class (sdk/go/kv)
#                             on one node: get, local put and durable put through
#                             one shard, wazero then wasmtime; writes ...-kv.csv
#   ./bench/run.sh queue      bench/cmd/wkqueue: one queue (examples/jobs/queue)
#                             on one node, wazero and wasmtime: send (durable,
#                             single and batches of 10) and pull+ack (plain),
#                             p50/p99 one at a time and messages per second
#                             with 8 clients; writes ...-queue.csv
#   ./bench/run.sh workflow   bench/cmd/wkworkflow: one run of a workflow over 0,
#                             100, 1,000 and 5,000 recorded steps, on wazero and
#                             wasmtime; writes ...-workflow.csv
# The other arguments go to the tool, for example -quick (wkbench, compare),
# --quick or --engines wasmtime,wazero (engines), -runs 5 (compare),
# -engine wasmtime (hostile).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# wasmkeep bench names the build after the commit go build records in the
# binary, which GOFLAGS=-buildvcs=false would leave out. The server is built
# as the project ships it (-tags sqlite_fts5: the mattn driver, ADR 1064),
# whatever GOFLAGS says.
go build -buildvcs=true -tags sqlite_fts5 -o "$tmp/wasmkeep" ./cmd/wasmkeep
GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o "$tmp/counter.wasm" ./examples/counter
case ${1-} in
engines)
	shift
	"$tmp/wasmkeep" bench --actor counter="$tmp/counter.wasm" --out bench/results "$@"
	;;
workerd)
	shift
	# Exactly the version package-lock.json pins; its install script only
	# links a launcher, and compare runs the platform package's binary.
	npm ci --ignore-scripts --no-audit --no-fund --prefix bench/workerd
	sdk/c/wkcc -o "$tmp/c-counter.wasm" examples/c/counter/counter.c
	go build -o "$tmp/compare" ./bench/cmd/compare
	before=()
	if [ -n "${BEFORE-}" ]; then
		git worktree add --detach "$tmp/before" "$BEFORE"
		(cd "$tmp/before" && go build -tags sqlite_fts5 -o "$tmp/wasmkeep-before" ./cmd/wasmkeep)
		git worktree remove --force "$tmp/before"
		before=(-before "$tmp/wasmkeep-before")
	fi
	"$tmp/compare" -workerd bench/workerd -wasmkeep "$tmp/wasmkeep" "${before[@]}" \
		-guest go="$tmp/counter.wasm" -guest c="$tmp/c-counter.wasm" -out bench/results "$@"
	;;
restart)
	shift
	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o "$tmp/probe.wasm" ./cmd/wasmkeep/testdata/guests/probe
	go build -o "$tmp/wkrestart" ./bench/cmd/wkrestart
	"$tmp/wkrestart" -wasmkeep "$tmp/wasmkeep" -guest "$tmp/probe.wasm" -out bench/results "$@"
	;;
bucket)
	shift
	go build -o "$tmp/wkbucket" ./bench/cmd/wkbucket
	"$tmp/wkbucket" -wasmkeep "$tmp/wasmkeep" -guest "$tmp/counter.wasm" -out bench/results "$@"
	;;
cluster)
	shift
	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o "$tmp/probe.wasm" ./cmd/wasmkeep/testdata/guests/probe
	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o "$tmp/room.wasm" ./cmd/wasmkeep/testdata/guests/room
	go build -o "$tmp/wkcluster" ./bench/cmd/wkcluster
	"$tmp/wkcluster" -wasmkeep "$tmp/wasmkeep" -guest "$tmp/probe.wasm" -room "$tmp/room.wasm" -out bench/results "$@"
	;;
kv)
	shift
	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o "$tmp/kv.wasm" ./examples/jobs/kv
	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o "$tmp/kvclient.wasm" ./cmd/wasmkeep/testdata/guests/kvclient
	go build -o "$tmp/wkkv" ./bench/cmd/wkkv
	"$tmp/wkkv" -wasmkeep "$tmp/wasmkeep" -shard "$tmp/kv.wasm" -client "$tmp/kvclient.wasm" -out bench/results "$@"
	;;
queue)
	shift
	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o "$tmp/queue.wasm" ./examples/jobs/queue
	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o "$tmp/queueclient.wasm" ./cmd/wasmkeep/testdata/guests/queueclient
	go build -o "$tmp/wkqueue" ./bench/cmd/wkqueue
	"$tmp/wkqueue" -wasmkeep "$tmp/wasmkeep" -queue "$tmp/queue.wasm" -client "$tmp/queueclient.wasm" -out bench/results "$@"
	;;
hostile)
	shift
	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o "$tmp/hostile.wasm" ./cmd/wasmkeep/testdata/guests/hostile
	go build -o "$tmp/wkhostile" ./bench/cmd/wkhostile
	"$tmp/wkhostile" -wasmkeep "$tmp/wasmkeep" -counter "$tmp/counter.wasm" -hostile "$tmp/hostile.wasm" -out bench/results "$@"
	;;
workflow)
	shift
	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o "$tmp/wkworkflow.wasm" ./bench/cmd/wkworkflow/guest
	go build -o "$tmp/wkworkflow" ./bench/cmd/wkworkflow
	"$tmp/wkworkflow" -wasmkeep "$tmp/wasmkeep" -guest "$tmp/wkworkflow.wasm" -out bench/results "$@"
	;;
*)
	go build -o "$tmp/wkbench" ./bench/cmd/wkbench
	"$tmp/wkbench" -wasmkeep "$tmp/wasmkeep" -guest "$tmp/counter.wasm" -out bench/results "$@"
	;;
esac
