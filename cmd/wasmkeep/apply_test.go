package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/node/access"
)

// The node's side of a deploy (ADR 1045; book ADR 0008 and its revision
// of 2026-11-04): a version applied whole, and no old code on newer data.

// schemaV1 and schemaV2 are two builds of one class: the second's on-init
// migrates what the first made.
func schemaV1(t testing.TB) string {
	return buildGuest(t, "cmd/wasmkeep/testdata/guests/schema", "")
}
func schemaV2(t testing.TB) string {
	return buildGuest(t, "cmd/wasmkeep/testdata/guests/schema", "-X main.version=2")
}

// apply applies v to tn's node and fails the test on an error.
func (tn *testNode) apply(v node.Version) {
	tn.t.Helper()
	if err := tn.node.Apply(context.Background(), v); err != nil {
		tn.t.Fatalf("applying version %s (seq %d): %v", v.ID, v.Seq, err)
	}
}

func TestApplySwapsAVersionWhole(t *testing.T) {
	engineNeutral(t)
	v1, v2 := schemaV1(t), schemaV2(t)
	tn := startNode(t, node.Options{Classes: map[string]string{"s": v1}, VersionID: "aaaa", Seq: 1})
	tn.expect("GET", "/actor/s/a", "", 200, "version=1 inits=1 hits=1 greeting=")
	tn.expect("GET", "/actor/s/a", "", 200, "version=1 inits=1 hits=2 greeting=")

	// New bytes: the resident actor switches at its next event, on a new
	// instance, and the new version's on-init runs (its migration).
	tn.apply(node.Version{ID: "bbbb", Seq: 2, Classes: map[string]node.ClassSpec{"s": {Module: v2}}})
	tn.expect("GET", "/actor/s/a", "", 200, "version=2 inits=1,2 hits=1 greeting=")
	tn.expect("GET", "/actor/s/a", "", 200, "version=2 inits=1,2 hits=2 greeting=")
	if got := tn.metric("wasmkeep_deploy_seq"); got != 2 {
		t.Errorf("wasmkeep_deploy_seq = %v, want 2", got)
	}
	if got := tn.metric(`wasmkeep_deploy_version_info{version="bbbb"}`); got != 1 {
		t.Errorf("the version served, bbbb: %v, want 1", got)
	}

	// A version that does not build changes nothing: v2 stays whole, its
	// instance kept; the error names the class.
	broken := filepath.Join(t.TempDir(), "broken.wasm")
	os.WriteFile(broken, []byte("not a module"), 0o600)
	err := tn.node.Apply(context.Background(), node.Version{ID: "cccc", Seq: 3, Classes: map[string]node.ClassSpec{
		"s": {Module: v1}, "t": {Module: broken},
	}})
	if err == nil || !strings.Contains(err.Error(), "class t") {
		t.Errorf("applying a version with a broken class: %v, want an error naming class t", err)
	}
	tn.expect("GET", "/actor/s/a", "", 200, "version=2 inits=1,2 hits=3 greeting=")
	tn.expect("GET", "/actor/t/a", "", 404, "unknown class \"t\"\n")

	// A version below the seq served is refused.
	if err := tn.node.Apply(context.Background(), node.Version{ID: "dddd", Seq: 1, Classes: map[string]node.ClassSpec{"s": {Module: v1}}}); err == nil {
		t.Error("a version of a lower seq was applied")
	}
	tn.expect("GET", "/actor/s/a", "", 200, "version=2 inits=1,2 hits=4 greeting=")

	// Configuration alone: a new instance, on-init not run again.
	tn.apply(node.Version{ID: "eeee", Seq: 4, Classes: map[string]node.ClassSpec{"s": {Module: v2, Config: map[string]string{"GREETING": "hi"}}}})
	tn.expect("GET", "/actor/s/a", "", 200, "version=2 inits=1,2 hits=1 greeting=hi")

	// Rules alone: the instance kept, the new rule deciding at once.
	existing, _ := access.Parse("existing")
	tn.apply(node.Version{ID: "ffff", Seq: 5, Classes: map[string]node.ClassSpec{"s": {Module: v2, Access: existing, Config: map[string]string{"GREETING": "hi"}}}})
	tn.expect("GET", "/actor/s/a", "", 200, "version=2 inits=1,2 hits=2 greeting=hi")
	tn.expect("GET", "/actor/s/new", "", 404, "unknown actor \"new\"\n")

	// A required name unset: 503, naming nothing; set, even empty, served.
	tn.apply(node.Version{ID: "gggg", Seq: 6, Classes: map[string]node.ClassSpec{"s": {Module: v2, Requires: []string{"TOKEN"}}}})
	code, body, hdr := tn.doH("GET", "/actor/s/a", "", nil)
	if code != 503 || hdr.Get("Retry-After") != "1" || strings.Contains(body, "TOKEN") {
		t.Errorf("a class missing a required name: %d %q (Retry-After %q), want 503 naming nothing", code, body, hdr.Get("Retry-After"))
	}
	if !strings.Contains(tn.log.String(), `missing=TOKEN`) {
		t.Error("the log does not name the missing value")
	}
	tn.apply(node.Version{ID: "hhhh", Seq: 7, Classes: map[string]node.ClassSpec{"s": {Module: v2, Requires: []string{"TOKEN"}, Config: map[string]string{"TOKEN": ""}}}})
	tn.expect("GET", "/actor/s/a", "", 200, "version=2 inits=1,2 hits=1 greeting=")

	// A class the version drops answers 404, its resident actor's too.
	tn.apply(node.Version{ID: "iiii", Seq: 8, Classes: map[string]node.ClassSpec{"t": {Module: v1}}})
	tn.expect("GET", "/actor/s/a", "", 404, "unknown class \"s\"\n")
	tn.expect("GET", "/actor/t/a", "", 200, "version=1 inits=1 hits=1 greeting=")
}

