package main

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// BenchmarkResidentRequests is issue 6's server_cpu_per_request load in
// process, on each engine: 8 clients sending GET or POST, with even odds, to
// 1,000 resident counters, Go or C. Run it with -cpuprofile to see where the
// server's CPU goes; TMPDIR=/dev/shm leaves the disk out, as the bench does.
func BenchmarkResidentRequests(b *testing.B) {
	guests := map[string]string{"go": counter(b), "c": buildCGuest(b, "examples/c/counter")}
	for _, run := range []struct{ engine, lang string }{{"wazero", "go"}, {"wasmtime", "go"}, {"wazero", "c"}, {"wasmtime", "c"}} {
		engine, guest := run.engine, guests[run.lang]
		b.Run(engine+"/"+run.lang, func(b *testing.B) {
			const actors, clients = 1000, 8
			n := startNodeOn(b, engine, node.Options{Classes: map[string]string{"counter": guest}, MaxInstances: 1 << 20})
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
			do := func(i int) error {
				url := fmt.Sprintf("%s/actor/counter/a%d", n.url, i%actors)
				method := http.MethodGet
				if i/actors%2 == 1 {
					method = http.MethodPost
				}
				req, err := http.NewRequest(method, url, nil)
				if err != nil {
					return err
				}
				resp, err := client.Do(req)
				if err != nil {
					return err
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("%s %s: %d", method, url, resp.StatusCode)
				}
				return nil
			}
			for i := range actors { // make every actor resident
				if err := do(i); err != nil {
					b.Fatal(err)
				}
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, clients)
			b.ResetTimer()
			cpu0 := processCPU(b)
			for range clients {
				wg.Go(func() {
					for i := int(next.Add(1)); i <= b.N; i = int(next.Add(1)) {
						if err := do(i * 7919); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			// The clients' CPU is in it too: compare engines and builds, not
			// with the bench's server-only row.
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
		})
	}
}

// processCPU is the CPU time this process has used, user and system.
func processCPU(b testing.TB) time.Duration { return processUsage(b).cpu() }

// usage is what getrusage says of this process.
type usage struct{ syscall.Rusage }

func processUsage(b testing.TB) usage {
	var u usage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u.Rusage); err != nil {
		b.Fatal(err)
	}
	return u
}

// cpu is the CPU time used, user and system.
func (u usage) cpu() time.Duration { return time.Duration(u.Utime.Nano() + u.Stime.Nano()) }
