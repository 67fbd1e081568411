package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/alarmindex"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
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
