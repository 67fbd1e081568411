package cputime

import (
	"runtime"
	"testing"
	"time"
)

// spin burns the calling thread's CPU until done is closed or d of CPU has
// passed.
func spin(d time.Duration, done <-chan struct{}) {
	for start := Thread(); Thread()-start < d; {
		select {
		case <-done:
			return
		default:
		}
	}
}

// A spinning thread is told when it passes its budget; a sleeping one is not,
// since sleeping costs no CPU.
func TestWatch(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	exceeded := make(chan struct{})
	w := Start(30*time.Millisecond, func() { close(exceeded) })
	spin(10*time.Second, exceeded)
	used := w.Stop()
	select {
	case <-exceeded:
	default:
		t.Fatal("the budget was never reported exceeded")
	}
	if used < 30*time.Millisecond {
		t.Errorf("exceeded after %v of CPU, below the budget", used)
	}

	w = Start(20*time.Millisecond, func() { t.Error("sleeping must not use the budget") })
	time.Sleep(100 * time.Millisecond)
	if used := w.Stop(); used > 20*time.Millisecond {
		t.Errorf("sleeping used %v of CPU", used)
	}
}

// A host call's time is not counted, even while the call runs: the budget
// does not run out inside it, however long it takes.
func TestHostCallIsNotCounted(t *testing.T) {
	inBothPhases(t, func(t *testing.T) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		w := Start(20*time.Millisecond, func() { t.Error("the budget ran out inside a host call") })
		since := w.EnterHost()
		spin(200*time.Millisecond, nil)
		w.LeaveHost(since)
		if used := w.Stop(); used > 20*time.Millisecond {
			t.Errorf("the host call was counted: %v", used)
		}
	})
}

// A host call that waits (a fetch, an fsync, another actor's event) gives
// the guest no CPU to spend on its own code: the call is left out by the CPU
// it took, not by how long it lasted.
func TestWaitingHostCallIsNoCredit(t *testing.T) {
	inBothPhases(t, func(t *testing.T) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		exceeded := make(chan struct{})
		start := Thread()
		w := Start(30*time.Millisecond, func() { close(exceeded) })
		since := w.EnterHost()
		time.Sleep(300 * time.Millisecond)
		w.LeaveHost(since)
		spin(10*time.Second, exceeded)
		w.Stop()
		select {
		case <-exceeded:
		default:
			t.Fatal("the budget was never reported exceeded")
		}
		if all := Thread() - start; all > 200*time.Millisecond {
			t.Errorf("stopped after %v of CPU, want about 30ms: the host call's wait was credited", all)
		}
	})
}

// A guest that spends its budget while the timer waits out a host call is
// stopped once it runs again, not at the next host call or never.
func TestBudgetCheckedAfterHostCall(t *testing.T) {
	inBothPhases(t, func(t *testing.T) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		exceeded := make(chan struct{})
		w := Start(30*time.Millisecond, func() { close(exceeded) })
		spin(25*time.Millisecond, nil) // most of the budget, as guest code
		since := w.EnterHost()
		spin(100*time.Millisecond, nil) // the timer fires in here
		w.LeaveHost(since)
		spin(10*time.Second, exceeded) // guest code again
		used := w.Stop()
		select {
		case <-exceeded:
		default:
			t.Fatal("the budget was never reported exceeded")
		}
		if used < 30*time.Millisecond || used > 500*time.Millisecond {
			t.Errorf("stopped after %v of guest CPU, want about 30ms", used)
		}
	})
}

// The cap counts everything, host calls included, and runs out inside one.
func TestCapRunsOutInsideHostCall(t *testing.T) {
	inBothPhases(t, func(t *testing.T) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		capped := make(chan struct{})
		w := StartCapped(20*time.Millisecond, func() { t.Error("the guest budget ran out inside a host call") },
			120*time.Millisecond, func() { close(capped) })
		start := w.StartClock() // the cap's own start: a later Thread() would measure short of it
		since := w.EnterHost()
		spin(10*time.Second, capped)
		w.LeaveHost(since)
		w.Stop()
		select {
		case <-capped:
		default:
			t.Fatal("the cap was never reported reached")
		}
		if all := Thread() - start; all < 120*time.Millisecond || all > time.Second {
			t.Errorf("capped after %v of CPU, want about 120ms", all)
		}
	})
}

// With both limits, the guest budget still stops guest code first.
func TestBudgetBeforeCap(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	exceeded := make(chan struct{})
	w := StartCapped(30*time.Millisecond, func() { close(exceeded) }, time.Second, func() { t.Error("the cap ran out first") })
	spin(10*time.Second, exceeded)
	if used := w.Stop(); used < 30*time.Millisecond || used > 500*time.Millisecond {
		t.Errorf("stopped after %v of guest CPU, want about 30ms", used)
	}
}

// inBothPhases runs a test of host calls with the watch's host calls timed
// on the wall clock throughout (young: the event's first millisecond) and
// read on the thread's clock throughout.
func inBothPhases(t *testing.T, test func(t *testing.T)) {
	for _, phase := range []struct {
		name  string
		after time.Duration
	}{{"young", time.Hour}, {"exact", 0}} {
		t.Run(phase.name, func(t *testing.T) {
			defer func(was time.Duration) { exactAfter = was }(exactAfter)
			exactAfter = phase.after
			test(t)
		})
	}
}

// A virtual machine that reports no steal time charges a stalled virtual
// CPU's time to the thread it ran: one reading of the thread's clock jumps
// by about 100 ms (w.start moved back here), though the guest ran for
// microseconds. The reading that finds the budget spent does not stop the
// guest; it is stopped once it has spent confirmAfter more.
func TestStallIsConfirmedBeforeStop(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	stopped := make(chan struct{})
	w := Start(time.Hour, func() { close(stopped) }) // no timer fires before the stall
	w.limit = 50 * time.Millisecond
	w.start -= 100 * time.Millisecond // the stall
	w.recheckNow()
	w.mu.Lock()
	first := w.stopped
	w.mu.Unlock()
	if first {
		t.Fatal("the first reading over the budget stopped the guest")
	}
	spin(10*time.Second, stopped) // the guest keeps running
	w.Stop()
	select {
	case <-stopped:
	default:
		t.Fatal("a guest that kept running past its budget was not stopped")
	}
}
