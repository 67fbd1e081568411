package membership

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
)

func put(t *testing.T, b bucket.Bucket, id string, o nodelease.Object) {
	t.Helper()
	body := o.Encode()
	if _, err := b.Put(context.Background(), nodelease.Key(id), bytes.NewReader(body), int64(len(body)), bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
}

// The listing reads every node's lease; the view counts a peer live from
// its written_at to the horizon, never a fenced, released or unreadable
// one, nor this node itself, and trusts each live peer at its pin.
func TestViewLiveness(t *testing.T) {
	ctx := context.Background()
	s := nodelease.DefaultSettings()
	clk := clock.NewManual(time.UnixMilli(1_000_000))
	b := buckettest.NewMemory(buckettest.Flaws{})
	now := clk.Now()
	live := func(pin string) nodelease.Object {
		return nodelease.Object{State: nodelease.Live, Instance: "i", Seq: 1, WrittenAt: now,
			Info: nodelease.Info{Advertise: "http://127.0.0.1:1", Pins: []string{pin}}}
	}
	put(t, b, "a", live("pa"))
	put(t, b, "b", live("pb"))
	fenced := live("pc")
	fenced.State = nodelease.Fenced
	put(t, b, "c", fenced)
	put(t, b, "self", live("ps"))
	if _, err := b.Put(ctx, nodelease.Key("junk"), bytes.NewReader([]byte("x")), 1, bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
	peers, err := List(ctx, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(peers) != 5 || peers[0].ID != "a" || peers[2].ID != "c" || peers[3].Err == nil {
		t.Fatalf("listing: %+v", peers)
	}
	v := NewView("self", s, clk)
	v.Update(peers)
	want := map[string]string{"a": "pa", "b": "pb"}
	if got := v.Trusted(); len(got) != 2 || got["a"] != "pa" || got["b"] != "pb" {
		t.Fatalf("trusted %v, want %v", got, want)
	}
	for _, id := range []string{"c", "junk", "self", "nobody"} {
		if _, err := v.Live(id); err == nil {
			t.Errorf("%s counts as live", id)
		}
	}
	if e := v.NextExpiry(); !e.Equal(now.Add(s.Horizon())) || s.Horizon() != 10*time.Second {
		t.Errorf("next expiry %v, horizon %v", e, s.Horizon())
	}
	clk.Advance(s.Horizon() - time.Millisecond)
	if _, err := v.Live("a"); err != nil {
		t.Error("a left the view before its horizon")
	}
	clk.Advance(time.Millisecond)
	if _, err := v.Live("a"); err == nil || len(v.Trusted()) != 0 || !v.NextExpiry().IsZero() {
		t.Error("a still live at its horizon")
	}
}
