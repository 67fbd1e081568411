package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
)

// gatedDeletes holds every delete of an actor's history until gate is
// closed, whatever its context: an erase as slow as one can be.
type gatedDeletes struct {
	bucket.Bucket
	gate    chan struct{}
	entered chan struct{}
}

func (g *gatedDeletes) Delete(ctx context.Context, key string, cond bucket.Condition) error {
	if strings.HasPrefix(key, app.Default.StateRoot()+cluster.ActorsRoot) {
		select {
		case g.entered <- struct{}{}:
		default:
		}
		<-g.gate
	}
	return g.Bucket.Delete(context.WithoutCancel(ctx), key, cond)
}

// clusterNodeOn starts a node holding its actors in b, as node id, with
// short lease timings and every actor placed here.
func clusterNodeOn(t *testing.T, b bucket.Bucket, id string, classes map[string]string) (*testNode, *cluster.Member) {
	t.Helper()
	return clusterNode(t, b, id, node.Options{Classes: classes, Placement: placement.Local{}})
}

// clusterNodeIn is clusterNodeOn on the data directory dataDir ("" for a
// new one).
func clusterNodeIn(t *testing.T, b bucket.Bucket, id string, classes map[string]string, dataDir string) (*testNode, *cluster.Member) {
	t.Helper()
	return clusterNode(t, b, id, node.Options{Classes: classes, DataDir: dataDir, Placement: placement.Local{}})
}

// clusterNode is clusterNodeOn with opts (its classes, data directory,
// placement, the node's clock), the cluster's parts set here: a nil
// placement is the node's own with a bucket (placement.Owned).
func clusterNode(t *testing.T, b bucket.Bucket, id string, opts node.Options) (*testNode, *cluster.Member) {
	t.Helper()
	return clusterNodeWith(t, b, id, opts, shortNodeLease)
}

// shortNodeLease is clusterNode's lease timings (shortLease's): a lapse
// comes soon, and a bucket attempt may take 233 ms.
var shortNodeLease = nodelease.Settings{TTL: time.Second, Grace: 500 * time.Millisecond, Safety: 300 * time.Millisecond, MaxSkew: 100 * time.Millisecond}

// steadyNodeLease is steadyLease's timings, for an in-process node whose
// test is not about lapses: an attempt may take a second.
var steadyNodeLease = nodelease.Settings{TTL: 4 * time.Second, Grace: 500 * time.Millisecond, Safety: time.Second, MaxSkew: 100 * time.Millisecond}

// clusterNodeWith is clusterNode with the lease timings s.
func clusterNodeWith(t *testing.T, b bucket.Bucket, id string, opts node.Options, s nodelease.Settings) (*testNode, *cluster.Member) {
	t.Helper()
	m, err := cluster.Join(t.Context(), cluster.Config{Bucket: b, Clock: clock.Real, Settings: s, NodeID: id,
		Instance: id + "1", Info: nodelease.Info{Advertise: "http://127.0.0.1:1"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	opts.Cluster = &node.Cluster{Member: m, Metrics: metrics.NewCluster()}
	return startNode(t, opts), m
}

// A deleted actor's history is erased off its mailbox (issue 24, item 7d):
// while the erase's first delete is held, the actor's next event is
// answered, restored from the reset's snapshot under the delete's hold.
// Once the deletes go through, the history before the reset is gone and
// what the event wrote after it is kept: a node started afterwards on
// the bucket restores it.
func TestDeletedActorsEraseOffItsMailbox(t *testing.T) {
	engineNeutral(t)
	mem := buckettest.NewMemory(buckettest.Flaws{})
	slow := &gatedDeletes{Bucket: mem, gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	opened := false
	defer func() {
		if !opened {
			close(slow.gate)
		}
	}()
	classes := map[string]string{"probe": probe(t)}
	tn, m := clusterNodeOn(t, slow, "a", classes)
	url := tn.url + "/actor/probe/e1"
	for _, tok := range []string{"a1", "a2", "a3", "a4"} {
		if code, _, body, err := answer("POST", url+"/token?t="+tok); err != nil || code != 200 {
			t.Fatalf("token %s: %d %q %v", tok, code, body, err)
		}
	}
	if code, _, body, err := answer("POST", url+"/delete?durable=1"); err != nil || code != 200 || !strings.HasPrefix(body, "<nil>") {
		t.Fatalf("delete: %d %q %v", code, body, err)
	}
	select {
	case <-slow.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no erase began within 30 s of the delete")
	}
	type reply struct {
		code int
		body string
		err  error
	}
	next := make(chan reply, 1)
	go func() {
		code, _, body, err := answer("POST", url+"/token?t=b1")
		next <- reply{code, body, err}
	}()
	select {
	case r := <-next:
		if r.err != nil || r.code != 200 || strings.TrimSpace(r.body) != "1" {
			t.Fatalf("the event after the delete: %d %q %v, want 200 and one token", r.code, r.body, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the event after the delete was not answered while the erase's delete was held: it waits for the erase")
	}
	close(slow.gate)
	opened = true

	prefix, err := history.Prefix(history.Actor{Tenant: "default", Class: "probe", Name: "e1"})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		entries, err := bucket.ListAll(t.Context(), bucket.Under(mem, app.Default.StateRoot()), prefix)
		if err != nil {
			t.Fatal(err)
		}
		l, err := history.ParseListing(prefix, entries)
		if err != nil {
			t.Fatal(err)
		}
		var snap uint64
		for _, o := range l.Objects {
			if o.Key.Kind == history.Snapshot {
				snap = max(snap, o.Key.TXID)
			}
		}
		before := 0
		for _, o := range l.Objects {
			if o.Key.TXID < snap {
				before++
			}
		}
		if snap > 0 && before == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the deletes were let through, %d objects before the reset's snapshot (at %d) remain", before, snap)
		}
	}
	tn.stop()
	if err := m.Leave(t.Context()); err != nil {
		t.Fatal(err)
	}
	tn2, m2 := clusterNodeOn(t, mem, "b", classes)
	defer m2.Leave(context.Background())
	if code, _, body, err := answer("GET", tn2.url+"/actor/probe/e1/tokens"); err != nil || code != 200 || strings.TrimSpace(body) != "b1" {
		t.Fatalf("the actor restored on another node: %d %q %v, want the token written after the delete alone", code, body, err)
	}
}
