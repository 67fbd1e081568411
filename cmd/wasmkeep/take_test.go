package main

import (
	"bytes"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/callsign"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
)

// takingNodeOn is ownedNodeOn's node that believes signed calls on its
// public port (--cluster-plaintext accept), checked under the bucket's
// cluster secret, which it returns to sign with.
func takingNodeOn(t *testing.T, b bucket.Bucket, id string, classes map[string]string) (*testNode, *cluster.Member, callsign.Secret) {
	t.Helper()
	s := nodelease.Settings{TTL: time.Second, Grace: 500 * time.Millisecond, Safety: 300 * time.Millisecond, MaxSkew: 100 * time.Millisecond}
	m, err := cluster.Join(t.Context(), cluster.Config{Bucket: b, Clock: clock.Real, Settings: s, NodeID: id,
		Instance: id + "1", Info: nodelease.Info{Advertise: "http://127.0.0.1:1"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := callsign.LoadSecret(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	tn := startNode(t, node.Options{Classes: classes, Cluster: &node.Cluster{Member: m, Metrics: metrics.NewCluster(),
		Verifier: callsign.NewVerifier(secret, id, clock.Real, 0), PlainCalls: true}})
	go m.WatchPeers(t.Context())
	return tn, m, secret
}

// take sends a take call (book ADR 0017; ADR 1052) for path's actor to
// node id at url, signed under secret, with body; it returns the answer
// and the holder it names.
func take(t *testing.T, secret callsign.Secret, id, url, path, body string) (reply, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	callsign.NewSigner(secret, clock.Real).Sign(callsign.Call{Target: id, App: app.Default.String(), Method: "POST",
		Path: req.URL.RequestURI(), Body: []byte(body), Take: true}, req.Header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return reply{resp.StatusCode, strings.TrimSpace(b.String()), resp.Header.Get("x-wasmkeep-node")}, resp.Header.Get("x-wasmkeep-holder")
}

// takeBody is a take call's body for the default tenant.
const takeBody = "wasmkeep-take 1\ndefault\n"

// The take call's receiver: refusals as the book lists them (another
// tenant 403, a class not served 404, an actor that does not exist 404
// and not created, another node holding it 409 naming it, the node
// taking no actor 503, the bucket refusing the acquire 503), then a take
// that holds the actor, restored, running no guest code, with its
// alarm armed here: it fires on a. A take marker on a request no node
// signed is an ordinary request, run by the guest.
func TestTakeCall(t *testing.T) {
	engineNeutral(t)
	mem := buckettest.NewMemory(buckettest.Flaws{})
	g := &gatedOwners{Bucket: mem, fail: true, gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	classes := map[string]string{"probe": probe(t)}
	a, am, secret := takingNodeOn(t, g, "a", classes)
	b, bm := ownedNodeOn(t, mem, "b", classes, 0)
	waitTaker(t, am, 1)
	waitTaker(t, bm, 1)

	forged, _, _ := b.doH("POST", "/actor/probe/forged/hits", takeBody, http.Header{"X-Wasmkeep-Take": {"1"}})
	if code, body := b.do("GET", "/actor/probe/forged/hits", ""); forged != 200 || code != 200 || body != "2" {
		t.Errorf("a take marker no node signed: %d, then hits %d %q; want an ordinary request the guest ran (2 hits)", forged, code, body)
	}
	due := time.Now().Add(4 * time.Second).UnixMilli()
	b.expect("GET", "/actor/probe/p/alarm-set?durable=1&at="+strconv.FormatInt(due, 10), "", 200, "ok set")

	want := func(what string, got reply, holder string, code int, wantHolder, body string) {
		t.Helper()
		if got.code != code || holder != wantHolder || !strings.Contains(got.body, body) {
			t.Errorf("%s: %d %q (holder %q), want %d %q (holder %q)", what, got.code, got.body, holder, code, body, wantHolder)
		}
	}
	r, h := take(t, secret, "a", a.url, "/actor/probe/p/", "wasmkeep-take 1\nother\n")
	want("a take for another tenant", r, h, 403, "", "another tenant")
	r, h = take(t, secret, "a", a.url, "/actor/nope/p/", takeBody)
	want("a take for a class not served", r, h, 404, "", "unknown class")
	r, h = take(t, secret, "a", a.url, "/actor/probe/nosuch/", takeBody)
	want("a take for a name that was never an actor", r, h, 404, "", "unknown actor")
	if ok, err := a.storage.Exists(t.Context(), filepath.Join(a.dataDir, filepath.FromSlash(app.Default.StateRoot())),
		abi.Address{Tenant: "default", Class: "probe", Name: "nosuch"}); ok || err != nil {
		t.Errorf("a take for a name that was never an actor created it: %v %v", ok, err)
	}
	r, h = take(t, secret, "a", a.url, "/actor/probe/p/", takeBody)
	want("a take for an actor b holds", r, h, 409, "b", "held by node b")

	b.stop() // releases probe/p
	a.node.StopTaking("test")
	r, h = take(t, secret, "a", a.url, "/actor/probe/p/", takeBody)
	want("a take on a node taking no actor", r, h, 503, "", "takes no actor")
	a.node.ResumeTaking("test")
	g.armed.Store(true)
	r, h = take(t, secret, "a", a.url, "/actor/probe/p/", takeBody)
	want("a take whose acquire the bucket refused", r, h, 503, "", "")
	g.armed.Store(false)

	r, h = take(t, secret, "a", a.url, "/actor/probe/p/", takeBody)
	want("a take for an actor nobody holds", r, h, 200, "", "taken")
	if len(am.Owners.Holds()) != 1 {
		t.Errorf("a holds %d actors after the take, want probe/p", len(am.Owners.Holds()))
	}
	if w := a.metric("wasmkeep_wakes_total"); w != 0 {
		t.Errorf("a take made %v instances, want none: it runs no guest code", w)
	}
	if time.Now().UnixMilli() >= due {
		t.Fatal("the take ended after the alarm's time: its arming cannot be told apart from a late delivery")
	}
	var ran string
	waitFor(t, 10*time.Second, "probe/p's alarm to fire on a", func() bool {
		code, body := a.do("POST", "/actor/probe/p/query", "SELECT at FROM alarm_attempts")
		ran, _ = strings.CutPrefix(body, "ok ")
		return code == 200 && ran != "" && ran != body
	})
	// The timer's, armed by the take: the sweep's would be seconds later.
	if at, err := strconv.ParseInt(ran, 10, 64); err != nil || at-due > 2000 {
		t.Errorf("probe/p's alarm ran at %q, due %d: want it within 2 s, from a's timer", ran, due)
	}
}
