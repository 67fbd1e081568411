package membership

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
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

// marked is a bucket as an S3 console leaves it: a zero-byte folder marker
// "nodes/" listed first (the key rule refuses it, so Get does too), and a
// read refused or failing for one key of its own.
type marked struct {
	bucket.Bucket
	refused, failing string
}

func (m marked) List(ctx context.Context, prefix string, opts bucket.ListOptions) (bucket.ListPage, error) {
	p, err := m.Bucket.List(ctx, prefix, opts)
	if opts.StartAfter == "" {
		p.Entries = append([]bucket.Entry{{Key: nodelease.Prefix, Version: "v"}}, p.Entries...)
	}
	return p, err
}

func (m marked) Get(ctx context.Context, key string, opts bucket.GetOptions) (*bucket.Object, error) {
	switch {
	case m.refused != "" && key == nodelease.Key(m.refused):
		return nil, errors.New("403 AccessDenied")
	case m.failing != "" && key == nodelease.Key(m.failing):
		return nil, fmt.Errorf("503 SlowDown: %w", bucket.ErrTransient)
	}
	return m.Bucket.Get(ctx, key, opts)
}

// One stray key under nodes/ (a folder marker, a deeper key, a key that
// is no node id, a body in another format, a read refused) is listed as
// not a node lease, with its reason, and the rest of the listing works; a
// read that fails transiently (the bucket not answering) fails it.
func TestListSkipsWhatIsNotALease(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(time.UnixMilli(1_000_000))
	mem := buckettest.NewMemory(buckettest.Flaws{})
	o := nodelease.Object{State: nodelease.Live, Instance: "i", Seq: 1, WrittenAt: clk.Now()}
	put(t, mem, "a", o)
	put(t, mem, "locked", o)
	for key, body := range map[string]string{"nodes/b/extra": "x", "nodes/Not_An_Id": "x", "nodes/junk": "x"} {
		if _, err := mem.Put(ctx, key, strings.NewReader(body), int64(len(body)), bucket.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	peers, err := List(ctx, marked{Bucket: mem, refused: "locked"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range peers {
		s := p.ID + "="
		if p.Err != nil {
			s += p.Err.Error()
		} else {
			s += string(p.Object.State)
		}
		got = append(got, s)
	}
	want := []string{`=its key names no node`, `Not_An_Id=its key names no node`, `a=live`, `b/extra=its key names no node`, `junk=not a "wasmkeep-node 3" object`, `locked=unreadable: 403 AccessDenied`}
	if len(got) != len(want) {
		t.Fatalf("listing %q, want %q", got, want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("listing[%d] = %q, want %q...", i, got[i], want[i])
		}
	}
	v := NewView("self", nodelease.DefaultSettings(), clk)
	v.Update(peers)
	if tr := v.Trusted(); len(tr) != 1 || tr["a"] != "" {
		t.Errorf("trusted %v, want a alone", tr)
	}
	if _, err := List(ctx, marked{Bucket: mem, failing: "a"}, nil); !errors.Is(err, bucket.ErrTransient) {
		t.Errorf("a transient read failure: %v, want the listing to fail with it", err)
	}
}
