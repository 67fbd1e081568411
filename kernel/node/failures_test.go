package node

import (
	"testing"
	"time"
)

// The failed events' log takes a burst of twice its rate, then its rate,
// and the first line after some were left out counts them.
func TestFailureLogRate(t *testing.T) {
	var f failureLog
	now := time.Unix(1000, 0)
	logged := 0
	for range 100 { // at one instant: the burst alone
		if ok, _ := f.take(now); ok {
			logged++
		}
	}
	if logged != 2*failureLogRate {
		t.Errorf("a burst logged %d lines, want %d", logged, 2*failureLogRate)
	}
	ok, skipped := f.take(now.Add(time.Second / failureLogRate))
	if !ok || skipped != 100-2*failureLogRate {
		t.Errorf("the next line after a tenth of a second: %v, %d left out; want true, %d", ok, skipped, 100-2*failureLogRate)
	}
	logged = 0
	for i := range 100 { // 10 s at 10 attempts a second: about the rate
		if ok, _ := f.take(now.Add(time.Second/failureLogRate + time.Duration(i)*100*time.Millisecond)); ok {
			logged++
		}
	}
	if logged < 95 || logged > 100 {
		t.Errorf("10 s at the rate logged %d of 100", logged)
	}
}
