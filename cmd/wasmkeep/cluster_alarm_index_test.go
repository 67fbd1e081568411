package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/alarmindex"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// failingIndex refuses every PUT of an alarm index entry while fail is
// set, as a bucket that cannot be reached would.
type failingIndex struct {
	bucket.Bucket
	fail atomic.Bool
}

func (f *failingIndex) Put(ctx context.Context, key string, body io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	if f.fail.Load() && strings.HasPrefix(key, app.Default.StateRoot()+alarmindex.Prefix) {
		return "", fmt.Errorf("the index is failing on purpose: %w", bucket.ErrTransient)
	}
	return f.Bucket.Put(ctx, key, body, size, cond)
}

// The owner keeps the alarm index in the bucket equal to the committed
// alarm (issue 26, item 1; book ADR 0009, point 2): a set alarm has one
// entry, under the holder's generation; a moved one a new entry, the old
// one removed, and the database (so the state shipped) names the new one;
// a cleared one has none, nor has one that fired, nor a deleted actor; a
// failing handler's retry is listed. When the entry cannot
// be listed, the actor is given up, with a plain write and with an
// exec-durable alike: the event's alarm is lost, and the bucket's state
// still names the entry that exists.
func TestTheOwnerKeepsTheAlarmIndex(t *testing.T) {
	engineNeutral(t)
	mem := buckettest.NewMemory(buckettest.Flaws{})
	fb := &failingIndex{Bucket: mem}
	state := bucket.Under(mem, app.Default.StateRoot())
	classes := map[string]string{"probe": probe(t)}
	owned := ownership.Actor{Tenant: "default", Class: "probe", Name: "x"}

	// entriesUntil reads the index's entries until ok accepts them (an
	// event's replaced entry is removed after its answer), for at most 5 s.
	entriesUntil := func(what string, ok func([]alarmindex.Key) bool) []alarmindex.Key {
		t.Helper()
		var keys []alarmindex.Key
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			listed, err := bucket.ListAll(t.Context(), state, alarmindex.Prefix)
			if err != nil {
				t.Fatal(err)
			}
			keys = keys[:0]
			for _, e := range listed {
				k, err := alarmindex.ParseKey(e.Key)
				if err != nil {
					t.Fatal(err)
				}
				keys = append(keys, k)
			}
			if ok(keys) {
				return keys
			}
			if time.Now().After(deadline) {
				t.Fatalf("the index holds %v, want %s", keys, what)
			}
		}
	}
	entries := func(want int) []alarmindex.Key {
		t.Helper()
		return entriesUntil(fmt.Sprintf("%d entries", want), func(keys []alarmindex.Key) bool { return len(keys) == want })
	}
	// due checks that k lists x's alarm about in from now, under gen.
	due := func(k alarmindex.Key, in time.Duration, gen uint64) {
		t.Helper()
		if k.Tenant != "default" || k.Class != "probe" || k.Name != "x" || k.Tag.Gen != gen {
			t.Fatalf("entry %s, want default/probe/x's under generation %d", k, gen)
		}
		if d := time.Until(time.UnixMilli(k.At)) - in; d > 0 || d < -10*time.Second {
			t.Fatalf("entry %s is due in %v, want %v", k, time.Until(time.UnixMilli(k.At)), in)
		}
	}
	generation := func(m *cluster.Member) uint64 {
		t.Helper()
		h, ok := m.Owners.Owns(owned)
		if !ok {
			t.Fatal("the node does not hold default/probe/x")
		}
		return h.Generation
	}
	setIn := func(tn *testNode, in time.Duration, query string) (int, string) {
		return tn.do("GET", "/actor/probe/x/alarm-set?in="+strconv.FormatInt(in.Milliseconds(), 10)+query, "")
	}

	a, ma := clusterNodeOn(t, fb, "a", classes)
	a.expect("GET", "/actor/probe/x/alarm-set?in=3600000", "", 200, "set")
	due(entries(1)[0], time.Hour, generation(ma))
	a.expect("GET", "/actor/probe/x/alarm-set?in=7200000", "", 200, "set")
	moved := entries(1)[0]
	due(moved, 2*time.Hour, generation(ma))

	// Stopped, the node has shipped everything: its database is the
	// bucket's head, and it names the entry that exists.
	a.stop()
	if got := recordedEntry(t, a); got != moved.Indexed().Encode() {
		t.Fatalf("the database records %q, want %q", got, moved.Indexed().Encode())
	}

	// Another node restores x and clears its alarm: no entry is left.
	b, mb := clusterNodeOn(t, fb, "b", classes)
	if code, body := b.do("GET", "/actor/probe/x/alarm-get", ""); code != 200 || !strings.HasPrefix(body, "in 7") {
		t.Fatalf("alarm-get on b: %d %q, want the alarm a set", code, body)
	}
	b.expect("GET", "/actor/probe/x/alarm-clear", "", 200, "cleared")
	entries(0)

	// An alarm listed by b, then moves whose entries cannot be listed.
	b.expect("GET", "/actor/probe/x/alarm-set?in=3600000", "", 200, "set")
	listed := entries(1)[0]
	due(listed, time.Hour, generation(mb))
	fb.fail.Store(true)
	if code, body := setIn(b, 90*time.Minute, ""); code != 503 {
		t.Fatalf("a move whose entry cannot be listed: %d %q, want 503", code, body)
	}
	if code, body := setIn(b, 90*time.Minute, "&durable=1"); code != 200 || !strings.HasPrefix(body, "error internal: committed here, but not made durable") {
		t.Fatalf("a move made durable whose entry cannot be listed: %d %q, want the exec-durable's error", code, body)
	}
	fb.fail.Store(false)
	if n := strings.Count(b.log.String(), "the alarm could not be listed in the bucket's index: the actor is given up"); n != 2 {
		t.Fatalf("the actor was given up %d times, want 2:\n%s", n, b.log)
	}
	// Taken again from the bucket: the alarm is the one listed, still the
	// only entry.
	if code, body := b.do("GET", "/actor/probe/x/alarm-get", ""); code != 200 || !strings.HasPrefix(body, "in 3") {
		t.Fatalf("alarm-get on b after the failed moves: %d %q, want the alarm listed before them", code, body)
	}
	if got := entries(1)[0]; got != listed {
		t.Fatalf("the index holds %s, want %s", got, listed)
	}

	// exec-durable lists the alarm before its upload.
	if code, body := setIn(b, 2*time.Hour, "&durable=1"); code != 200 || body != "ok set" {
		t.Fatalf("a move made durable: %d %q", code, body)
	}
	due(entries(1)[0], 2*time.Hour, generation(mb))

	// An alarm that fired and succeeded leaves no entry; a failing
	// handler's retry is listed at its time.
	b.expect("GET", "/actor/probe/x/alarm-set?in=200", "", 200, "set")
	entries(0)
	b.expect("POST", "/actor/probe/x/exec", "CREATE TABLE fail_alarm (v)", 200, "ok 0")
	b.expect("GET", "/actor/probe/x/alarm-set?in=200", "", 200, "set")
	first := entries(1)[0]
	retry := entriesUntil("the retry's entry", func(keys []alarmindex.Key) bool { return len(keys) == 1 && keys[0].At > first.At })[0]
	if code, body := b.do("GET", "/actor/probe/x/alarm-get", ""); code != 200 || body == "none" {
		t.Fatalf("alarm-get during the retries: %d %q", code, body)
	}
	if code, body := b.do("POST", "/actor/probe/x/exec", "DROP TABLE fail_alarm"); code != 200 || !strings.HasPrefix(body, "ok ") {
		t.Fatalf("dropping fail_alarm: %d %q", code, body)
	}
	b.expect("GET", "/actor/probe/x/alarm-clear", "", 200, "cleared")
	entries(0)
	t.Logf("retry listed %v after the first attempt's time", time.UnixMilli(retry.At).Sub(time.UnixMilli(first.At)))

	// Deleted, plainly and durably, the actor's state names no entry: none
	// is left.
	for _, how := range []string{"", "?durable=1"} {
		b.expect("GET", "/actor/probe/x/alarm-set?in=3600000", "", 200, "set")
		entries(1)
		if code, body := b.do("GET", "/actor/probe/x/delete"+how, ""); code != 200 || !strings.HasPrefix(body, "<nil>") {
			t.Fatalf("delete%s: %d %q", how, code, body)
		}
		entries(0)
	}
}

