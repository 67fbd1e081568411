package main

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/alarmindex"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/deletes"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/deploys"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// actorDeleteCLI runs `wasmkeep actor delete TARGET` on the file bucket
// dir and returns its output and exit status.
func actorDeleteCLI(t *testing.T, dir, target string, args ...string) (string, int) {
	t.Helper()
	return wasmkeepCLI(t, append([]string{"actor", "delete", target, "--bucket", "file://" + dir}, args...)...)
}

// An operator's delete (book ADR 0028, section 3; ADR 1053), through the
// command line on a file bucket two in-process nodes share: of an actor
// resident on a with an alarm (its data gone, the alarm cleared in the
// actor and in the bucket's index), of one hibernated on b (whichever
// node takes it), of a room with a socket open on a (closed with 1000 by
// its holder, though the class is open); a mistyped name is refused with
// nothing written, and a request written for one anyway (not by the
// command) ends absent on a node, which creates nothing of it. Fails
// with the job's socket close removed (the room's delete stays pending),
// or with openDB's refusal to create the actor for a delete removed (the
// request for a name that was never an actor is carried out: done, and
// history written).
func TestOperatorDelete(t *testing.T) {
	t.Parallel()
	engineNeutral(t)
	dir := t.TempDir()
	fb := fileBucket(t, dir)
	classes := map[string]string{"probe": probe(t), "room": hostcall(t)}
	a, am := ownedNodeOn(t, fb, "a", classes, 0)
	b, bm := ownedNodeOn(t, fb, "b", classes, 300*time.Millisecond)
	waitTaker(t, am, 1)
	waitTaker(t, bm, 1)
	state := bucket.Under(fb, app.Default.StateRoot())

	a.expect("POST", "/actor/probe/r/token?t=x1", "", 200, "1")
	a.expect("POST", "/actor/probe/r/alarm-set?in=3600000", "", 200, "set")
	ws := dial(t, a, "/actor/room/s/ws")
	write(t, ws, "hello")
	if got := readText(t, ws); got != "hello" {
		t.Fatalf("echo %q", got)
	}
	b.expect("POST", "/actor/probe/h/token?t=y1", "", 200, "1")
	waitFor(t, 10*time.Second, "h to hibernate on b", func() bool { return len(bm.Owners.Holds()) == 0 })

	deleted := func(target string) {
		t.Helper()
		if out, code := actorDeleteCLI(t, dir, target, "--wait", "60"); code != 0 || !strings.Contains(out, "Deleted") {
			t.Fatalf("actor delete %s: exit %d\n%s", target, code, out)
		}
	}
	// The in-process nodes do not forward: each actor is asked through
	// the node that holds it, if one does, again after a transport error
	// or a 503 (a lease lapse under load may have moved it); any other
	// answer is final.
	through := func(name string) *testNode {
		key, err := history.EncodeName(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range bm.Owners.Holds() {
			if h.Actor.Class == "probe" && h.Actor.Name == key {
				return b
			}
		}
		return a
	}
	fresh := func(name, path, want string) {
		t.Helper()
		waitFor(t, 20*time.Second, name+path+" to answer", func() bool {
			code, _, body, err := answer("GET", through(name).url+"/actor/probe/"+name+path)
			if err == nil && code != 503 && (code != 200 || body != want) {
				t.Fatalf("GET %s%s after the delete: %d %q, want 200 %q", name, path, code, body, want)
			}
			return err == nil && code == 200
		})
	}
	deleted("default/default/probe/r")
	fresh("r", "/tokens", "")
	fresh("r", "/alarm-get", "none")
	waitFor(t, 10*time.Second, "r's alarm entry to leave the bucket's index", func() bool {
		entries, err := bucket.ListAll(t.Context(), state, alarmindex.Prefix)
		return err == nil && len(entries) == 0
	})

	deleted("default/default/probe/h")
	fresh("h", "/tokens", "")

	deleted("default/default/room/s")
	expectClose(t, ws, websocket.StatusNormalClosure, "actor deleted")

	if out, code := actorDeleteCLI(t, dir, "default/default/probe/nope"); code != 1 || !strings.Contains(out, "no such actor") {
		t.Errorf("a mistyped name: exit %d, want 1 and no such actor\n%s", code, out)
	}
	if entries, err := bucket.ListAll(t.Context(), state, deletes.Prefix); err != nil || len(entries) != 0 {
		t.Errorf("after the refusal, under deletes/: %v %v, want nothing", entries, err)
	}
	r, err := deletes.New(history.Actor{Tenant: "default", Class: "probe", Name: "never"})
	if err != nil {
		t.Fatal(err)
	}
	if err := deletes.Write(t.Context(), state, r); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the request for a name never used to end", func() bool {
		st, _, err := deletes.Read(t.Context(), state, r)
		return err == nil && st == deletes.Ended
	})
	if _, o, _ := deletes.Read(t.Context(), state, r); o != deletes.Absent {
		t.Errorf("the request for a name never used ended %q, want absent", o)
	}
	if found, err := history.Exists(t.Context(), state, history.Actor{Tenant: "default", Class: "probe", Name: "never"}); err != nil || found {
		t.Errorf("history of the name never used: %v %v, want none", found, err)
	}

	series := `wasmkeep_actor_deletes_total{how="operator"}`
	if got := a.metric(series) + b.metric(series); got != 3 {
		t.Errorf("operator deletes counted on a and b: %v, want 3", got)
	}
	failed := `wasmkeep_actor_delete_failures_total{how="operator"}`
	if got := a.metric(failed) + b.metric(failed); got != 0 {
		t.Errorf("operator delete failures counted: %v, want 0", got)
	}
}

