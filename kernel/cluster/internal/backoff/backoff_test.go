package backoff

import (
	"errors"
	"testing"
	"time"
)

func TestFailed(t *testing.T) {
	var f Failed[int]
	t0 := time.Unix(1000, 0)
	if _, ok := f.Waiting(0, t0); ok {
		t.Fatal("the zero Failed holds a failure")
	}
	boom := errors.New("boom")
	f.Record(7, boom, t0, time.Second, 5*time.Second)
	if err, ok := f.Waiting(7, t0.Add(1999*time.Millisecond)); !ok || err != boom {
		t.Fatalf("within the first wait (2 s): %v %v", err, ok)
	}
	if _, ok := f.Waiting(7, t0.Add(2*time.Second)); ok {
		t.Fatal("still waiting once the first wait ended")
	}
	if _, ok := f.Waiting(8, t0); ok {
		t.Fatal("another key waits")
	}
	f.Record(7, boom, t0, time.Second, 5*time.Second) // 4 s
	f.Record(7, boom, t0, time.Second, 5*time.Second) // 8 s, capped at 5
	if _, ok := f.Waiting(7, t0.Add(4999*time.Millisecond)); !ok {
		t.Fatal("the third failure's wait is not the ceiling")
	}
	if _, ok := f.Waiting(7, t0.Add(5*time.Second)); ok {
		t.Fatal("the wait passed the ceiling")
	}
	f.Record(8, boom, t0, time.Second, 5*time.Second) // another key starts again at 2 s
	if _, ok := f.Waiting(8, t0.Add(2*time.Second)); ok {
		t.Fatal("another key's failures did not start again")
	}
	f.Clear()
	if _, ok := f.Waiting(8, t0); ok {
		t.Fatal("cleared, still waiting")
	}
}
