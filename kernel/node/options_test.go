package node

import (
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/node/guestlog"
)

func TestGuestLogRateDefault(t *testing.T) {
	if got := (Options{}).withDefaults().GuestLogRate; got != guestlog.DefaultRate {
		t.Errorf("zero GuestLogRate becomes %d; want %d", got, guestlog.DefaultRate)
	}
	if got := (Options{GuestLogRate: guestlog.Discard}).withDefaults().GuestLogRate; got != guestlog.Discard {
		t.Errorf("guestlog.Discard becomes %d", got)
	}
}
