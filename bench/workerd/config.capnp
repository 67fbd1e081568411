# workerd serving the counter as a Durable Object with SQLite storage, for
# bench/: `workerd serve config.capnp --socket-addr http=127.0.0.1:PORT
# --directory-path data=DIR` (the harness passes both; the defaults below
# serve on localhost:8787 with the data in ./data).
using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
    (name = "counter", worker = .counter),
    # Each object's database is DIR/counter/<id>.sqlite (plus -wal, -shm).
    (name = "data", disk = (path = "data", writable = true)),
  ],
  sockets = [(name = "http", address = "localhost:8787", http = (), service = "counter")],
);

const counter :Workerd.Worker = (
  modules = [(name = "counter.js", esModule = embed "counter.js")],
  compatibilityDate = "2026-11-01",
  durableObjectNamespaces = [
    # preventEviction: objects stay in memory, as wasmkeep serve's actors do
    # with the harness's --idle-timeout 10m, so no row measures a wake.
    (className = "Counter", uniqueKey = "counter", enableSql = true, preventEviction = true),
  ],
  durableObjectStorage = (localDisk = "data"),
  bindings = [(name = "COUNTER", durableObjectNamespace = "Counter")],
);
