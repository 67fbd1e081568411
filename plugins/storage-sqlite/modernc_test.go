package sqlitestorage

import (
	"context"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// A modernc connection holds a libc TLS only between its first call and the
// end of the event: at rest it has given it back, and the next connection to
// need one reuses it rather than growing a new one. Statements still run
// afterwards, on whichever TLS the connection takes.
func TestModerncTLSAtRest(t *testing.T) {
	cfg := NewConfig()
	cfg.Driver = "modernc"
	drv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	open := func(name string) (storage.DB, *mconn) {
		d, err := drv.Open(ctx, t.TempDir(), testAddr(name), storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d, d.(*db).c.(*lockedConn).conn.(*mconn)
	}
	a, ca := open("a.db")
	b, cb := open("b.db")
	for _, d := range []storage.DB{a, b} {
		if _, err := d.Exec(ctx, "CREATE TABLE t(v)", nil, storage.ExecOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if ca.held == nil || cb.held == nil || ca.held == cb.held {
		t.Fatalf("two connections in use share or lack a TLS: %p %p", ca.held, cb.held)
	}
	held := cb.held
	for _, d := range []storage.DB{a, b} {
		if err := d.EndEvent(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if ca.held != nil || cb.held != nil {
		t.Fatal("a connection at rest still holds its TLS")
	}
	tlsPool.mu.Lock()
	resting := len(tlsPool.free)
	tlsPool.mu.Unlock()
	if resting < 2 {
		t.Fatalf("%d TLSs resting after two connections rested, want at least 2", resting)
	}
	// A new connection takes the TLS rested last (the free list is a
	// stack), and a rested one runs statements again.
	c, cc := open("c.db")
	if cc.held != held {
		t.Errorf("a new connection made a TLS rather than take a resting one")
	}
	var w abi.RowsWriter
	if err := a.Query(ctx, "SELECT count(*) FROM t", nil, &w); err != nil || ca.held == nil {
		t.Fatalf("a rested connection's query: %v (TLS %p)", err, ca.held)
	}
	if err := c.EndEvent(ctx); err != nil {
		t.Fatal(err)
	}
}
