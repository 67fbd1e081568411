package main

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// BenchmarkFirstRequestNewActor is issue 6's first_request_new_actor row in
// process, on each engine and for each counter: one GET to an actor that
// does not exist yet (a new database, host tables, an instance, the
// counter's on-init, the request), one after another on one connection.
// The Go counter is served from its pre-initialised snapshot (ADR 1040),
// as a node that has run before serves it. Besides the time it reports the
// process's CPU and minor page faults per new actor (clients included) and
// the node's own instantiation time. Run it with TMPDIR=/dev/shm to
// leave the disk out, as the bench does, and
// WASMKEEP_STORAGE__SQLITE__DRIVER=modernc for the other driver (mattn is
// the default of a build with cgo and -tags sqlite_fts5).
func BenchmarkFirstRequestNewActor(b *testing.B) {
	guests := []struct{ name, wasm string }{
		{"c", buildCGuest(b, "examples/c/counter")},
		{"go", counter(b)},
	}
	for _, engine := range []string{"wazero", "wasmtime"} {
		for _, g := range guests {
			b.Run(engine+"/"+g.name, func(b *testing.B) {
				n := startNodeOn(b, engine, node.Options{Classes: map[string]string{g.name: g.wasm}, MaxInstances: 1 << 20})
				get := func(path string) {
					if code, body := n.do(http.MethodGet, path, ""); code != http.StatusOK {
						b.Fatalf("GET %s: %d %s", path, code, body)
					}
				}
				if g.name == "go" {
					waitLog(b, n, `msg="module pre-initialised`)
				}
				get("/actor/" + g.name + "/warm")
				instantiated := n.metric("wasmkeep_instantiate_seconds_sum")
				b.ResetTimer()
				before := processUsage(b)
				for i := range b.N {
					get(fmt.Sprintf("/actor/%s/new-%d", g.name, i))
				}
				after := processUsage(b)
				b.StopTimer()
				b.ReportMetric(float64((after.cpu()-before.cpu()).Microseconds())/float64(b.N), "cpu-µs/op")
				b.ReportMetric(float64(after.Minflt-before.Minflt)/float64(b.N), "minflt/op")
				// The node's own measure of the wake (wasmkeep_instantiate_seconds).
				b.ReportMetric((n.metric("wasmkeep_instantiate_seconds_sum")-instantiated)*1e6/float64(b.N), "instantiate-µs/op")
			})
		}
	}
}
