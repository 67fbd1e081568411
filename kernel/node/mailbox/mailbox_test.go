package mailbox

import (
	"sync"
	"testing"
)

type event struct{ _ byte } // not zero-sized: each event has an address of its own

// Events come out in the order they went in, at most limit wait, and a
// reader that waits on Ready after popping everything never misses one.
func TestMailbox(t *testing.T) {
	m := New[*event](3)
	evs := []*event{{}, {}, {}, {}}
	for i, ev := range evs {
		if got, want := m.Push(ev), i < 3; got != want {
			t.Fatalf("push %d: %v, want %v", i, got, want)
		}
	}
	if m.Len() != 3 {
		t.Fatalf("len %d, want 3", m.Len())
	}
	for i := range 3 {
		if ev, ok := m.Pop(); !ok || ev != evs[i] {
			t.Fatalf("pop %d: another event", i)
		}
	}
	if ev, ok := m.Pop(); ok || ev != nil || m.Len() != 0 {
		t.Fatal("an empty mailbox popped an event")
	}
	if !m.Push(evs[3]) {
		t.Fatal("a mailbox emptied refuses events")
	}
	if ev, _ := m.Pop(); ev != evs[3] {
		t.Fatal("a mailbox emptied takes events again")
	}

	// One writer, one reader that blocks on Ready whenever it finds none.
	const n = 10000
	m = New[*event](n)
	var wg sync.WaitGroup
	wg.Go(func() {
		for range n {
			for !m.Push(&event{}) {
			}
		}
	})
	for got := 0; got < n; {
		if _, ok := m.Pop(); ok {
			got++
			continue
		}
		<-m.Ready()
	}
	wg.Wait()
	if _, ok := m.Pop(); ok {
		t.Fatal("more events than were pushed")
	}
}
