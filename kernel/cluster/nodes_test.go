package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/simtest"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
)

func putLease(t *testing.T, b bucket.Bucket, id string, o nodelease.Object) {
	t.Helper()
	body := o.Encode()
	if _, err := b.Put(context.Background(), nodelease.Key(id), bytes.NewReader(body), int64(len(body)), bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
}

func putRecord(t *testing.T, b bucket.Bucket, in app.Name, a ownership.Actor, r ownership.Record) {
	t.Helper()
	body := r.Encode()
	if _, err := bucket.Under(b, in.StateRoot()).Put(context.Background(), a.Key(), bytes.NewReader(body), int64(len(body)), bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
}

// Each node's state by the nodes' own rule (a live lease counts within
// the horizon, 10 s at the defaults), and the warnings: mixed plain and
// listener nodes, mixed versions (live nodes only), a lease dated ahead
// by more than max_skew, no live node.
func TestReadStatus(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(simtest.Epoch)
	now := clk.Now()
	s := nodelease.DefaultSettings()
	b := buckettest.NewMemory(buckettest.Flaws{})
	live := func(age time.Duration, version, cluster string) nodelease.Object {
		return nodelease.Object{State: nodelease.Live, Instance: "i", Seq: 1, WrittenAt: now.Add(-age),
			Info: nodelease.Info{Version: version, Advertise: "http://x:1", ClusterAddr: cluster}}
	}
	st, err := ReadStatus(ctx, b, s, clk)
	if err != nil || len(st.Nodes) != 0 || st.Live != 0 || len(st.Warnings) != 1 || st.Warnings[0] != "no live node" {
		t.Fatalf("empty prefix: %+v %v", st, err)
	}
	putLease(t, b, "a", live(9*time.Second, "0.3.0", "https://a:7443"))
	putLease(t, b, "b", live(time.Second, "0.3.0", ""))
	putLease(t, b, "c", live(10*time.Second, "0.2.0", "")) // stale: its version is not counted
	f := live(time.Hour, "0.3.0", "")
	f.State = nodelease.Fenced
	putLease(t, b, "d", f)
	f.State = nodelease.Released
	putLease(t, b, "e", f)
	putLease(t, b, "g", live(-3*time.Second, "0.3.0", "https://g:7443")) // dated ahead
	// A body and a key that are no node lease.
	for _, key := range []string{nodelease.Key("h"), "nodes/i/x"} {
		if _, err := b.Put(ctx, key, strings.NewReader("x"), 1, bucket.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	st, err = ReadStatus(ctx, b, s, clk)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range st.Nodes {
		got = append(got, n.ID+"="+string(n.State))
	}
	if want := "a=live b=live c=stale d=fenced e=released g=live h=unreadable i/x=unreadable"; strings.Join(got, " ") != want || st.Live != 3 {
		t.Fatalf("states %v (%d live), want %s (3 live)", got, st.Live, want)
	}
	if g := st.Nodes[5]; g.Ahead() != 3*time.Second || g.Age != -3*time.Second {
		t.Errorf("g: ahead %v age %v", g.Ahead(), g.Age)
	}
	w := strings.Join(st.Warnings, "\n")
	for _, want := range []string{"nodes/h is not a node lease", "nodes/i/x is not a node lease: its key names no node", "mixed plain and TLS nodes: b still plain while a, g use the cluster listener", "nodes/g (live) is dated 3s ahead"} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings %q lack %q", w, want)
		}
	}
	if strings.Join(st.Plain, ",") != "b" || strings.Join(st.Listener, ",") != "a,g" || strings.Join(st.Versions, ",") != "0.3.0" {
		t.Errorf("plain %v, listener %v, versions %v", st.Plain, st.Listener, st.Versions)
	}
	if strings.Contains(w, "versions") || strings.Contains(w, "no live node") {
		t.Errorf("warnings %q: one version among live nodes, and some live", w)
	}
	putLease(t, b, "c", live(0, "0.4.0", "https://c:7443"))
	if st, _ = ReadStatus(ctx, b, s, clk); !strings.Contains(strings.Join(st.Warnings, "\n"), "different WasmKeep versions: 0.3.0 (a, b, g), 0.4.0 (c)") {
		t.Errorf("mixed versions: %q", st.Warnings)
	}
}

// Status reads each node's app, the version it serves and whether it is
// behind, and each app's current; it warns about a node behind, about a
// live node serving a version older than its app's current once that was
// deployed a minute ago (by current's time in the bucket), not before,
// about one serving an app with no current, and about a current it cannot
// read. Inside a bubble, so that the bucket's times are the clock's.
func TestReadStatusServing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		clk := clock.NewManual(time.Now())
		now := clk.Now()
		s := nodelease.DefaultSettings()
		b := buckettest.NewMemory(buckettest.Flaws{})
		node := func(id, app string, sv nodelease.Serving, behind string) {
			info := nodelease.Info{Version: "0.4.0", Advertise: "http://" + id + ":1", App: app, Behind: behind}
			if sv.Version != "" {
				info.Serving = sv.String()
			}
			putLease(t, b, id, nodelease.Object{State: nodelease.Live, Instance: "i", Seq: 1, WrittenAt: clk.Now(), Info: info})
		}
		put := func(key, body string) {
			if _, err := b.Put(ctx, key, strings.NewReader(body), int64(len(body)), bucket.Condition{}); err != nil {
				t.Fatal(err)
			}
		}
		v1 := nodelease.Serving{Version: "1111111111111111", Seq: 1, Since: now.Add(-time.Hour)}
		v2 := nodelease.Serving{Version: "2222222222222222", Seq: 2, Since: now}
		put("apps/acme/shop/current", "2222222222222222 2\n")
		put("apps/acme/blog/current", "1111111111111111 1\n")
		put("apps/acme/wiki/current", "garbage")
		nodes := func() {
			node("a", "acme/shop", v2, "")
			node("b", "acme/shop", v1, "class cart: needs a host function this node lacks")
			node("c", "acme/blog", v1, "")
			node("d", "default/default", nodelease.Serving{}, "")
			node("e", "acme/gone", v1, "") // its current deleted by hand
		}
		nodes()
		st, err := ReadStatus(ctx, b, s, clk)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, n := range st.Nodes {
			got = append(got, fmt.Sprintf("%s=%s,%s,%s,%d", n.ID, n.Object.Info.App, n.Run(), n.Serving.Version, n.Serving.Seq))
		}
		want := "a=acme/shop,serving,2222222222222222,2 b=acme/shop,behind,1111111111111111,1 c=acme/blog,serving,1111111111111111,1 d=default/default,serving,,0 e=acme/gone,serving,1111111111111111,1"
		if strings.Join(got, " ") != want {
			t.Errorf("nodes %s, want %s", strings.Join(got, " "), want)
		}
		got = nil
		for _, d := range st.Apps {
			got = append(got, fmt.Sprintf("%s=%v,%v", d.App, d.Current, d.At.Equal(now)))
		}
		if want := "acme/blog=1111111111111111 1,true acme/shop=2222222222222222 2,true acme/wiki= 0,true"; strings.Join(got, " ") != want {
			t.Errorf("apps %s, want %s", strings.Join(got, " "), want)
		}
		w := strings.Join(st.Warnings, "\n")
		for _, want := range []string{
			"node b is behind app acme/shop: class cart: needs a host function",
			`app acme/wiki: apps/acme/wiki/current: not "<version> <seq>\n"`,
			"node e serves version 1111111111111111 (seq 1) of app acme/gone, but apps/acme/gone/current does not exist",
		} {
			if !strings.Contains(w, want) {
				t.Errorf("warnings at the deploy: no %q in\n%s", want, w)
			}
		}
		if strings.Contains(w, "was deployed") {
			t.Errorf("warnings at the deploy: %s", w)
		}
		clk.Advance(MixedServingAfter + time.Second)
		nodes() // written again, live at the new time
		st, _ = ReadStatus(ctx, b, s, clk)
		w = strings.Join(st.Warnings, "\n")
		if want := "node b of app acme/shop serves 1111111111111111 (seq 1), but 2222222222222222 (seq 2) was deployed 1m1s ago"; !strings.Contains(w, want) || strings.Count(w, "was deployed") != 1 {
			t.Errorf("warnings a minute after the deploy: %q, want one with %q", w, want)
		}
	})
}