// The node's --env values win over the deployed configuration.
func TestApplyEnvWinsOverConfig(t *testing.T) {
	v1 := schemaV1(t)
	tn := startNode(t, node.Options{Classes: map[string]string{"s": v1}, Env: map[string]map[string]string{"s": {"GREETING": "env-value-x"}}})
	tn.apply(node.Version{ID: "aaaa", Seq: 1, Classes: map[string]node.ClassSpec{"s": {Module: v1, Config: map[string]string{"GREETING": "config-value-y"}}}})
	tn.expect("GET", "/actor/s/a", "", 200, "version=1 inits=1 hits=1 greeting=env-value-x")
	if log := tn.log.String(); !strings.Contains(log, "name=GREETING") || strings.Contains(log, "value-") {
		t.Errorf("the overlap is to be logged by name, never by value:\n%s", log)
	}
}

// SetBehind makes the node not ready and counts the failure.
func TestSetBehindMakesTheNodeNotReady(t *testing.T) {
	tn := startNode(t, node.Options{Classes: map[string]string{"s": schemaV1(t)}})
	tn.expect("GET", "/_wasmkeep/ready", "", 200, "ready\n")
	tn.node.SetBehind(errors.New("current unreadable"))
	tn.expect("GET", "/_wasmkeep/ready", "", 503, "not ready\n")
	if got := tn.metric(`wasmkeep_not_ready{reason="app version not followed"}`); got != 1 {
		t.Errorf("the reason not ready: %v, want 1", got)
	}
	if got := tn.metric("wasmkeep_deploy_follow_failures_total"); got != 1 {
		t.Errorf("follow failures: %v, want 1", got)
	}
	tn.node.SetBehind(nil)
	tn.expect("GET", "/_wasmkeep/ready", "", 200, "ready\n")
}

// seqAheadDir returns a data directory whose actor s/a was last served by
// version 2 (seq 2), which migrated it, and the node is stopped.
func seqAheadDir(t *testing.T) string {
	dir := t.TempDir()
	ahead := startNode(t, node.Options{DataDir: dir, Classes: map[string]string{"s": schemaV2(t)}, VersionID: "bbbb", Seq: 2})
	ahead.expect("GET", "/actor/s/a", "", 200, "version=2 inits=2 hits=1 greeting=")
	ahead.stop()
	return dir
}

