package main

import (
	"fmt"
	"io"
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
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			get := func(path string) {
				resp, err := client.Get(n.url + path)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("GET %s: %d", path, resp.StatusCode)
				}
			}
			get("/actor/c/warm")
			b.ResetTimer()
			for i := range b.N {
				get(fmt.Sprintf("/actor/c/new-%d", i))
			}
		})
	}
}
