package clock

import (
	"context"
	"slices"
	"testing"
	"time"
)

var epoch = time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)

// Timers fire in deadline order, ties in arming order, each seeing the
// clock at its deadline; a stopped timer never fires; a reset one moves.
func TestManualOrder(t *testing.T) {
	m := NewManual(epoch)
	var got []string
	at := func(name string, d time.Duration) Timer {
		return m.AfterFunc(d, func() { got = append(got, name+"@"+m.Now().Sub(epoch).String()) })
	}
	at("c", 3*time.Second)
	at("a", time.Second)
	at("b", time.Second)
	stopped := at("stopped", 2*time.Second)
	moved := at("moved", 500*time.Millisecond)
	if !stopped.Stop() || stopped.Stop() {
		t.Error("Stop: want true once, then false")
	}
	if !moved.Reset(4 * time.Second) {
		t.Error("Reset of an armed timer reported it unarmed")
	}
	for m.AdvanceToNext() {
	}
	if want := []string{"a@1s", "b@1s", "c@3s", "moved@4s"}; !slices.Equal(got, want) {
		t.Errorf("fired %v, want %v", got, want)
	}
	if now := m.Now().Sub(epoch); now != 4*time.Second {
		t.Errorf("the clock reads %v, want 4s", now)
	}
}

// Advance fires what is due within it and leaves the clock at its end;
// Sleep returns when the clock passes its deadline, or with ctx's error.
func TestManualAdvanceAndSleep(t *testing.T) {
	m := NewManual(epoch)
	tm := m.NewTimer(2 * time.Second)
	m.Advance(time.Second)
	select {
	case <-tm.C():
		t.Fatal("fired a second early")
	default:
	}
	m.Advance(5 * time.Second)
	if v := <-tm.C(); !v.Equal(epoch.Add(2 * time.Second)) {
		t.Errorf("fired with %v, want its deadline", v)
	}
	if got := m.Now(); !got.Equal(epoch.Add(6 * time.Second)) {
		t.Errorf("the clock reads %v after Advance", got)
	}

	done := make(chan error, 1)
	go func() { done <- Sleep(context.Background(), m, time.Minute) }()
	for m.Armed() == 0 {
		time.Sleep(time.Millisecond)
	}
	m.Advance(time.Minute)
	if err := <-done; err != nil {
		t.Errorf("Sleep: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, m, time.Hour); err != context.Canceled {
		t.Errorf("Sleep with a cancelled context: %v", err)
	}
	if m.Armed() != 0 {
		t.Errorf("%d timers left armed", m.Armed())
	}
}
