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

// A value a timer sent that nobody read is dropped by Stop and Reset, as
// time.Timer does (Go 1.23): a reset timer's channel holds only its own.
func TestManualResetDropsUnread(t *testing.T) {
	m := NewManual(epoch)
	tm := m.NewTimer(time.Second)
	m.Advance(time.Second) // fires; nobody reads
	tm.Reset(time.Minute)
	select {
	case v := <-tm.C():
		t.Fatalf("the reset timer's channel still held %v", v)
	default:
	}
	m.Advance(time.Minute)
	if v := <-tm.C(); !v.Equal(epoch.Add(time.Second + time.Minute)) {
		t.Errorf("fired with %v, want its new deadline", v)
	}
}

// WithTimeout's context ends once d has passed on the clock, with
// DeadlineExceeded as its cause; cancelled first, its cause is Canceled.
func TestWithTimeout(t *testing.T) {
	m := NewManual(epoch)
	ctx, cancel := WithTimeout(context.Background(), m, time.Second)
	defer cancel()
	m.Advance(999 * time.Millisecond)
	if ctx.Err() != nil {
		t.Fatal("ended before its time")
	}
	m.Advance(time.Millisecond)
	if ctx.Err() == nil || context.Cause(ctx) != context.DeadlineExceeded {
		t.Errorf("after its time: %v, cause %v", ctx.Err(), context.Cause(ctx))
	}
	ctx, cancel = WithTimeout(context.Background(), m, time.Second)
	cancel()
	if context.Cause(ctx) != context.Canceled || m.Armed() != 0 {
		t.Errorf("cancelled: cause %v, %d timers armed", context.Cause(ctx), m.Armed())
	}
}

// Next tells the earliest armed deadline, and nothing once none is armed.
func TestManualNext(t *testing.T) {
	m := NewManual(epoch)
	if _, ok := m.Next(); ok {
		t.Fatal("Next with no timer armed")
	}
	late := m.NewTimer(time.Hour)
	early := m.AfterFunc(time.Minute, func() {})
	if at, ok := m.Next(); !ok || !at.Equal(epoch.Add(time.Minute)) {
		t.Errorf("Next = %v, %v; want the minute's deadline", at, ok)
	}
	early.Stop()
	if at, ok := m.Next(); !ok || !at.Equal(epoch.Add(time.Hour)) {
		t.Errorf("Next after Stop = %v, %v; want the hour's deadline", at, ok)
	}
	late.Stop()
	if _, ok := m.Next(); ok {
		t.Error("Next after every timer stopped")
	}
}

// FireNext fires the timers due at the earliest deadline, ties included,
// but not one armed meanwhile at that same instant; Next tells when.
func TestManualFireNext(t *testing.T) {
	m := NewManual(epoch)
	var got []string
	for _, name := range []string{"a", "b"} {
		m.AfterFunc(time.Second, func() {
			got = append(got, name)
			m.AfterFunc(0, func() { got = append(got, name+"'") })
		})
	}
	m.AfterFunc(2*time.Second, func() { got = append(got, "c") })
	if when, ok := m.Next(); !ok || when != epoch.Add(time.Second) {
		t.Fatalf("Next: %v %v", when, ok)
	}
	if !m.FireNext() || !slices.Equal(got, []string{"a", "b"}) || m.Now() != epoch.Add(time.Second) {
		t.Fatalf("after one: fired %v at %v", got, m.Now())
	}
	if !m.FireNext() || !slices.Equal(got, []string{"a", "b", "a'", "b'"}) || m.Now() != epoch.Add(time.Second) {
		t.Fatalf("after two: fired %v at %v", got, m.Now())
	}
	if !m.FireNext() || !slices.Equal(got, []string{"a", "b", "a'", "b'", "c"}) {
		t.Fatalf("after three: fired %v", got)
	}
	if _, ok := m.Next(); ok || m.FireNext() {
		t.Fatal("a timer left")
	}
}
