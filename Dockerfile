# The WasmKeep server image: `docker build -t wasmkeep .` (or buildah, podman).
# Stage 1 builds the binary with cgo (the wasmtime engine and the mattn SQLite
# driver are cgo; -tags sqlite_fts5 gives that driver FTS5, which it requires)
# and the counter example, which deploy/compose.yaml serves.
FROM docker.io/library/golang:1.26-bookworm AS build
WORKDIR /src
COPY . .
# -buildvcs=false: the build context carries no .git (.dockerignore), so the
# binary's version is "(devel)" and `wasmkeep version` names no commit.
RUN CGO_ENABLED=1 go build -buildvcs=false -tags sqlite_fts5 -trimpath -o /out/wasmkeep ./cmd/wasmkeep \
 && GOOS=wasip1 GOARCH=wasm go build -buildvcs=false -buildmode=c-shared -o /out/counter.wasm ./examples/counter

# The S3 store deploy/compose.yaml runs: VersityGW, the store the tests use
# (plugins/bucket-s3, conditional writes and deletes), at the version they pin.
FROM docker.io/library/golang:1.26-bookworm AS versitygw-build
RUN GOBIN=/out go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
FROM docker.io/library/debian:bookworm-slim AS versitygw
COPY --from=versitygw-build /out/versitygw /usr/local/bin/versitygw
RUN useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin versitygw \
 && install -d -o versitygw -g versitygw /data
USER versitygw
ENTRYPOINT ["/usr/local/bin/versitygw"]

# The server's image, the default target: glibc (the binary is dynamically linked), CA roots for S3 over
# HTTPS and actors' outbound fetches, curl for the health check; nothing else.
FROM docker.io/library/debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/wasmkeep --shell /usr/sbin/nologin wasmkeep \
 && install -d -o wasmkeep -g wasmkeep /var/lib/wasmkeep /var/lib/wasmkeep/data
COPY --from=build /out/wasmkeep /usr/local/bin/wasmkeep
COPY --from=build /out/counter.wasm /usr/share/wasmkeep/counter.wasm
USER wasmkeep
WORKDIR /var/lib/wasmkeep
# Settings as variables, so that `docker run IMAGE serve --actor ...` needs
# no more: the client port on every interface of the container, the actors'
# databases and the compile cache on the volume. Mount a real disk there,
# never the overlay filesystem (SQLite relies on local locking and fsync).
# The cache is named rather than left to the default (the user's cache
# directory, ADR 1058): a container's is its writable layer, lost with it,
# so each new container would compile every class again; on the volume a
# restarted container starts from it.
ENV WASMKEEP_NODE__LISTEN=0.0.0.0:8080 \
    WASMKEEP_NODE__DATA_DIR=/var/lib/wasmkeep/data \
    WASMKEEP_NODE__CACHE_DIR=/var/lib/wasmkeep/cache
VOLUME /var/lib/wasmkeep
# 8080: clients; 7443: the cluster listener (--cluster-listen), peers only;
# 9100: metrics (--metrics-listen), Prometheus only.
EXPOSE 8080 7443 9100
# A clean stop takes up to about 29 s: run with --stop-timeout 30.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD curl -fsS -o /dev/null http://127.0.0.1:8080/_wasmkeep/ready || exit 1
ENTRYPOINT ["/usr/local/bin/wasmkeep"]
CMD ["serve", "--actor", "counter=/usr/share/wasmkeep/counter.wasm"]
