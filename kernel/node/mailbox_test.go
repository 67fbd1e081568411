package node

import (
	"sync"
	"testing"
)

// Events come out in the order they went in, at most limit wait, and a
// reader that waits on ready after popping everything never misses one.
func TestMailbox(t *testing.T) {
	m := newMailbox(3)
	evs := []*event{{}, {}, {}, {}}
	for i, ev := range evs {
		if got, want := m.push(ev), i < 3; got != want {
			t.Fatalf("push %d: %v, want %v", i, got, want)
		}
	}
	if m.len() != 3 {
		t.Fatalf("len %d, want 3", m.len())
	}
	for i := range 3 {
		if ev := m.pop(); ev != evs[i] {
			t.Fatalf("pop %d: another event", i)
		}
	}
	if m.pop() != nil || m.len() != 0 {
		t.Fatal("an empty mailbox popped an event")
	}
	if !m.push(evs[3]) || m.pop() != evs[3] {
		t.Fatal("a mailbox emptied takes events again")
	}

	// One writer, one reader that blocks on ready whenever it finds none.
	const n = 10000
	m = newMailbox(n)
	var wg sync.WaitGroup
	wg.Go(func() {
		for range n {
			for !m.push(&event{}) {
			}
		}
	})
	for got := 0; got < n; {
		if m.pop() != nil {
			got++
			continue
		}
		<-m.ready
	}
	wg.Wait()
	if m.pop() != nil {
		t.Fatal("more events than were pushed")
	}
}
