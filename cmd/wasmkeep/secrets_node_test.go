package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// The node's side of the app's secrets (ADR 1050; book ADR 0016, "Nodes"):
// a layer between the deployed configuration and --env, swapped without a
// deploy, and a node that cannot open them failing closed.

// A class's values, by name: configuration, then secrets, then --env; a
// secrets change reaches a resident actor at its next event (a new
// instance, on-init not run again) and a later deploy keeps the secrets.
func TestSecretsLayerPrecedence(t *testing.T) {
	engineNeutral(t)
	v1, v2 := schemaV1(t), schemaV2(t)
	config := func(module, greeting string) node.Version {
		return node.Version{Classes: map[string]node.ClassSpec{"s": {Module: module, Config: map[string]string{"GREETING": greeting}}}}
	}
	tn := startNode(t, node.Options{Classes: map[string]string{"s": v1}, VersionID: "aaaa", Seq: 1,
		Config: map[string]map[string]string{"s": {"GREETING": "config-value-1"}}})
	tn.expect("GET", "/actor/s/a", "", 200, "version=1 inits=1 hits=1 greeting=config-value-1")
	tn.node.SetSecrets(map[string]map[string]string{"s": {"GREETING": "secret-value-1"}, "other": {"GREETING": "elsewhere"}})
	tn.expect("GET", "/actor/s/a", "", 200, "version=1 inits=1 hits=1 greeting=secret-value-1")
	tn.expect("GET", "/actor/s/a", "", 200, "version=1 inits=1 hits=2 greeting=secret-value-1")

	v := config(v2, "config-value-2")
	v.ID, v.Seq = "bbbb", 2
	tn.apply(v)
	tn.expect("GET", "/actor/s/a", "", 200, "version=2 inits=1,2 hits=1 greeting=secret-value-1")
	tn.node.SetSecrets(nil) // unset: the configuration's value again
	tn.expect("GET", "/actor/s/a", "", 200, "version=2 inits=1,2 hits=1 greeting=config-value-2")
	if log := tn.log.String(); !strings.Contains(log, `level=WARN msg="the app's secret replaces the deployed configuration's value" class=s name=GREETING`) || strings.Contains(log, "-value-") {
		t.Errorf("the overlap is to be warned of by name, never by value:\n%s", log)
	}

	withEnv := startNode(t, node.Options{Classes: map[string]string{"s": v1}, VersionID: "aaaa", Seq: 1,
		Config:  map[string]map[string]string{"s": {"GREETING": "config-value-1"}},
		Secrets: map[string]map[string]string{"s": {"GREETING": "secret-value-1"}},
		Env:     map[string]map[string]string{"s": {"GREETING": "env-value-1"}}})
	withEnv.expect("GET", "/actor/s/a", "", 200, "version=1 inits=1 hits=1 greeting=env-value-1")
}

// Required names count the secrets: a class refuses its events until a
// secret sets them.
func TestSecretsMeetRequires(t *testing.T) {
	engineNeutral(t)
	v1 := schemaV1(t)
	tn := startNode(t, node.Options{Classes: map[string]string{"s": v1}, VersionID: "aaaa", Seq: 1,
		Requires: map[string][]string{"s": {"GREETING"}}})
	if code, _, hdr := tn.doH("GET", "/actor/s/a", "", nil); code != 503 || hdr.Get("Retry-After") == "" {
		t.Fatalf("a required name unset: %d (Retry-After %q), want 503", code, hdr.Get("Retry-After"))
	}
	tn.node.SetSecrets(map[string]map[string]string{"s": {"GREETING": "secret-value-1"}})
	tn.expect("GET", "/actor/s/a", "", 200, "version=1 inits=1 hits=1 greeting=secret-value-1")
	tn.node.SetSecrets(nil)
	if code, _ := tn.do("GET", "/actor/s/a", ""); code != 503 {
		t.Fatalf("the secret unset again: %d, want 503", code)
	}
}

// A node that cannot open its app's secrets refuses their events with 503
// and Retry-After, takes no actor and is not ready, until it opens them.
func TestSecretsBlockedFailsClosed(t *testing.T) {
	engineNeutral(t)
	tn := startNode(t, node.Options{Classes: map[string]string{"s": schemaV1(t)}, VersionID: "aaaa", Seq: 1,
		SecretsBlocked: errors.New("sealed under another key")})
	code, body, hdr := tn.doH("GET", "/actor/s/a", "", nil)
	if code != 503 || hdr.Get("Retry-After") == "" || strings.Contains(body, "another key") {
		t.Fatalf("blocked at start: %d %q (Retry-After %q), want 503 saying no reason", code, body, hdr.Get("Retry-After"))
	}
	tn.expect("GET", "/_wasmkeep/ready", "", 503, "not ready\n")
	if got := tn.metric(`wasmkeep_not_ready{reason="secrets"}`); got != 1 {
		t.Errorf(`wasmkeep_not_ready{reason="secrets"} = %v, want 1`, got)
	}
	if got := tn.node.NotTaking(); len(got) != 1 || got[0] != "secrets" {
		t.Errorf("the node takes actors while blocked: %v", got)
	}
	tn.node.BlockSecrets(nil)
	tn.expect("GET", "/actor/s/a", "", 200, "version=1 inits=1 hits=1 greeting=")
	tn.expect("GET", "/_wasmkeep/ready", "", 200, "ready\n")
	if got := tn.node.NotTaking(); len(got) != 0 {
		t.Errorf("the node still takes no actor: %v", got)
	}
	tn.node.BlockSecrets(errors.New("altered or corrupt"))
	if code, _ := tn.do("GET", "/actor/s/a", ""); code != 503 {
		t.Errorf("blocked with the actor resident: %d, want 503", code)
	}
	if log := tn.log.String(); strings.Count(log, "cannot open its app's secrets") != 2 {
		t.Errorf("each change of reason is to be logged once:\n%s", log)
	}
}