// recordedEntry is the entry x's database records (alarm_indexed), read
// from the stopped node tn's data.
func recordedEntry(t *testing.T, tn *testNode) string {
	t.Helper()
	root := filepath.Join(tn.dataDir, filepath.FromSlash(app.Default.StateRoot()))
	db, err := tn.storage.Open(t.Context(), root, abi.Address{Tenant: "default", Class: "probe", Name: "x"}, storage.Options{Replication: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var w abi.RowsWriter
	if err := db.HostQuery(t.Context(), "SELECT value FROM _wasmkeep_meta WHERE key = 'alarm_indexed'", nil, &w); err != nil {
		t.Fatal(err)
	}
	r := abi.NewReader(w.Buf)
	if _, n := r.Columns(); n == 0 {
		t.Fatal("the database records no alarm_indexed")
	}
	v := r.Value()
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return string(v.Bytes)
}

// recordingBucket keeps, in order, the key of every PUT and DELETE that
// reached the bucket.
type recordingBucket struct {
	bucket.Bucket
	mu     sync.Mutex
	writes []string // "PUT <key>" or "DELETE <key>"
}

func (r *recordingBucket) Put(ctx context.Context, key string, body io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	v, err := r.Bucket.Put(ctx, key, body, size, cond)
	if err == nil {
		r.record("PUT " + key)
	}
	return v, err
}

func (r *recordingBucket) Delete(ctx context.Context, key string, cond bucket.Condition) error {
	err := r.Bucket.Delete(ctx, key, cond)
	if err == nil {
		r.record("DELETE " + key)
	}
	return err
}

func (r *recordingBucket) record(w string) {
	r.mu.Lock()
	r.writes = append(r.writes, w)
	r.mu.Unlock()
}

// since is every write recorded from the n-th on.
func (r *recordingBucket) since(n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.writes[n:])
}

func (r *recordingBucket) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.writes)
}

