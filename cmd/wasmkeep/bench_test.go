package main

import (
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// The counter over HTTP on one node, for profiling the hot path
// (go test -bench Counter -cpuprofile cpu.out). bench/ measures the server
// as a separate process.
func BenchmarkCounterRead(b *testing.B) { benchCounter(b, "GET", false) }

// The C counter's read, against which the Go guest's own cost shows.
func BenchmarkCounterReadC(b *testing.B) {
	benchCounterGuest(b, buildCGuest(b, "examples/c/counter"), "GET", false)
}

func BenchmarkCounterWrite(b *testing.B) { benchCounter(b, "POST", false) }

func BenchmarkCounterNewActor(b *testing.B) { benchCounter(b, "POST", true) }

func benchCounter(b *testing.B, method string, fresh bool) {
	benchCounterGuest(b, counter(b), method, fresh)
}

func benchCounterGuest(b *testing.B, guest, method string, fresh bool) {
	n := startNode(b, node.Options{Classes: map[string]string{"counter": guest}, MaxInstances: 100000})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	send := func(path string) {
		req, _ := http.NewRequest(method, n.url+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("%s %s: %d", method, path, resp.StatusCode)
		}
	}
	send("/actor/counter/warm")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		path := "/actor/counter/warm"
		if fresh {
			path = fmt.Sprintf("/actor/counter/new-%d", i)
		}
		send(path)
	}
}