// A node still on seq 1 never runs version 1 on an actor version 2 has
// written: it asks its follower (Behind) and answers 503 when no newer
// version comes. Nor does a node serving --actor classes (seq 0).
func TestOldCodeRefusedOnNewerData(t *testing.T) {
	engineNeutral(t)
	dir, v2 := seqAheadDir(t), schemaV2(t)
	asked := make(chan uint64, 4)
	behind := startNode(t, node.Options{DataDir: dir, Classes: map[string]string{"s": schemaV1(t)}, VersionID: "aaaa", Seq: 1,
		Behind: func(seq uint64) { asked <- seq }})
	code, body, hdr := behind.doH("GET", "/actor/s/a", "", nil)
	if code != 503 || hdr.Get("Retry-After") != "1" || !strings.Contains(body, "newer version is not on this node yet") {
		t.Errorf("old code on newer data: %d %q (Retry-After %q), want 503 with Retry-After 1", code, body, hdr.Get("Retry-After"))
	}
	select {
	case seq := <-asked:
		if seq != 2 {
			t.Errorf("Behind(%d), want Behind(2)", seq)
		}
	default:
		t.Error("Behind was not called")
	}
	behind.stop()

	// The follower's Apply during the wait lets the event run, upgraded.
	var tn *testNode
	tn = startNode(t, node.Options{DataDir: dir, Classes: map[string]string{"s": schemaV1(t)}, VersionID: "aaaa", Seq: 1,
		AdmissionWait: time.Minute, // the bound of the wait: the Apply below ends it
		Behind: func(seq uint64) {
			go func() {
				if err := tn.node.Apply(context.Background(), node.Version{ID: "bbbb", Seq: seq, Classes: map[string]node.ClassSpec{"s": {Module: v2}}}); err != nil {
					t.Error(err)
				}
			}()
		}})
	tn.expect("GET", "/actor/s/a", "", 200, "version=2 inits=2 hits=1 greeting=")
	tn.stop()

	// --actor classes (seq 0) on data a deployed version wrote: refused
	// as well, Behind asked.
	plain := startNode(t, node.Options{DataDir: dir, Classes: map[string]string{"s": schemaV1(t)},
		Behind: func(seq uint64) { asked <- seq }})
	code, body, hdr = plain.doH("GET", "/actor/s/a", "", nil)
	if code != 503 || hdr.Get("Retry-After") != "1" || !strings.Contains(body, "newer version is not on this node yet") {
		t.Errorf("--actor code on deployed data: %d %q (Retry-After %q), want 503 with Retry-After 1", code, body, hdr.Get("Retry-After"))
	}
	select {
	case seq := <-asked:
		if seq != 2 {
			t.Errorf("the seq-0 node: Behind(%d), want Behind(2)", seq)
		}
	default:
		t.Error("the seq-0 node: Behind was not called")
	}
	plain.stop()

	// On data no deployed version wrote, a seq-0 node runs as before.
	fresh := startNode(t, node.Options{Classes: map[string]string{"s": schemaV1(t)}})
	fresh.expect("GET", "/actor/s/a", "", 200, "version=1 inits=1 hits=1 greeting=")
}

// A class a version drops closes its actors' sockets with 1012: their
// clients reconnect, to a node that serves it or to a 404.
func TestApplyDroppedClassClosesSockets(t *testing.T) {
	tn := startRoom(t, node.Options{VersionID: "aaaa", Seq: 1})
	c := dial(t, tn, "/actor/room/r1")
	if got := readText(t, c); !strings.HasPrefix(got, "welcome") {
		t.Fatalf("the room said %q, want its welcome", got)
	}
	tn.apply(node.Version{ID: "bbbb", Seq: 2, Classes: map[string]node.ClassSpec{"s": {Module: schemaV1(t)}}})
	expectClose(t, c, websocket.StatusServiceRestart, "the class is no longer served")
	tn.expect("GET", "/actor/room/r1", "", 404, "unknown class \"room\"\n")
}

// A module a version brings is pre-initialised as one a start loads.
func TestApplyPreinitialises(t *testing.T) {
	tn := startNode(t, node.Options{})
	tn.apply(node.Version{ID: "aaaa", Seq: 1, Classes: map[string]node.ClassSpec{"p": {Module: preinitGuest(t, "-X main.variant=apply")}}})
	waitLog(t, tn, `msg="module pre-initialised"`)
	if a, b := tokens(tn); a != b {
		t.Errorf("actors of a pre-initialised module got init tokens %s and %s: init ran in each", a, b)
	}
}