// Forget refuses a live lease whatever its age, an unreadable object, a
// fenced or released one younger than ttl + grace, and one that records
// still name; it marks an old released lease no record names forgotten,
// which status leaves out and a fence leaves as it is.
func TestForget(t *testing.T) {
	ctx := context.Background()
	now := simtest.Epoch
	s := nodelease.DefaultSettings()
	b := buckettest.NewMemory(buckettest.Flaws{})
	obj := func(st nodelease.State, age time.Duration) nodelease.Object {
		return nodelease.Object{State: st, Instance: "i", Seq: 1, WrittenAt: now.Add(-age)}
	}
	refused := func(id, want string) {
		t.Helper()
		_, err := Forget(ctx, b, id, s, now)
		var re *RefusedError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), want) {
			t.Errorf("forget %s: %v, want a refusal with %q", id, err, want)
		}
		if r, _ := nodelease.ReadObject(ctx, b, id); !r.Found {
			t.Errorf("forget %s: removed after a refusal", id)
		}
	}
	putLease(t, b, "live", obj(nodelease.Live, time.Hour))
	refused("live", "is live")
	putLease(t, b, "young", obj(nodelease.Released, 14*time.Second))
	refused("young", "not free until 15s after its last write (1s from now)")
	if _, err := b.Put(ctx, nodelease.Key("junk"), strings.NewReader("x"), 1, bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
	refused("junk", "not a node lease")
	putLease(t, b, "held", obj(nodelease.Fenced, time.Hour))
	// Records of two apps name it: both count.
	shop := app.Name{Tenant: "acme", App: "shop"}
	putRecord(t, b, app.Default, ownership.Actor{Tenant: "default", Class: "c", Name: "x"}, ownership.Record{Node: "held", Instance: "i", Generation: 3})
	putRecord(t, b, shop, ownership.Actor{Tenant: "acme", Class: "c", Name: "y"}, ownership.Record{Node: "held", Instance: "old", Generation: 1})
	putRecord(t, b, app.Default, ownership.Actor{Tenant: "default", Class: "c", Name: "z"}, ownership.Record{Generation: 2})
	refused("held", "2 ownership records still name node held")

	putLease(t, b, "old", obj(nodelease.Released, 15*time.Second))
	got, err := Forget(ctx, b, "old", s, now)
	if err != nil || !got.Forgot || got.Object.State != nodelease.Released {
		t.Fatalf("forget old: %+v %v, want forgotten", got, err)
	}
	if r, _ := nodelease.ReadObject(ctx, b, "old"); !r.Found || r.Err != nil || r.Object.State != nodelease.Forgotten ||
		r.Object.Instance != "i" || !r.Object.WrittenAt.Equal(now.Add(-15*time.Second)) {
		t.Fatalf("nodes/old after forget: %+v, want the same lease marked forgotten", r)
	}
	if got, err := Forget(ctx, b, "old", s, now); err != nil || got.Forgot || !got.Already {
		t.Fatalf("forget old again: %+v %v, want forgotten already", got, err)
	}
	if st, err := ReadStatus(ctx, b, s, clock.NewManual(now)); err != nil || strings.Join(st.Forgotten, ",") != "old" || slices.ContainsFunc(st.Nodes, func(n NodeStatus) bool { return n.ID == "old" }) {
		t.Fatalf("status after forget: %+v %v, want old left out, as forgotten", st, err)
	}
	if f, err := nodelease.FenceByOperator(ctx, b, "old", now); err != nil || f.Did != nodelease.WasForgotten {
		t.Fatalf("fence of a forgotten node: %+v %v, want it left as it is", f, err)
	}
	if got, err := Forget(ctx, b, "held-gone", s, now); err != nil || got.Forgot || got.Records != 0 {
		t.Fatalf("forget of an absent id: %+v %v", got, err)
	}
	if _, err := Forget(ctx, b, "Bad", s, now); err == nil {
		t.Fatal("a malformed id was accepted")
	}
}