// A socket's message while the node cannot open the app's secrets closes
// the socket with 1011; the message is not delivered.
func TestSecretsBlockedClosesSockets(t *testing.T) {
	engineNeutral(t)
	tn := startRoom(t, node.Options{VersionID: "aaaa", Seq: 1})
	c := dial(t, tn, "/actor/room/r1")
	if got := readText(t, c); !strings.HasPrefix(got, "welcome") {
		t.Fatalf("the room said %q, want its welcome", got)
	}
	tn.node.BlockSecrets(errors.New("sealed under another key"))
	write(t, c, "hello")
	expectClose(t, c, websocket.StatusInternalError, "the app's secrets cannot be opened on this node")
}

// An event that waited in the mailbox while a secrets change and then a
// deploy landed runs on the values served now, not on the set replaced,
// whether the deploy kept the code (the instance) or changed it (issue 27
// item 1).
func TestSecretsQueuedEventRunsOnTheValuesServed(t *testing.T) {
	engineNeutral(t)
	p, other := probe(t), buildGuest(t, "cmd/wasmkeep/testdata/guests/probe", "-X main.other=1")
	for _, c := range []struct{ name, module string }{
		{"the same code", p},
		{"other code", other},
	} {
		// Class q serves the other code already: the deploy compiles
		// nothing and lands while the queued event waits.
		tn := startNode(t, node.Options{Classes: map[string]string{"p": p, "q": other}, VersionID: "aaaa", Seq: 1,
			Secrets: map[string]map[string]string{"p": {"TOKEN": "one"}}})
		tn.expect("GET", "/actor/p/x/env?name=TOKEN", "", 200, "set one")
		busy := make(chan int)
		go func() { code, _ := tn.do("GET", "/actor/p/x/sleep?ms=1500", ""); busy <- code }()
		time.Sleep(300 * time.Millisecond)
		queued := make(chan reply)
		go func() {
			code, body := tn.do("GET", "/actor/p/x/env?name=TOKEN", "")
			queued <- reply{code: code, body: body}
		}()
		waitFor(t, 10*time.Second, "the event to queue", func() bool { return tn.metric("wasmkeep_events_queued") == 1 })
		tn.node.SetSecrets(map[string]map[string]string{"p": {"TOKEN": "two"}})
		tn.apply(node.Version{ID: "bbbb", Seq: 2, Classes: map[string]node.ClassSpec{"p": {Module: c.module}, "q": {Module: other}}})
		if code := <-busy; code != 200 {
			t.Errorf("%s: the busy event: %d, want 200", c.name, code)
		}
		if r := <-queued; r.code != 200 || r.body != "set two" {
			t.Errorf("%s: the queued event: %+v, want 200 set two (the set replaced must not answer)", c.name, r)
		}
	}
}

// An event that waits for a newer version is refused if the node failed
// closed on its secrets meanwhile: the swap that wakes it does not let it
// run on the set the node failed closed on (issue 27 item 2).
func TestSecretsBlockedDuringTheVersionWait(t *testing.T) {
	engineNeutral(t)
	dir, v2 := seqAheadDir(t), schemaV2(t)
	var tn *testNode
	tn = startNode(t, node.Options{DataDir: dir, Classes: map[string]string{"s": schemaV1(t)}, VersionID: "aaaa", Seq: 1,
		AdmissionWait: time.Minute, // the bound of the wait: the Apply below ends it
		Behind: func(seq uint64) {
			go func() {
				tn.node.BlockSecrets(errors.New("sealed under another key"))
				if err := tn.node.Apply(context.Background(), node.Version{ID: "bbbb", Seq: seq, Classes: map[string]node.ClassSpec{"s": {Module: v2}}}); err != nil {
					t.Error(err)
				}
			}()
		}})
	if code, body := tn.do("GET", "/actor/s/a", ""); code != 503 || !strings.Contains(body, "secrets cannot be opened") {
		t.Fatalf("blocked during the wait: %d %q, want 503 (secrets)", code, body)
	}
}
