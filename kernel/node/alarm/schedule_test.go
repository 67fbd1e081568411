package alarm

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
)

func TestRetryDelay(t *testing.T) {
	for failures, want := range map[int64]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 9: 256 * time.Second, 10: 5 * time.Minute, 1000: 5 * time.Minute} {
		if got := RetryDelay(failures); got != want {
			t.Errorf("RetryDelay(%d) = %v, want %v", failures, got, want)
		}
	}
}

// Run hands alarms over in due order as time reaches them, a moved alarm
// at its new time and a cleared one never (in a synctest bubble, whose
// clock moves only when every goroutine waits).
func TestScheduleRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		s := NewSchedule()
		s.Set("t/c/b", "c", "b", t0.Add(2*time.Second))
		s.Set("t/c/a", "c", "a", t0.Add(time.Second))
		s.Set("t/c/gone", "c", "gone", t0.Add(time.Second))
		s.Set("t/c/moved", "c", "moved", t0.Add(time.Second))
		s.Set("t/c/moved", "c", "moved", t0.Add(3*time.Second))
		s.Clear("t/c/gone")
		var got []string
		ctx, cancel := context.WithCancel(context.Background())
		go s.Run(ctx, clock.Real, func(it *Item) { got = append(got, it.Name+"@"+time.Since(t0).String()) })
		time.Sleep(time.Hour)
		cancel()
		synctest.Wait()
		if want := []string{"a@1s", "b@2s", "moved@3s"}; !slices.Equal(got, want) {
			t.Errorf("delivered %v, want %v", got, want)
		}
	})
}

// Defer puts a refused alarm back with a backoff growing with refusals in
// a row, but never over an alarm an event set meanwhile.
func TestScheduleDefer(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := NewSchedule()
	at := now.Add(-time.Minute)
	it := &Item{Key: "t/c/a", Class: "c", Name: "a", At: at}
	for tries, ceiling := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
		d := s.Defer(it, now)
		if d < ceiling/2 || d > ceiling {
			t.Fatalf("refusal %d: delay %v, want within [%v, %v]", tries+1, d, ceiling/2, ceiling)
		}
		next, _ := s.next(now.Add(d))
		if next == nil || next.tries != tries+1 || !next.At.Equal(at) {
			t.Fatalf("refusal %d: the alarm is not back with its count and its time: %+v", tries+1, next)
		}
		it = next
	}
	s.Set("t/c/a", "c", "a", now.Add(time.Hour)) // an event set another meanwhile
	s.Defer(it, now)
	if next, wait := s.next(now.Add(10 * time.Second)); next != nil || wait <= 0 {
		t.Errorf("Defer moved an alarm an event had set: %+v", next)
	}
}

// ClearClass forgets one class's alarms and keeps the heap whole.
func TestScheduleClearClass(t *testing.T) {
	s := NewSchedule()
	now := time.Unix(1000, 0)
	for i, key := range []string{"t/a/1", "t/b/1", "t/a/2", "t/b/2", "t/a/3"} {
		class, name, _ := strings.Cut(strings.TrimPrefix(key, "t/"), "/")
		s.Set(key, class, name, now.Add(time.Duration(5-i)*time.Second))
	}
	s.ClearClass("a")
	var got []string
	for it, _ := s.next(now.Add(time.Minute)); it != nil; it, _ = s.next(now.Add(time.Minute)) {
		got = append(got, it.Key)
	}
	if want := []string{"t/b/2", "t/b/1"}; !slices.Equal(got, want) {
		t.Errorf("due after ClearClass(a): %v, want %v", got, want)
	}
}

// ClearAt forgets an alarm only while it is still for the time given (a
// hand-off forgets only the registration it handed over); At reads it.
func TestScheduleClearAt(t *testing.T) {
	s := NewSchedule()
	now := time.Unix(1000, 0)
	s.Set("t/a/1", "a", "1", now)
	if at, ok := s.At("t/a/1"); !ok || !at.Equal(now) {
		t.Fatalf("At = %v %v, want %v", at, ok, now)
	}
	s.Set("t/a/1", "a", "1", now.Add(time.Second)) // set again since
	if items := s.Items(); len(items) != 1 || items[0].Key != "t/a/1" || items[0].Name != "1" || !items[0].At.Equal(now.Add(time.Second)) {
		t.Fatalf("Items = %+v, want t/a/1's alarm at %v", items, now.Add(time.Second))
	}
	s.ClearAt("t/a/1", now)
	if _, ok := s.At("t/a/1"); !ok {
		t.Fatal("ClearAt of an earlier time forgot the alarm set since")
	}
	s.ClearAt("t/a/1", now.Add(time.Second))
	if _, ok := s.At("t/a/1"); ok {
		t.Fatal("ClearAt of the time held kept the alarm")
	}
	if items := s.Items(); len(items) != 0 {
		t.Fatalf("Items after ClearAt = %+v, want none", items)
	}
	if it, _ := s.next(now.Add(time.Minute)); it != nil {
		t.Fatalf("due after ClearAt: %v", it.Key)
	}
}

// Offer (a sweep's overdue entry) takes an actor the schedule holds nothing
// for, and one it holds a later time for beyond the retry window; a held
// earlier time, or one within the window of now (a retry), wins and stays.
// Holds says the same without changing anything.
func TestScheduleOffer(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	const retry = 5 * time.Minute
	overdue := now.Add(-20 * time.Second)
	s := NewSchedule()
	s.Set("t/c/earlier", "c", "earlier", overdue.Add(-time.Second))
	s.Set("t/c/retrying", "c", "retrying", now.Add(retry))
	s.Set("t/c/later", "c", "later", now.Add(retry+time.Millisecond))
	for key, want := range map[string]bool{"t/c/none": true, "t/c/earlier": false, "t/c/retrying": false, "t/c/later": true} {
		if held := s.Holds(key, now, retry); held == want {
			t.Errorf("Holds(%s) = %v before the offer", key, held)
		}
		name := strings.TrimPrefix(key, "t/c/")
		if got := s.Offer(key, "c", name, overdue, now, retry); got != want {
			t.Errorf("Offer(%s) = %v, want %v", key, got, want)
		}
	}
	var got []string
	for it, _ := s.next(now); it != nil; it, _ = s.next(now) {
		got = append(got, it.Name+"@"+it.due.Sub(now).String())
	}
	slices.Sort(got) // equal times pop in any order
	if want := []string{"earlier@-21s", "later@-20s", "none@-20s"}; !slices.Equal(got, want) {
		t.Errorf("due now after the offers: %v, want %v (retrying stays at +5m)", got, want)
	}
}