// onList runs hook once, at the first listing of prefix.
type onList struct {
	bucket.Bucket
	prefix string
	hook   func()
}

func (o *onList) List(ctx context.Context, prefix string, opts bucket.ListOptions) (bucket.ListPage, error) {
	if prefix == o.prefix && o.hook != nil {
		h := o.hook
		o.hook = nil
		h()
	}
	return o.Bucket.List(ctx, prefix, opts)
}

// A process that starts with a node id while forget checks that id (here
// while it lists state/, every app's records) keeps its lease: forget is refused, having
// written nothing, and the node renews on. Once that node stops, forget
// marks its lease forgotten, and a process started with the id afterwards
// takes it and runs.
func TestForgetRacingAStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem, clk := buckettest.NewMemory(buckettest.Flaws{}), simtest.New()
		s := nodelease.DefaultSettings()
		putLease(t, mem, "a", nodelease.Object{State: nodelease.Released, Instance: "old", Seq: 7, WrittenAt: clk.Now().Add(-time.Hour)})
		lost := make(chan error, 2)
		var m *Member
		racing := &onList{Bucket: mem, prefix: app.StatePrefix, hook: func() {
			var err error
			if m, err = join(t, clk, config(mem, clk, "p1", func(err error) { lost <- err })); err != nil {
				t.Fatal(err)
			}
		}}
		_, err := Forget(ctx, racing, "a", s, clk.Now())
		clk.Step(time.Minute)
		select {
		case err := <-lost:
			t.Errorf("the node started while forget ran lost its lease: %v", err)
		default:
			if !m.Ready() {
				t.Error("the node started while forget ran is not ready")
			}
		}
		var re *RefusedError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), "changed while forget checked it") {
			t.Errorf("forget while a node started: %v, want a refusal saying nodes/a changed", err)
		}
		m.Leave(ctx)
		if t.Failed() {
			return
		}

		clk.Step(s.Takeover())
		if got, err := Forget(ctx, mem, "a", s, clk.Now()); err != nil || !got.Forgot {
			t.Fatalf("forget of the stopped node: %+v %v", got, err)
		}
		m2, err := join(t, clk, config(mem, clk, "p2", func(err error) { lost <- err }))
		if err != nil {
			t.Fatalf("a start over a forgotten lease: %v", err)
		}
		clk.Step(time.Minute)
		if len(lost) != 0 || !m2.Ready() {
			t.Fatalf("the node started over a forgotten lease: ready %v, lost %v", m2.Ready(), len(lost))
		}
		if err := m2.Leave(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// ServedVersions are the versions of one app its nodes run, stale ones
// included, never a released or fenced node's or another app's.
func TestServedVersions(t *testing.T) {
	clk := clock.NewManual(simtest.Epoch)
	b := buckettest.NewMemory(buckettest.Flaws{})
	put := func(id, app, version string, st nodelease.State, age time.Duration) {
		sv := nodelease.Serving{Version: version, Seq: 1, Since: clk.Now().Add(-time.Hour)}
		putLease(t, b, id, nodelease.Object{State: st, Instance: "i", Seq: 1, WrittenAt: clk.Now().Add(-age),
			Info: nodelease.Info{Advertise: "http://" + id + ":1", App: app, Serving: sv.String()}})
	}
	put("a", "acme/shop", "1111111111111111", nodelease.Live, 0)
	put("b", "acme/shop", "2222222222222222", nodelease.Live, time.Hour) // stale: it may wake
	put("c", "acme/shop", "3333333333333333", nodelease.Released, 0)
	put("d", "acme/shop", "4444444444444444", nodelease.Fenced, 0)
	put("e", "acme/blog", "5555555555555555", nodelease.Live, 0)
	got, err := ServedVersions(t.Context(), b, app.Name{Tenant: "acme", App: "shop"})
	if want := map[string]bool{"1111111111111111": true, "2222222222222222": true}; err != nil || !maps.Equal(got, want) {
		t.Errorf("ServedVersions = %v, %v; want %v", got, err, want)
	}
}

// Status shows whether each node takes actors (line 12) in place of
// serving or behind, with its reasons when more than a drain, and warns
// about a live stuck node and one shut out of its secrets; the drain
// request is written and withdrawn by its key, and reads back.
func TestReadStatusTaking(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(time.UnixMilli(1_000_000))
	s := nodelease.DefaultSettings()
	b := buckettest.NewMemory(buckettest.Flaws{})
	for id, taking := range map[string]struct {
		state nodelease.Taking
		why   []string
	}{"a": {nodelease.Draining, []string{nodelease.ReasonDrain}}, "b": {nodelease.Drained, []string{nodelease.ReasonSecrets}},
		"c": {nodelease.Stuck, []string{nodelease.ReasonDrain, nodelease.ReasonSecrets}}, "d": {nodelease.Takes, nil}} {
		putLease(t, b, id, nodelease.Object{State: nodelease.Live, Instance: "i", Seq: 1, WrittenAt: clk.Now(),
			Info: nodelease.Info{App: "acme/shop", Taking: taking.state, NotTaking: taking.why, Behind: "class x: missing"}})
	}
	st, err := ReadStatus(ctx, b, s, clk)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range st.Nodes {
		got = append(got, n.ID+"="+n.Run())
	}
	if want := "a=draining b=drained(secrets) c=stuck(drain,secrets) d=behind"; strings.Join(got, " ") != want {
		t.Errorf("states %s, want %s", strings.Join(got, " "), want)
	}
	var stuck, secrets []string
	for _, w := range st.Warnings {
		if strings.Contains(w, "stuck") {
			stuck = append(stuck, w)
		}
		if strings.Contains(w, "secrets") {
			secrets = append(secrets, w)
		}
	}
	if len(secrets) != 2 || !strings.HasPrefix(secrets[0], "node b cannot open app acme/shop's secrets") || !strings.HasPrefix(secrets[1], "node c cannot") {
		t.Errorf("secrets warnings %q, want one about b, one about c", secrets)
	}
	if len(stuck) != 1 || !strings.HasPrefix(stuck[0], "node c is stuck") {
		t.Errorf("stuck warnings %q, want one about c", stuck)
	}
	for _, step := range []struct {
		do   func(context.Context, bucket.Bucket, string) error
		want bool
	}{{RequestDrain, true}, {RequestDrain, true}, {WithdrawDrain, false}, {WithdrawDrain, false}} {
		if err := step.do(ctx, b, "a"); err != nil {
			t.Fatal(err)
		}
		if got, err := DrainRequested(ctx, b, "a"); err != nil || got != step.want {
			t.Errorf("drain requested: %v, %v; want %v", got, err, step.want)
		}
	}
	if err := RequestDrain(ctx, b, "A/../x"); err == nil {
		t.Error("a drain request for an id that is no node id was written")
	}
}
