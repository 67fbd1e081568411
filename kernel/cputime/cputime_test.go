package cputime

import (
	"runtime"
	"testing"
	"time"
)

// A spinning thread is told when it passes its budget; a sleeping one is not,
// since sleeping costs no CPU.
func TestWatch(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	exceeded := make(chan struct{})
	w := Start(30*time.Millisecond, func() { close(exceeded) })
	deadline := time.Now().Add(10 * time.Second)
spin:
	for time.Now().Before(deadline) {
		select {
		case <-exceeded:
			break spin
		default:
		}
	}
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

func TestExclude(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	w := Start(0, nil)
	for start := Thread(); Thread()-start < 10*time.Millisecond; {
	}
	w.Exclude(time.Hour)
	if used := w.Stop(); used > 0 {
		t.Errorf("excluded time still counted: %v", used)
	}
}
