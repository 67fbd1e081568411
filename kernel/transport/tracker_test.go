package transport

import (
	"errors"
	"net"
	"testing"
)

func pipe(t *testing.T, tr *Tracker) *Conn {
	t.Helper()
	x, y := net.Pipe()
	t.Cleanup(func() { x.Close(); y.Close() })
	c, err := tr.Add(x)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A pin is an identity only if one trusted node publishes it: a pin two
// heartbeats name is refused, as is "" and a pin nobody publishes.
func TestBindPin(t *testing.T) {
	tr := NewTracker()
	tr.Trust(map[NodeID]string{"a": "p1", "b": "p2", "c": "p2", "d": ""})
	for pin, ok := range map[string]bool{"p1": true, "p2": false, "": false, "p3": false} {
		p, err := pipe(t, tr).BindPin(pin)
		switch {
		case ok && (err != nil || p != Peer{Node: "a", Pin: "p1"}):
			t.Errorf("BindPin(%q): %+v, %v; want a", pin, p, err)
		case !ok && !errors.Is(err, ErrUntrusted):
			t.Errorf("BindPin(%q): %+v, %v; want ErrUntrusted", pin, p, err)
		}
	}
}

// Trust keeps its own copy of the set: changing the caller's map after
// changes nothing.
func TestTrustCopies(t *testing.T) {
	tr := NewTracker()
	set := map[NodeID]string{"a": "p1"}
	tr.Trust(set)
	c := pipe(t, tr)
	if err := c.Bind("a", "p1"); err != nil {
		t.Fatal(err)
	}
	set["a"] = "p2"
	delete(set, "a")
	if pin, ok := tr.Trusted("a"); !ok || pin != "p1" {
		t.Errorf("Trusted(a) = %q, %v after the caller changed its map", pin, ok)
	}
	if _, _, err := c.Peer(); err != nil {
		t.Errorf("the connection was cut: %v", err)
	}
}

// A connection cut by Trust cannot be bound again, and its errors say why.
func TestCutIsFinal(t *testing.T) {
	tr := NewTracker()
	tr.Trust(map[NodeID]string{"a": "p1"})
	c := pipe(t, tr)
	if err := c.Bind("a", "p1"); err != nil {
		t.Fatal(err)
	}
	tr.Trust(nil)
	tr.Trust(map[NodeID]string{"a": "p1"})
	if err := c.Bind("a", "p1"); !errors.Is(err, ErrUntrusted) {
		t.Errorf("Bind after a cut: %v, want ErrUntrusted", err)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, ErrUntrusted) {
		t.Errorf("Read after a cut: %v, want ErrUntrusted", err)
	}
}
