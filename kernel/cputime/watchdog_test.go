package cputime

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// dogState is how many watches the watchdog has a check due for and when
// its timer fires.
func dogState() (watches int, at time.Time) {
	dog.mu.Lock()
	defer dog.mu.Unlock()
	return len(dog.due), dog.at
}

// Watches that start and stop within the watchdog's period leave its timer
// where it is (no runtime timer per watch), keep no entry once stopped, and
// an idle watchdog disarms its timer.
func TestWatchdogTimerStaysPut(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const budget = 200 * time.Millisecond
	quietDog(t)
	Start(budget, func() {}).Stop()
	_, at := dogState()
	if at.IsZero() {
		t.Fatal("the watchdog's timer is not armed after a watch started")
	}
	for range 100 {
		w := StartCapped(budget, func() { t.Error("a short watch ran out") }, 2*budget, func() { t.Error("a short watch was capped") })
		w.LeaveHost(w.EnterHost())
		w.Stop()
	}
	watches, again := dogState()
	if watches != 0 {
		t.Errorf("%d stopped watches are still watched", watches)
	}
	if !again.Equal(at) {
		t.Errorf("the watchdog's timer moved from %v to %v as watches within its period started", at, again)
	}
	waitIdle(t, 10*budget)
}

// quietDog disarms the watchdog's timer, which the watches of tests before
// may have left armed for as long as an hour. No watch may be running.
func quietDog(t *testing.T) {
	t.Helper()
	dog.mu.Lock()
	defer dog.mu.Unlock()
	if len(dog.due) != 0 {
		t.Fatalf("%d watches are running", len(dog.due))
	}
	if dog.timer != nil {
		dog.timer.Stop()
	}
	dog.at, dog.started = time.Time{}, false
}

// waitIdle waits until the watchdog's timer is not armed, failing the test
// if it still is after limit.
func waitIdle(t *testing.T, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for _, at := dogState(); !at.IsZero(); _, at = dogState() {
		if time.Now().After(deadline) {
			t.Fatalf("the watchdog's timer is still armed (for %v) %v after the last watch", at, limit)
		}
		time.Sleep(limit / 100)
	}
}

// Watches with different budgets on threads of their own are each stopped
// at their own budget by the one watchdog.
func TestWatchdogStopsEachWatch(t *testing.T) {
	budgets := []time.Duration{20 * time.Millisecond, 60 * time.Millisecond}
	used := make([]time.Duration, len(budgets))
	var wg sync.WaitGroup
	for i, budget := range budgets {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			exceeded := make(chan struct{})
			w := Start(budget, func() { close(exceeded) })
			spin(10*time.Second, exceeded)
			used[i] = w.Stop()
			select {
			case <-exceeded:
			default:
				t.Errorf("the %v budget was never reported exceeded", budget)
			}
		})
	}
	wg.Wait()
	for i, budget := range budgets {
		if used[i] < budget || used[i] > budget+500*time.Millisecond {
			t.Errorf("the %v watch stopped after %v of CPU", budget, used[i])
		}
	}
	if watches, _ := dogState(); watches != 0 {
		t.Errorf("%d stopped watches are still watched", watches)
	}
}
