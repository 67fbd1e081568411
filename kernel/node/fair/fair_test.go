package fair

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// clocks are a test's CPU and node clocks: the CPU clock is shared by all
// goroutines; the tests spend it only while one event runs.
type clocks struct {
	mu  sync.Mutex
	cpu time.Duration
	now int64
}

func (c *clocks) spend(d time.Duration) { c.mu.Lock(); c.cpu += d; c.mu.Unlock() }
func (c *clocks) readCPU() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cpu
}

func newSched(turns int) (*Sched, *clocks) {
	c := &clocks{now: 1}
	s := New(turns, time.Now)
	s.cpu = c.readCPU
	s.now = func() int64 { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
	return s, c
}

// used returns a share that has just used d of CPU in one run.
func used(s *Sched, c *clocks, d time.Duration) *Share {
	sh := &Share{}
	s.Begin(sh)
	c.spend(d)
	s.End(sh)
	return sh
}

// waitFor blocks until n events wait for a turn; if none comes, it fails
// the test (a hang detector, not a duration measured).
func waitFor(t *testing.T, s *Sched, n int32) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); s.waiters.Load() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d events wait for a turn, want %d", s.waiters.Load(), n)
		}
	}
}

// The rule of ADR 1057 on one turn: an actor light on CPU runs at once,
// though the turn is held and heavy actors wait for it; a turn that falls
// free goes to the heavy actor that used the least CPU recently, not to the
// one that waited longest; a turn is given up at a host call once held for
// a quantum, not before.
func TestTurns(t *testing.T) {
	s, c := newSched(1)
	holder := used(s, c, 200*time.Millisecond)
	hostiles := []*Share{used(s, c, 100*time.Millisecond), used(s, c, 120*time.Millisecond), used(s, c, 140*time.Millisecond)}
	warm := used(s, c, 3*Heavy/2) // heavy, but less than the others

	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	start := func(name string, sh *Share) {
		wg.Go(func() {
			s.Begin(sh)
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			s.End(sh)
		})
	}
	s.Begin(holder)
	for i, name := range []string{"h1", "h2", "h3"} {
		start(name, hostiles[i])
		waitFor(t, s, int32(i+1))
	}
	start("warm", warm)
	waitFor(t, s, 4)

	counter := &Share{}
	notStuck(t, "an actor light on CPU waited for a turn", func() { // the turn is held, four wait
		s.Begin(counter)
		s.Check(counter, c.readCPU())
		s.End(counter)
	})

	s.Check(holder, c.readCPU()) // under its quantum: keeps its turn
	if s.waiters.Load() != 4 {
		t.Fatal("a turn held for less than a quantum was given up")
	}
	c.spend(Quantum)
	wg.Go(func() { // the host call past the quantum, then the event's end
		s.Check(holder, c.readCPU())
		s.End(holder)
	})
	wg.Wait()
	if want := []string{"warm", "h1", "h2", "h3"}; !slices.Equal(order, want) {
		t.Fatalf("turns went to %v, want %v", order, want)
	}
}

// An event that starts light waits for a turn at the host call where its
// CPU makes its actor heavy.
func TestBecomingHeavy(t *testing.T) {
	s, c := newSched(1)
	holder := used(s, c, 2*Heavy)
	s.Begin(holder)
	sh := &Share{}
	s.Begin(sh)
	c.spend(Heavy - time.Millisecond)
	s.Check(sh, c.readCPU())
	if sh.holding {
		t.Fatal("an event under Heavy took a turn")
	}
	c.spend(time.Millisecond)
	checked := make(chan struct{})
	go func() { s.Check(sh, c.readCPU()); close(checked) }()
	waitFor(t, s, 1) // it waits for the holder's turn
	s.End(holder)
	<-checked
	if !sh.holding {
		t.Fatal("the event went on without the turn")
	}
}

// notStuck fails the test if f does not return: a wait that never ends,
// not a duration measured.
func notStuck(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal(what)
	}
}

// Recent CPU is forgotten with time: an actor that used a second of CPU and
// then stayed idle for six half-lives (16 ms left) is light again.
func TestRecentCPUDecays(t *testing.T) {
	s, c := newSched(1)
	sh := used(s, c, time.Second)
	holder := used(s, c, time.Second)
	s.Begin(holder)
	c.now += int64(6 * HalfLife)
	notStuck(t, "idle for six half-lives, it still waited for a turn", func() { s.Begin(sh) })
	s.End(sh)
	s.End(holder)
}

// A wait inside an event (a call to another actor) is run without the
// turn: with one turn, a heavy callee gets it while its heavy caller waits
// for it.
func TestOffloadGivesTheTurn(t *testing.T) {
	s, c := newSched(1)
	caller, callee := used(s, c, 2*Heavy), used(s, c, 2*Heavy)
	s.Begin(caller)
	notStuck(t, "the callee never got the turn its caller held while waiting for it", func() {
		s.Offload(caller, func() {
			s.Begin(callee) // the callee's event
			s.End(callee)
		})
	})
	s.End(caller)
}