// A dropped class's alarm leaves the timer and is armed again, from the
// alarm index, by a version that serves the class again; while a required
// name is unset the alarm waits, and fires once it is set. On the node's
// clock: the wall clock reaches none of it.
func TestApplyAlarms(t *testing.T) {
	n, m := newManualNode(t, node.Options{VersionID: "aaaa", Seq: 1})
	probeV, roomV := probe(t), room(t)
	n.expect("GET", "/actor/probe/a/alarm-set?in=3600000", "", 200, "set")
	n.apply(node.Version{ID: "bbbb", Seq: 2, Classes: map[string]node.ClassSpec{"room": {Module: roomV}}})
	m.Advance(2 * time.Hour)
	settle(t, m)

	n.apply(node.Version{ID: "cccc", Seq: 3, Classes: map[string]node.ClassSpec{
		"probe": {Module: probeV, Requires: []string{"X"}}, "room": {Module: roomV},
	}})
	failed := `wasmkeep_events_total{class="probe",kind="alarm",outcome="failed"}`
	waitFor(t, time.Minute, "the alarm refused for its missing value", func() bool { return n.metric(failed) >= 1 })

	n.apply(node.Version{ID: "dddd", Seq: 4, Classes: map[string]node.ClassSpec{
		"probe": {Module: probeV, Requires: []string{"X"}, Config: map[string]string{"X": "1"}}, "room": {Module: roomV},
	}})
	m.Advance(time.Hour) // past its retry
	waitFor(t, time.Minute, "the alarm", func() bool { return attempts(n, "a") == 1 })
}

// A node started from a deployed version has its configuration and
// required names from the start, before any Apply.
func TestStartFromADeployedVersion(t *testing.T) {
	v1 := schemaV1(t)
	tn := startNode(t, node.Options{Classes: map[string]string{"s": v1, "t": v1}, VersionID: "aaaa", Seq: 1,
		Config:   map[string]map[string]string{"s": {"GREETING": "hi"}},
		Requires: map[string][]string{"t": {"TOKEN"}}})
	tn.expect("GET", "/actor/s/a", "", 200, "version=1 inits=1 hits=1 greeting=hi")
	if code, _ := tn.do("GET", "/actor/t/a", ""); code != 503 {
		t.Errorf("a class missing a required name at start: %d, want 503", code)
	}
	if got := tn.metric("wasmkeep_deploy_seq"); got != 1 {
		t.Errorf("wasmkeep_deploy_seq = %v, want 1", got)
	}
}

// A socket's message to a class whose required value is unset closes the
// socket with 1011: the actor cannot run as configured.
func TestApplyRequiresClosesSockets(t *testing.T) {
	tn := startRoom(t, node.Options{VersionID: "aaaa", Seq: 1})
	c := dial(t, tn, "/actor/room/r1")
	if got := readText(t, c); !strings.HasPrefix(got, "welcome") {
		t.Fatalf("the room said %q, want its welcome", got)
	}
	tn.apply(node.Version{ID: "bbbb", Seq: 2, Classes: map[string]node.ClassSpec{"room": {Module: room(t), Requires: []string{"X"}}}})
	write(t, c, "hello")
	expectClose(t, c, websocket.StatusInternalError, "the actor's class is not configured on this node")
}

// An outside request the front door admitted under version 1's rule
// (open) never runs on version 2's class, which made the class internal,
// when it upgrades while waiting for the newer version: it answers 503,
// and its retry meets the new rule at the front door.
func TestApplyUpgradeKeepsTheRuleThatAdmitted(t *testing.T) {
	dir, v2 := seqAheadDir(t), schemaV2(t)
	internal, _ := access.Parse("internal")
	var tn *testNode
	tn = startNode(t, node.Options{DataDir: dir, Classes: map[string]string{"s": schemaV1(t)}, VersionID: "aaaa", Seq: 1,
		AdmissionWait: time.Minute, // the bound of the wait: the Apply below ends it
		Behind: func(seq uint64) {
			go func() {
				if err := tn.node.Apply(context.Background(), node.Version{ID: "bbbb", Seq: seq, Classes: map[string]node.ClassSpec{"s": {Module: v2, Access: internal}}}); err != nil {
					t.Error(err)
				}
			}()
		}})
	code, body, hdr := tn.doH("GET", "/actor/s/a", "", nil)
	if code != 503 || hdr.Get("Retry-After") != "1" {
		t.Errorf("admitted under open, upgraded to internal: %d %q (Retry-After %q), want 503 with Retry-After 1", code, body, hdr.Get("Retry-After"))
	}
	tn.expect("GET", "/actor/s/a", "", 403, "class \"s\" is internal: outside requests are refused\n")
}