// The command's own outcomes with no node: --no-wait returns once the
// request is written, a wait that ends with the request still there exits
// 3, and a request that went with no outcome is reported dropped (1).
func TestActorDeleteWithoutNodes(t *testing.T) {
	t.Parallel()
	engineNeutral(t)
	dir := t.TempDir()
	fb := fileBucket(t, dir)
	state := bucket.Under(fb, app.Name{Tenant: "acme", App: "shop"}.StateRoot())
	// A history object is all the command's existence check reads.
	prefix, err := history.Prefix(history.Actor{Tenant: "acme", Class: "cart", Name: "u-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := state.Put(t.Context(), prefix+"x", strings.NewReader(""), 0, bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
	if out, code := actorDeleteCLI(t, dir, "acme/shop/cart/u-1", "--no-wait"); code != 0 || !strings.Contains(out, "requested") {
		t.Errorf("--no-wait: exit %d\n%s", code, out)
	}
	if out, code := actorDeleteCLI(t, dir, "acme/shop/cart/u-1", "--wait", "1"); code != 3 || !strings.Contains(out, "keeps trying") {
		t.Errorf("--wait 1 with no node: exit %d, want 3\n%s", code, out)
	}
	type result struct {
		out  string
		code int
	}
	waited := make(chan result, 1)
	go func() {
		out, code := actorDeleteCLI(t, dir, "acme/shop/cart/u-1", "--wait", "60")
		waited <- result{out, code}
	}()
	waitFor(t, 20*time.Second, "the third request", func() bool {
		l, err := deletes.List(t.Context(), state)
		return err == nil && len(l.Requests) == 3
	})
	l, err := deletes.List(t.Context(), state)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range l.Requests {
		if err := state.Delete(t.Context(), r.Key(), bucket.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	if r := <-waited; r.code != 1 || !strings.Contains(r.out, "dropped") {
		t.Errorf("a request gone with no outcome: exit %d, want 1 and dropped\n%s", r.code, r.out)
	}
	if out, code := actorDeleteCLI(t, dir, "acme/shop/cart/bad/name"); code != 2 {
		t.Errorf("a name with a /: exit %d, want 2\n%s", code, out)
	}
}

// offsetClock is the real clock read ahead by an offset a test moves.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *offsetClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return clock.Real.AfterFunc(d, f)
}
func (c *offsetClock) NewTimer(d time.Duration) clock.Timer { return clock.Real.NewTimer(d) }

// Idle expiry (book ADR 0028, section 4; ADR 1053): actors used and
// released on node a, which then stops, are judged idle by their records'
// times in the bucket on node b, started afterwards: a restart makes no
// actor young. With b's clock a minute short of the limit past their
// release nothing expires, nor a minute past it while b is behind on
// deploys; then the actors without an alarm expire and the one with a
// pending alarm keeps its data. Three more
// rules, each with its failure planted in the bucket (expiryGate): a
// request that wakes a candidate on b after b's listing, queued before its
// job, keeps its data (the job did not acquire it); a job refused for a
// passing reason is tried
// again by the next pass (old's record unreadable during its first pass
// past the limit once more); and an expired actor, empty, is not expired
// (nor counted) again once its record is past the limit once more.
func TestIdleExpiry(t *testing.T) {
	t.Parallel()
	engineNeutral(t)
	mem := buckettest.NewMemory(buckettest.Flaws{})
	classes := map[string]string{"probe": probe(t)}
	a, am := ownedNodeOn(t, mem, "a", classes, 200*time.Millisecond)
	idle := []string{"a1", "a2", "a3", "a4"} // listed before old: their jobs take the four slots
	for _, name := range append(idle, "old") {
		a.expect("POST", "/actor/probe/"+name+"/token?t=x1", "", 200, "1")
	}
	a.expect("POST", "/actor/probe/alarmed/token?t=x2", "", 200, "1")
	a.expect("POST", "/actor/probe/alarmed/alarm-set?in=10800000", "", 200, "set")
	waitFor(t, 10*time.Second, "all to hibernate on a", func() bool { return len(am.Owners.Holds()) == 0 })
	a.stop()
	if err := am.Leave(t.Context()); err != nil {
		t.Fatal(err)
	}

	clk := &offsetClock{}
	clk.off.Store(int64(time.Hour - time.Minute))
	gate := &expiryGate{Bucket: mem}
	b, bm := clusterNode(t, gate, "b", node.Options{Classes: classes, Clock: clk, ExpiryPass: 100 * time.Millisecond,
		IdleTimeout: 15 * time.Second, ExpireAfterIdle: map[string]time.Duration{"probe": time.Hour}})
	go bm.WatchPeers(t.Context())
	expired := `wasmkeep_actor_deletes_total{how="expired"}`
	waitFor(t, 10*time.Second, "b to list its peers", func() bool { return bm.View.Listings() >= 2 })
	time.Sleep(time.Second) // passes, which must find nothing idle long enough
	if got := b.metric(expired); got != 0 {
		t.Fatalf("expired a minute short of the limit: %v", got)
	}
	gate.wake = func() {
		if code, got := b.do("POST", "/actor/probe/old/token?t=x3", ""); code != 200 || got != "2" {
			t.Errorf("old woken after the listing: %d %q, want its second token", code, got)
		}
	}
	clk.off.Store(int64(time.Hour + time.Minute))
	b.node.SetBehind(errors.New("a version it cannot follow"))
	time.Sleep(time.Second) // passes, which a node behind on deploys does not run
	if got := b.metric(expired); got != 0 {
		t.Fatalf("expired %v actors while behind on deploys", got)
	}
	b.node.SetBehind(nil)
	waitFor(t, 20*time.Second, "a1 to a4 to expire", func() bool { return b.metric(expired) >= 4 })
	// a1 to a4 are not read: an event would make them actors used since.
	// Records written from now on (old's, resident since its wake, when it
	// hibernates) are not past the limit on b's clock.
	// (old must stay resident on b until then: hibernated before, its
	// record would be past the limit on b's clock, and expired by the rules.
	// With a 5 s idle timeout a1 to a4's jobs outlasted it once, on a
	// loaded machine.)
	clk.off.Store(0)
	b.expect("GET", "/actor/probe/old/tokens", "", 200, "x1\nx3\n")
	b.expect("GET", "/actor/probe/alarmed/tokens", "", 200, "x2\n")
	if got := b.metric(expired); got != 4 {
		t.Errorf("expired %v actors, want a1 to a4", got)
	}

	waitFor(t, 40*time.Second, "all to hibernate on b", func() bool { return len(bm.Owners.Holds()) == 0 })
	gate.down.Store(true)
	clk.off.Store(int64(time.Hour + time.Minute))
	waitFor(t, 20*time.Second, "old to expire", func() bool { return b.metric(expired) >= 5 })
	time.Sleep(time.Second) // passes, which must not expire a1 to a4 again
	if got := b.metric(expired); got != 5 {
		t.Errorf("expired %v actors in all, want a1 to a4 once and old", got)
	}
	b.expect("GET", "/actor/probe/old/tokens", "", 200, "")
}

// expiryGate is the bucket of TestIdleExpiry's node b. Once down is set,
// the first read of a1's to a4's records runs wake, holding those four
// jobs until it returns (old's job, queued after them, runs after its
// wake). While down is set, reads of old's record fail, until the next
// listing of records after one failed (old's job in that pass is refused).
type expiryGate struct {
	bucket.Bucket
	wake   func()
	down   atomic.Bool // old's record cannot be read
	failed atomic.Bool // and a read of it failed
	once   sync.Once
}

func (g *expiryGate) Get(ctx context.Context, key string, opts bucket.GetOptions) (*bucket.Object, error) {
	if !strings.Contains(key, "owners/") {
		return g.Bucket.Get(ctx, key, opts)
	}
	switch key[strings.LastIndex(key, "/")+1:] {
	case "a1", "a2", "a3", "a4":
		g.once.Do(g.wake) // the other three wait until it returns
	case "old":
		if g.down.Load() {
			g.failed.Store(true)
			return nil, bucket.ErrTransient
		}
	}
	return g.Bucket.Get(ctx, key, opts)
}

func (g *expiryGate) List(ctx context.Context, prefix string, opts bucket.ListOptions) (bucket.ListPage, error) {
	if strings.Contains(prefix, "owners/") && g.failed.Load() {
		g.down.Store(false)
	}
	return g.Bucket.List(ctx, prefix, opts)
}

// wasmkeepCLI runs the command line with args and returns its output and
// exit status.
func wasmkeepCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(wasmkeepBinary(t), args...)
	cmd.Env = withoutWasmkeepVars()
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return string(out), 0
}

// app delete (book ADR 0028, section 5; ADR 1053) refuses an app of which
// nothing is in the bucket, writing no tombstone (fails without the
// check); it refuses while a node of the app is live, naming it, with
// nothing written; with --force it
// writes the tombstone and removes every other object of the app under
// both roots, and nothing of another app; the node, which was live, stops
// with an error at its next version check; a deploy of it, an actor
// delete and a secrets set in it are refused afterwards. Fails with RemoveApp's skip of the tombstone removed (the
// listing finds nothing at all), with Publish's tombstone check removed
// (the deploy goes through), or with the follower's check removed (the
// node runs on).
func TestAppDelete(t *testing.T) {
	t.Parallel()
	engineNeutral(t)
	dir := t.TempDir()
	fb := fileBucket(t, dir)
	wasm := counter(t)
	deploy := func(a string) (string, int) {
		return wasmkeepCLI(t, "deploy", "--app", a, "--bucket", "file://"+dir, "--actor", "cart="+wasm)
	}
	for _, a := range []string{"acme/shop", "acme/blog"} {
		if out, code := deploy(a); code != 0 {
			t.Fatalf("deploy %s: exit %d\n%s", a, code, out)
		}
		root := "state/" + a + "/"
		for _, k := range []string{"actors/acme/cart/x/0000000000000001-0000000001-0000000000.ltx", "owners/acme/cart/x"} {
			if _, err := fb.Put(t.Context(), root+k, strings.NewReader("x"), 1, bucket.Condition{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	nosuch := []string{"app", "delete", "acme/nosuch", "--bucket", "file://" + dir}
	if out, code := wasmkeepCLI(t, nosuch...); code != 1 || !strings.Contains(out, "nothing of acme/nosuch") {
		t.Errorf("an app never deployed: exit %d, want 1\n%s", code, out)
	}
	if err := deploys.RefuseDeleted(t.Context(), fb, app.Name{Tenant: "acme", App: "nosuch"}); err != nil {
		t.Errorf("a tombstone for an app never deployed: %v", err)
	}
	_, node, logs := serveBinary(t, wasmkeepBinary(t), withoutWasmkeepVars(), "--data-dir", t.TempDir(), "--bucket", "file://"+dir, "--node-id", "n1", "--app", "acme/shop", "--cluster-plaintext", "accept")
	del := []string{"app", "delete", "acme/shop", "--bucket", "file://" + dir}
	if out, code := wasmkeepCLI(t, del...); code != 1 || !strings.Contains(out, "n1") {
		t.Errorf("with a live node: exit %d, want 1 naming n1\n%s", code, out)
	}
	if err := deploys.RefuseDeleted(t.Context(), fb, app.Name{Tenant: "acme", App: "shop"}); err != nil {
		t.Fatalf("a tombstone after the refusal: %v", err)
	}
	if out, code := wasmkeepCLI(t, append(del, "--force")...); code != 0 {
		t.Fatalf("--force: exit %d\n%s", code, out)
	}
	exited := make(chan error, 1)
	go func() { exited <- node.Wait() }()
	select {
	case err := <-exited:
		if err == nil || !strings.Contains(logs.String(), "the app was deleted") {
			t.Errorf("the node of the deleted app exited with %v:\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the node of the deleted app still runs 30 s after the delete:\n%s", logs.String())
	}
	for _, root := range []string{"state/acme/shop/", "apps/acme/shop/"} {
		entries, err := bucket.ListAll(t.Context(), fb, root)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, e := range entries {
			keys = append(keys, e.Key)
		}
		want := map[string]string{"state/acme/shop/": "", "apps/acme/shop/": "apps/acme/shop/deleted"}[root]
		if strings.Join(keys, " ") != want {
			t.Errorf("under %s after the delete: %q, want %q", root, keys, want)
		}
	}
	for _, root := range []string{"state/acme/blog/", "apps/acme/blog/"} {
		if entries, err := bucket.ListAll(t.Context(), fb, root); err != nil || len(entries) == 0 {
			t.Errorf("another app's %s: %d objects, %v", root, len(entries), err)
		}
	}
	if out, code := deploy("acme/shop"); code == 0 || !strings.Contains(out, "deleted") {
		t.Errorf("a deploy of the deleted app: exit %d\n%s", code, out)
	}
	if out, code := actorDeleteCLI(t, dir, "acme/shop/cart/x"); code != 1 || !strings.Contains(out, "app delete") {
		t.Errorf("an actor delete in the deleted app: exit %d, want 1\n%s", code, out)
	}
	key := filepath.Join(t.TempDir(), "secrets.key")
	if out, code := wasmkeepCLI(t, "secrets", "new-key", "--out", key); code != 0 {
		t.Fatalf("secrets new-key: exit %d\n%s", code, out)
	}
	secretsSet := exec.Command(wasmkeepBinary(t), "secrets", "set", "--bucket", "file://"+dir, "--app", "acme/shop", "--key", key, "--class", "cart", "TOKEN")
	secretsSet.Env, secretsSet.Stdin = withoutWasmkeepVars(), strings.NewReader("v")
	if out, err := secretsSet.CombinedOutput(); err == nil || !strings.Contains(string(out), "app delete") {
		t.Errorf("a secrets set in the deleted app: %v\n%s", err, out)
	}
}
