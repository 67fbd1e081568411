package main

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// BenchmarkFirstRequestNewActor is issue 6's first_request_new_actor row in
// process, on each engine: one GET to an actor that does not exist yet (a
// new database, host tables, an instance, the C counter's on-init, the
// request), one after another on one connection. Run it with
// TMPDIR=/dev/shm to leave the disk out, as the bench does, and
// WASMKEEP_STORAGE__SQLITE__DRIVER=mattn for the other driver.
func BenchmarkFirstRequestNewActor(b *testing.B) {
	guest := buildCGuest(b, "examples/c/counter")
	for _, engine := range []string{"wazero", "wasmtime"} {
		b.Run(engine, func(b *testing.B) {
			n := startNodeOn(b, engine, node.Options{Classes: map[string]string{"c": guest}, MaxInstances: 1 << 20})
			get := func(path string) {
				if code, body := n.do(http.MethodGet, path, ""); code != http.StatusOK {
					b.Fatalf("GET %s: %d %s", path, code, body)
				}
			}
			get("/actor/c/warm")
			b.ResetTimer()
			cpu0 := processCPU(b)
			for i := range b.N {
				get(fmt.Sprintf("/actor/c/new-%d", i))
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}
