//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/bench/measure"
)

// The relocation rows (issue 28, item 5; ADR 1054): on a fifth cluster
// whose node a has a fifth of c.relocate instance slots (--max-instances)
// and b and c the default 1,000, c.relocate new actors are asked for at
// once through a, each held busy relocateBusy by a slow request: an
// uneven load a alone cannot hold. With its peers, a starts the actors it
// has no slot for on them (relocated); then b and c stop, and the same
// load of new actors through a alone is the control.
//   - relocate_503_with_peers, relocate_503_alone: the 503s of each;
//     relocate_avoided, their difference;
//   - relocate_served_by_peers: the first load's answers from b or c;
//   - relocate_local_p50, relocate_relocated_p50: the median time of a
//     request of that load a ran itself, and of one its peers ran (the
//     busy time in both; the admission's 250 ms wait for a slot, the hop
//     and the peer's acquire in the second).

// relocateSlots is node a's --max-instances for a load of n actors.
func relocateSlots(n int) int { return max(n/5, 1) }

func (c *config) relocation(stdout io.Writer, cl *cluster) ([]measure.Row, error) {
	a := cl.nodes[0]
	busy := c.relocateBusy
	fmt.Fprintf(stdout, "\nrelocation when a node is full: %d new actors at once through node a (--max-instances %d), each busy %v\n",
		c.relocate, relocateSlots(c.relocate), busy)
	if err := c.awaitRoom(cl, a); err != nil {
		return nil, err
	}
	with, err := relocateLoad(a, "with-", c.relocate, busy)
	if err != nil {
		return nil, err
	}
	var local, moved []time.Duration
	for _, r := range with {
		if r.node == "a" {
			local = append(local, r.took)
		} else if r.code == 200 {
			moved = append(moved, r.took)
		}
	}
	for _, n := range cl.nodes[1:] {
		if err := n.Stop(); err != nil {
			return nil, err
		}
		n.Running = nil
	}
	// a's view leaves b and c out from its next listing (their leases say
	// released); two make sure.
	if err := a.awaitListings(2); err != nil {
		return nil, err
	}
	alone, err := relocateLoad(a, "alone-", c.relocate, busy)
	if err != nil {
		return nil, err
	}
	refusedWith, refusedAlone := count503(with), count503(alone)
	fmt.Fprintf(stdout, "%-28s %6d of %d\n%-28s %6d\n%-28s %6d\n", "503s with peers", refusedWith, c.relocate,
		"answered by b or c", len(moved), "503s alone (the control)", refusedAlone)
	rows := []measure.Row{
		row("relocate_requests", float64(c.relocate), "requests"),
		row("relocate_503_with_peers", float64(refusedWith), "requests"),
		row("relocate_503_alone", float64(refusedAlone), "requests"),
		row("relocate_avoided", float64(refusedAlone-refusedWith), "requests"),
		row("relocate_served_by_peers", float64(len(moved)), "requests"),
	}
	if len(local) == 0 || len(moved) == 0 {
		return nil, fmt.Errorf("relocation: %d requests ran on a and %d on its peers; want some of each%s", len(local), len(moved), a.LogTail())
	}
	fmt.Fprintf(stdout, "%-28s %6.2f s\n%-28s %6.2f s\n", "request run on a, p50", measure.Percentile(local, 0.5).Seconds(),
		"request relocated, p50", measure.Percentile(moved, 0.5).Seconds())
	return append(rows, row("relocate_local_p50", measure.Percentile(local, 0.5).Seconds(), "s"),
		row("relocate_relocated_p50", measure.Percentile(moved, 0.5).Seconds(), "s")), nil
}

// relocated is one answer of a relocation load, and how long it took.
type relocated struct {
	answer
	took time.Duration
}

// relocateLoad asks for n new actors (prefix0, prefix1, ...) at once
// through node a, each request busy for busy; a request that got no
// answer is an error.
func relocateLoad(a *node, prefix string, n int, busy time.Duration) ([]relocated, error) {
	out := make([]relocated, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() {
			begin := time.Now()
			r, err := do("POST", a.URL()+"/actor/probe/"+prefix+strconv.Itoa(i)+"/sleep?ms="+strconv.FormatInt(busy.Milliseconds(), 10))
			out[i], errs[i] = relocated{r, time.Since(begin)}, err
		})
	}
	wg.Wait()
	for i, r := range out {
		switch {
		case errs[i] != nil:
			return nil, fmt.Errorf("relocation load: %w%s", errs[i], a.LogTail())
		case r.code != 200 && r.code != 503:
			return nil, fmt.Errorf("relocation load: %d %q%s", r.code, r.body, a.LogTail())
		}
	}
	return out, nil
}

func count503(rs []relocated) int {
	n := 0
	for _, r := range rs {
		if r.code == 503 {
			n++
		}
	}
	return n
}

// awaitRoom waits until every node but a says it has room in its
// heartbeat (cluster status), then for two more of a's listings, so a's
// view has it.
func (c *config) awaitRoom(cl *cluster, a *node) error {
	for limit := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		out, err := c.statusJSON(cl.bucketDir)
		if err != nil {
			return err
		}
		roomy := 0
		for _, n := range out.Nodes {
			if n.ID != a.id && n.Live && n.Room > 0 {
				roomy++
			}
		}
		if roomy == len(cl.nodes)-1 {
			break
		}
		if time.Now().After(limit) {
			return fmt.Errorf("the peers of a showed no room in their heartbeats within a minute: %+v", out.Nodes)
		}
	}
	return a.awaitListings(2)
}

// status is what awaitRoom reads of cluster status --json.
type status struct {
	Nodes []struct {
		ID   string `json:"id"`
		Live bool   `json:"live"`
		Room int    `json:"room"`
	} `json:"nodes"`
}

func (c *config) statusJSON(bucketDir string) (status, error) {
	out, err := c.wasmkeep("", "cluster", "status", "--json", "--bucket", "file://"+bucketDir)
	var st status
	if jerr := json.Unmarshal(out, &st); jerr != nil {
		return st, fmt.Errorf("cluster status --json: %v %v\n%s", err, jerr, out)
	}
	return st, nil
}

var listingsRE = regexp.MustCompile(`(?m)^wasmkeep_listing_seconds_count (\S+)$`)

// listings is how many heartbeat listings the node made.
func (n *node) listings() (float64, error) {
	body, err := expect("GET", n.metrics+"/metrics", "")
	if err != nil {
		return 0, err
	}
	m := listingsRE.FindStringSubmatch(body)
	if m == nil {
		return 0, fmt.Errorf("node %s: no wasmkeep_listing_seconds_count on its metrics page", n.id)
	}
	return strconv.ParseFloat(m[1], 64)
}

// awaitListings waits until the node listed the heartbeats k more times.
func (n *node) awaitListings(k float64) error {
	from, err := n.listings()
	if err != nil {
		return err
	}
	for limit := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		now, err := n.listings()
		if err != nil || now >= from+k {
			return err
		}
		if time.Now().After(limit) {
			return fmt.Errorf("node %s listed the heartbeats %v times in a minute, want %v", n.id, now-from, k)
		}
	}
}