// A call, which no access rule admits, still upgrades to the newer class
// when that one made the class internal: it runs on version 2.
func TestApplyUpgradeKeepsCalls(t *testing.T) {
	dir, v2, p := seqAheadDir(t), schemaV2(t), probe(t)
	internal, _ := access.Parse("internal")
	var tn *testNode
	tn = startNode(t, node.Options{DataDir: dir, Classes: map[string]string{"s": schemaV1(t), "probe": p}, VersionID: "aaaa", Seq: 1,
		AdmissionWait: time.Minute, // the bound of the wait: the Apply below ends it
		Behind: func(seq uint64) {
			go func() {
				if err := tn.node.Apply(context.Background(), node.Version{ID: "bbbb", Seq: seq, Classes: map[string]node.ClassSpec{
					"s": {Module: v2, Access: internal}, "probe": {Module: p},
				}}); err != nil {
					t.Error(err)
				}
			}()
		}})
	tn.expect("POST", "/actor/probe/q/call?to=s/a&path=/", "", 200, "200 version=2 inits=2 hits=1 greeting=")
}

// A socket opened while its class was open is closed with 1008 at its
// next message once a version makes the class internal; the message never
// reaches the actor (book ADR 0013).
func TestApplyInternalClosesSockets(t *testing.T) {
	tn := startRoom(t, node.Options{VersionID: "aaaa", Seq: 1})
	c := dial(t, tn, "/actor/room/r1")
	if got := readText(t, c); !strings.HasPrefix(got, "welcome") {
		t.Fatalf("the room said %q, want its welcome", got)
	}
	internal, _ := access.Parse("internal")
	tn.apply(node.Version{ID: "bbbb", Seq: 2, Classes: map[string]node.ClassSpec{"room": {Module: room(t), Access: internal}}})
	write(t, c, "hello")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, msg, err := c.Read(ctx) // the room echoes a message it gets
	var ce websocket.CloseError
	switch {
	case err == nil:
		t.Fatalf("the message reached the actor under internal: %q came back", msg)
	case !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation:
		t.Fatalf("closed with %v, want 1008", err)
	}
}

// An event that waited in the mailbox while a version replaced its class,
// on an actor left with no instance, runs on the version served: the old
// code is gone, and the event is not failed for it.
func TestApplyQueuedEventRunsOnTheVersionServed(t *testing.T) {
	p, c := probe(t), counter(t)
	tn := startNode(t, node.Options{Classes: map[string]string{"p": p, "q": c}, VersionID: "aaaa", Seq: 1})
	first := make(chan int)
	go func() { code, _ := tn.do("GET", "/actor/p/x/sleep-exit?ms=1500", ""); first <- code }()
	time.Sleep(300 * time.Millisecond)
	second := make(chan reply)
	go func() { code, body := tn.do("GET", "/actor/p/x/hits", ""); second <- reply{code: code, body: body} }()
	time.Sleep(300 * time.Millisecond)
	// The counter's code is served already (class q): no compile, the swap
	// lands while the first event sleeps and the second waits behind it.
	tn.apply(node.Version{ID: "bbbb", Seq: 2, Classes: map[string]node.ClassSpec{"p": {Module: c}, "q": {Module: c}}})
	if code := <-first; code != 500 {
		t.Errorf("the event that exits: %d, want 500", code)
	}
	if r := <-second; r.code != 200 || strings.TrimSpace(r.body) != "0" {
		t.Errorf("the queued event: %+v, want 200 from the counter now served", r)
	}
}
