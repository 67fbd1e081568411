package main

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// Concurrent admissions each free a slot of their own: with every slot
// held by an idle actor, as many new actors requested at the same moment
// all get in (issue 12, item 9: two admissions picked the same victim and
// one answered 503).
func TestConcurrentAdmissionsEachEvictOne(t *testing.T) {
	t.Run("max-instances 2", func(t *testing.T) { concurrentAdmissions(t, 2, 60) })
	t.Run("max-instances 4", func(t *testing.T) { concurrentAdmissions(t, 4, 30) })
}

// concurrentAdmissions fills a node of width slots with idle actors, then
// for each round requests width new actors at once, each on a client whose
// connection is already open so that the requests arrive together. An
// admission may wait 2 s for its victim, so that a loaded machine's slow
// hibernation is not taken for a lost race: an admission that lost one
// waits for a slot no actor frees.
func concurrentAdmissions(t *testing.T, width, rounds int) {
	n := startNode(t, node.Options{
		Classes:      map[string]string{"counter": counter(t)},
		MaxInstances: width, AdmissionWait: 2 * time.Second,
	})
	clients := make([]*http.Client, width)
	for i := range clients {
		clients[i] = &http.Client{Transport: &http.Transport{}}
		t.Cleanup(clients[i].CloseIdleConnections)
		n.expect("POST", fmt.Sprintf("/actor/counter/r0-%d", i), "", 200, "1\n")
	}
	post := func(c *http.Client, path string) int {
		resp, err := c.Post(n.url+path, "", nil)
		if err != nil {
			t.Error(err)
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range clients {
		post(c, "/_wasmkeep/health") // opens its connection
	}
	refused := 0
	for round := 1; round <= rounds; round++ {
		var wg sync.WaitGroup
		codes := make([]int, width)
		start := make(chan struct{})
		for i, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				codes[i] = post(c, fmt.Sprintf("/actor/counter/r%d-%d", round, i))
			}()
		}
		close(start)
		wg.Wait()
		for _, code := range codes {
			if code != 200 {
				refused++
				t.Logf("round %d: a new actor answered %d", round, code)
			}
		}
	}
	if refused > 0 {
		t.Errorf("%d of %d admissions refused though each could evict an idle actor", refused, width*rounds)
	}
}