// firstWrite is the index in writes of the first that starts with prefix,
// -1 if none does.
func firstWrite(writes []string, prefix string) int {
	return slices.IndexFunc(writes, func(w string) bool { return strings.HasPrefix(w, prefix) })
}

// probeActor is the probe class's actor name, in the bucket's terms.
func probeActor(name string) history.Actor {
	return history.Actor{Tenant: "default", Class: "probe", Name: name}
}

// historyPrefix is the full key prefix of a's history in the default app.
func historyPrefix(t *testing.T, a history.Actor) string {
	t.Helper()
	p, err := history.Prefix(a)
	if err != nil {
		t.Fatal(err)
	}
	return app.Default.StateRoot() + p
}

// entriesOf reads a's entries in the index, all of them (at < 0) or at
// one time.
func entriesOf(t *testing.T, state bucket.Bucket, a history.Actor, at int64) []alarmindex.Key {
	t.Helper()
	listed, err := bucket.ListAll(t.Context(), state, alarmindex.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	var keys []alarmindex.Key
	for _, e := range listed {
		k, err := alarmindex.ParseKey(e.Key)
		if err != nil {
			t.Fatal(err)
		}
		if k.Class == a.Class && k.Name == a.Name && (at < 0 || k.At == at) {
			keys = append(keys, k)
		}
	}
	return keys
}

// listEntry puts an entry for a at at under generation gen, as an owner
// that held it would have.
func listEntry(t *testing.T, state bucket.Bucket, a history.Actor, at int64, gen uint64) alarmindex.Key {
	t.Helper()
	k, err := alarmindex.List(t.Context(), state, a, at, gen, alarmindex.RandomNonces)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// alarmEvents is the series that counts the alarm events a node ran.
const alarmEvents = `wasmkeep_events_total{class="probe",kind="alarm",outcome="ok"}`

// onAlarmRan answers "ok 1" once name's on-alarm ran (the probe's first
// attempt creates alarm_attempts), "ok 0" before.
func onAlarmRan(t *testing.T, tn *testNode, name string) string {
	t.Helper()
	_, body := tn.do("POST", "/actor/probe/"+name+"/query", "SELECT count(*) FROM sqlite_master WHERE name = 'alarm_attempts'")
	return body
}

// A delivered time the committed alarm no longer holds is stale (book ADR
// 0009, point 4): after the delivery its entries are removed, the
// committed alarm's entry is kept (R2), a newer owner's entry survives
// (R3), and on-alarm does not run. An owner that has uploaded nothing
// under its hold ships the owner_fence change before it removes anything.
func TestDeliveryRemovesStaleEntries(t *testing.T) {
	engineNeutral(t)
	mem := buckettest.NewMemory(buckettest.Flaws{})
	rec := &recordingBucket{Bucket: mem}
	state := bucket.Under(mem, app.Default.StateRoot())
	classes := map[string]string{"probe": probe(t)}
	x := probeActor("x")

	a, ma := clusterNodeOn(t, rec, "a", classes)
	a.expect("GET", "/actor/probe/x/alarm-set?in=3600000", "", 200, "set")
	named := entriesOf(t, state, x, -1)
	if len(named) != 1 {
		t.Fatalf("x's entries: %v, want the alarm's", named)
	}
	h, ok := ma.Owners.Owns(ownership.Actor{Tenant: "default", Class: "probe", Name: "x"})
	if !ok {
		t.Fatal("a does not hold x")
	}
	gen := h.Generation

	// The holder, which uploaded under its hold, removes its own stale
	// entry and leaves a newer owner's.
	stale := time.Now().Add(-time.Minute).UnixMilli()
	own := listEntry(t, state, x, stale, gen)
	newer := listEntry(t, state, x, stale, gen+1000)
	a.node.ArmAlarm("probe", "x", time.UnixMilli(stale))
	waitFor(t, 10*time.Second, "the stale entry's removal", func() bool { return !slices.Contains(entriesOf(t, state, x, stale), own) })
	if got := entriesOf(t, state, x, stale); !slices.Equal(got, []alarmindex.Key{newer}) {
		t.Fatalf("entries at the stale time: %v, want the newer owner's %s only", got, newer)
	}
	if got := entriesOf(t, state, x, named[0].At); !slices.Equal(got, named) {
		t.Fatalf("entries at the alarm's time: %v, want %v", got, named)
	}
	if got := onAlarmRan(t, a, "x"); got != "ok 0" {
		t.Fatalf("on-alarm ran for a stale time: %q", got)
	}
	a.expect("GET", "/actor/probe/x/alarm-get?at=1", "", 200, fmt.Sprintf("at %d", named[0].At))
	a.stop()

	// Another node restores x and has uploaded nothing when a stale time
	// is delivered: it fences first.
	b, _ := clusterNodeOn(t, rec, "b", classes)
	stale2 := stale - 1000
	older := listEntry(t, state, x, stale2, gen)
	mark := rec.len()
	b.node.ArmAlarm("probe", "x", time.UnixMilli(stale2))
	waitFor(t, 10*time.Second, "the stale entry's removal by b", func() bool { return len(entriesOf(t, state, x, stale2)) == 0 })
	writes := rec.since(mark)
	fenced, removed := firstWrite(writes, "PUT "+historyPrefix(t, x)), firstWrite(writes, "DELETE "+app.Default.StateRoot()+older.String())
	if fenced < 0 || removed < fenced {
		t.Fatalf("b's writes: %q, want the fence's upload before the stale entry's delete", writes)
	}
	if got := entriesOf(t, state, x, named[0].At); !slices.Equal(got, named) {
		t.Fatalf("entries at the alarm's time after b's delivery: %v, want %v", got, named)
	}
	if n := b.metric("wasmkeep_wakes_total"); n != 0 {
		t.Fatalf("b woke x %v times for a stale time, want 0", n)
	}
}

// An alarm delivery creates no actor (book ADR 0009, point 4 and R2): for
// an actor the bucket never had, its entry stays, nothing is uploaded, no
// database is left and the actor is released at once; for a deleted
// actor, the entry is removed without running the actor, and no database
// is left either.
func TestAlarmDeliveryCreatesNoActor(t *testing.T) {
	engineNeutral(t)
	mem := buckettest.NewMemory(buckettest.Flaws{})
	rec := &recordingBucket{Bucket: mem}
	state := bucket.Under(mem, app.Default.StateRoot())
	classes := map[string]string{"probe": probe(t)}
	hasDatabase := func(tn *testNode, name string) bool {
		t.Helper()
		ok, err := tn.storage.Exists(t.Context(), filepath.Join(tn.dataDir, filepath.FromSlash(app.Default.StateRoot())),
			abi.Address{Tenant: "default", Class: "probe", Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	a, ma := clusterNodeOn(t, rec, "a", classes)
	y := probeActor("y")
	at := time.Now().Add(-time.Minute).UnixMilli()
	entry := listEntry(t, state, y, at, 1)
	a.node.ArmAlarm("probe", "y", time.UnixMilli(at))
	waitFor(t, 10*time.Second, "the delivery to y", func() bool { return a.metric(alarmEvents) == 1 })
	waitFor(t, 10*time.Second, "y released", func() bool {
		_, held := ma.Owners.Owns(ownership.Actor{Tenant: "default", Class: "probe", Name: "y"})
		return !held
	})
	if got := entriesOf(t, state, y, -1); !slices.Equal(got, []alarmindex.Key{entry}) {
		t.Fatalf("y's entries: %v, want %s to stay", got, entry)
	}
	for _, w := range rec.since(0) {
		if strings.HasPrefix(w, "PUT "+historyPrefix(t, y)) {
			t.Fatalf("the delivery uploaded %s", w)
		}
	}
	if hasDatabase(a, "y") {
		t.Fatal("the delivery left a database for y")
	}
	if n := a.metric("wasmkeep_wakes_total"); n != 0 {
		t.Fatalf("a woke y %v times, want 0", n)
	}

	// z had an alarm and was deleted; a stale entry delivered by another
	// node is removed without running z.
	z := probeActor("z")
	a.expect("GET", "/actor/probe/z/alarm-set?in=3600000", "", 200, "set")
	if code, body := a.do("GET", "/actor/probe/z/delete", ""); code != 200 || !strings.HasPrefix(body, "<nil>") {
		t.Fatalf("delete: %d %q", code, body)
	}
	a.stop()
	b, mb := clusterNodeOn(t, rec, "b", classes)
	listEntry(t, state, z, at, 1)
	b.node.ArmAlarm("probe", "z", time.UnixMilli(at))
	waitFor(t, 10*time.Second, "the removal of z's entry", func() bool { return len(entriesOf(t, state, z, -1)) == 0 })
	waitFor(t, 10*time.Second, "z given up", func() bool {
		_, held := mb.Owners.Owns(ownership.Actor{Tenant: "default", Class: "probe", Name: "z"})
		return !held
	})
	if hasDatabase(b, "z") {
		t.Fatal("the delivery left a database for the deleted z")
	}
	if n := b.metric("wasmkeep_wakes_total"); n != 0 {
		t.Fatalf("b woke the deleted z %v times, want 0", n)
	}
}

// R4 (book ADR 0009): an alarm in a node's own data from before it joined
// a cluster is listed, and the entry recorded, before the actor's first
// upload, so the first state in the bucket names an entry that exists.
func TestAnAlarmFromSingleNodeDataIsListedBeforeItsFirstUpload(t *testing.T) {
	dir := t.TempDir()
	classes := map[string]string{"probe": probe(t)}
	solo := startNode(t, node.Options{Classes: classes, DataDir: dir})
	solo.expect("GET", "/actor/probe/x/alarm-set?in=3600000", "", 200, "set")
	solo.stop()

	mem := buckettest.NewMemory(buckettest.Flaws{})
	rec := &recordingBucket{Bucket: mem}
	state := bucket.Under(mem, app.Default.StateRoot())
	x := probeActor("x")
	a, _ := clusterNodeIn(t, rec, "a", classes, dir)
	if code, body := a.do("GET", "/actor/probe/x/alarm-get", ""); code != 200 || !strings.HasPrefix(body, "in 3") {
		t.Fatalf("alarm-get on the joined node: %d %q", code, body)
	}
	a.stop()
	entries := entriesOf(t, state, x, -1)
	if len(entries) != 1 {
		t.Fatalf("x's entries: %v, want the alarm's", entries)
	}
	writes := rec.since(0)
	listed, uploaded := firstWrite(writes, "PUT "+app.Default.StateRoot()+alarmindex.Prefix), firstWrite(writes, "PUT "+historyPrefix(t, x))
	if listed < 0 || uploaded < listed {
		t.Fatalf("the bucket's writes: %q, want the alarm's entry before x's first upload", writes)
	}
	if got := recordedEntry(t, a); got != entries[0].Indexed().Encode() {
		t.Fatalf("the database records %q, want %q", got, entries[0].Indexed().Encode())
	}
}

// A stale time delivered while the committed alarm is due runs on-alarm
// for that alarm, and its entries go after the event whatever on-alarm
// did (book ADR 0009, point 4): failed, the entry spared is the retry's;
// having deleted the actor, none is.
func TestStaleEntriesGoWhenOnAlarmFailsOrDeletes(t *testing.T) {
	engineNeutral(t)
	mem := buckettest.NewMemory(buckettest.Flaws{})
	state := bucket.Under(mem, app.Default.StateRoot())
	a, ma := clusterNodeOn(t, mem, "a", map[string]string{"probe": probe(t)})
	for _, c := range []struct {
		name, table string
		left        int // entries once it settled: the retry's, or none
	}{{"f", "fail_alarm", 1}, {"d", "delete_on_alarm", 0}} {
		act := probeActor(c.name)
		a.expect("POST", "/actor/probe/"+c.name+"/exec", "CREATE TABLE "+c.table+" (v)", 200, "ok 0")
		due := time.Now().Add(2 * time.Second).UnixMilli()
		a.expect("GET", fmt.Sprintf("/actor/probe/%s/alarm-set?at=%d", c.name, due), "", 200, "set")
		h, ok := ma.Owners.Owns(ownership.Actor{Tenant: "default", Class: "probe", Name: c.name})
		if !ok {
			t.Fatalf("a does not hold %s", c.name)
		}
		stale := due + 100
		listEntry(t, state, act, stale, h.Generation)
		// The timer delivers the stale time in place of the alarm's, once
		// the alarm is due.
		a.node.ArmAlarm("probe", c.name, time.UnixMilli(stale))
		waitFor(t, 10*time.Second, c.name+"'s entries settled", func() bool {
			keys := entriesOf(t, state, act, -1)
			return len(keys) == c.left && !slices.ContainsFunc(keys, func(k alarmindex.Key) bool { return k.At == stale || k.At == due })
		})
	}
	if got := onAlarmRan(t, a, "f"); got != "ok 1" {
		t.Fatalf("f's on-alarm did not run: %q", got)
	}
}

// gatedLists holds every List under prefix but the first pass ones until
// gate is closed, saying so on entered (once). An acquisition lists the
// actor's history (its generation), then its restore does.
type gatedLists struct {
	bucket.Bucket
	prefix  string
	pass    int32
	passed  atomic.Int32
	gate    chan struct{}
	entered chan struct{}
}

func (g *gatedLists) List(ctx context.Context, prefix string, opts bucket.ListOptions) (bucket.ListPage, error) {
	if strings.HasPrefix(prefix, g.prefix) && g.passed.Add(1) > g.pass {
		select {
		case g.entered <- struct{}{}:
		default:
		}
		<-g.gate
	}
	return g.Bucket.List(ctx, prefix, opts)
}

// An alarm delivery that finds the actor nowhere writes nothing into the
// database it opened, whatever ends the event next (review F1): here the
// class is dropped while the delivery lists the actor's history, so the
// event ends at the version check, and nothing of the actor is uploaded
// (before the fix its empty txid 1 was, at the delivery's generation),
// nor is a database left.
func TestAnAlarmDeliveryFoundNowhereShipsNothingWhateverEndsIt(t *testing.T) {
	mem := buckettest.NewMemory(buckettest.Flaws{})
	rec := &recordingBucket{Bucket: mem}
	y := probeActor("y")
	gated := &gatedLists{Bucket: rec, prefix: historyPrefix(t, y), gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	opened := false
	defer func() {
		if !opened {
			close(gated.gate)
		}
	}()
	state := bucket.Under(mem, app.Default.StateRoot())
	mod := probe(t)
	a, ma := clusterNodeOn(t, gated, "a", map[string]string{"probe": mod, "keep": mod})
	at := time.Now().Add(-time.Minute).UnixMilli()
	entry := listEntry(t, state, y, at, 1)
	a.node.ArmAlarm("probe", "y", time.UnixMilli(at))
	select {
	case <-gated.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the delivery did not start y's restore")
	}
	a.apply(node.Version{ID: "bbbb", Seq: 1, Classes: map[string]node.ClassSpec{"keep": {Module: mod}}})
	close(gated.gate)
	opened = true
	// Released once the delivery gave it up; held still (before the fix),
	// the stop below ships what it wrote.
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, held := ma.Owners.Owns(ownership.Actor{Tenant: "default", Class: "probe", Name: "y"})
		if !held && strings.Contains(a.log.String(), "the bucket has nothing of") {
			break
		}
		if time.Now().After(end) {
			t.Error("y was not given up")
			break
		}
	}
	a.stop()
	for _, w := range rec.since(0) {
		if strings.HasPrefix(w, "PUT "+historyPrefix(t, y)) {
			t.Fatalf("the delivery uploaded %s", w)
		}
	}
	if got := entriesOf(t, state, y, -1); !slices.Equal(got, []alarmindex.Key{entry}) {
		t.Fatalf("y's entries: %v, want %s to stay", got, entry)
	}
	if ok, err := a.storage.Exists(t.Context(), filepath.Join(a.dataDir, filepath.FromSlash(app.Default.StateRoot())),
		abi.Address{Tenant: "default", Class: "probe", Name: "y"}); err != nil || ok {
		t.Fatalf("y's database here: %v %v, want none", ok, err)
	}
}
