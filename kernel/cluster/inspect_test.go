package cluster

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
)

// writeChain stores n one-page transactions of generation 1 for an actor,
// each an LTX file as the replicator writes it, and returns their keys.
func writeChain(t *testing.T, b bucket.Bucket, a history.Actor, n int) []string {
	t.Helper()
	var ck history.Checksums
	var keys []string
	for i := 1; i <= n; i++ {
		pages := []history.Page{{Pgno: 1, Data: bytes.Repeat([]byte{byte(i)}, 512)}}
		pre := ck.Sum()
		post, err := ck.Apply(512, 1, pages)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		f := &history.File{PageSize: 512, Commit: 1, MinTXID: uint64(i), MaxTXID: uint64(i), PreApply: pre, PostApply: post, Pages: pages}
		if err := history.Encode(&buf, f); err != nil {
			t.Fatal(err)
		}
		parent := uint64(1)
		if i == 1 {
			parent = 0
		}
		key, err := history.ObjectKey(a, history.Key{Kind: history.Segment, TXID: uint64(i), Gen: 1, Parent: parent})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Put(context.Background(), key, bytes.NewReader(buf.Bytes()), int64(buf.Len()), bucket.Condition{IfAbsent: true}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	return keys
}

// Apps finds every app with state; ListStored finds every actor under an
// app's actors/, names decoded; Verify passes a whole chain and names what
// is wrong with a chain missing a link or holding a damaged object.
func TestListAndVerify(t *testing.T) {
	ctx := context.Background()
	b := buckettest.NewMemory(buckettest.Flaws{})
	other := app.Name{Tenant: "other", App: "rooms"}
	def, oth := bucket.Under(b, app.Default.StateRoot()), bucket.Under(b, other.StateRoot())
	ok := history.Actor{Tenant: "default", Class: "counter", Name: "a b"}
	gap := history.Actor{Tenant: "default", Class: "counter", Name: "gap"}
	damaged := history.Actor{Tenant: "other", Class: "room", Name: "x"}
	writeChain(t, def, ok, 5)
	gapKeys := writeChain(t, def, gap, 4)
	if err := def.Delete(ctx, gapKeys[1], bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
	dKeys := writeChain(t, oth, damaged, 3)
	obj, err := oth.Get(ctx, dKeys[2], bucket.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	body := new(bytes.Buffer)
	body.ReadFrom(obj.Body)
	obj.Body.Close()
	bad := body.Bytes()
	bad[len(bad)/2] ^= 0xff
	if _, err := oth.Put(ctx, dKeys[2], bytes.NewReader(bad), int64(len(bad)), bucket.Condition{IfVersion: obj.Version}); err != nil {
		t.Fatal(err)
	}

	apps, err := Apps(ctx, b)
	if err != nil || len(apps) != 2 || apps[0] != app.Default || apps[1] != other {
		t.Fatalf("Apps = %v, %v", apps, err)
	}
	all, err := ListStored(ctx, b, app.Default)
	if err != nil {
		t.Fatal(err)
	}
	only, err := ListStored(ctx, b, other)
	if err != nil || len(only) != 1 || only[0].Name != "x" || only[0].App != other {
		t.Fatalf("the other app: %v, %v", only, err)
	}
	all = append(all, only...)
	var names []string
	for _, s := range all {
		names = append(names, s.String())
	}
	if got := strings.Join(names, ","); got != "default/counter/a b,default/counter/gap,other/room/x" {
		t.Fatalf("ListStored: %s", got)
	}

	plan, err := Verify(ctx, b, all[0], t.TempDir())
	if err != nil || plan.Head != (history.Pos{TXID: 5, Gen: 1}) {
		t.Errorf("a whole chain: head %v, %v", plan.Head, err)
	}
	for _, s := range all[1:] {
		_, err := Verify(ctx, b, s, t.TempDir())
		var broken *history.BrokenError
		if !errors.As(err, &broken) {
			t.Errorf("%s: %v, want a broken chain", s, err)
		}
	}
}

// A key under state/ outside an app's root is an error naming it.
func TestAppsRefusesAStrayKey(t *testing.T) {
	b := buckettest.NewMemory(buckettest.Flaws{})
	if _, err := b.Put(t.Context(), "state/acme/x", strings.NewReader("x"), 1, bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Apps(t.Context(), b); err == nil || !strings.Contains(err.Error(), `"state/acme/x" is under state/ but not under an app's root`) {
		t.Errorf("Apps: %v", err)
	}
}
