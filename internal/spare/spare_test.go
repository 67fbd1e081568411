package spare

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// counter makes numbered things and records those freed.
type counter struct {
	mu    sync.Mutex
	made  int
	freed []int
	fail  bool
}

func (c *counter) spare(keep time.Duration) *Spare[int] {
	return &Spare[int]{
		Make: func() (int, bool) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.fail {
				return 0, false
			}
			c.made++
			return c.made, true
		},
		Free: func(v int) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.freed = append(c.freed, v)
		},
		Keep: keep,
	}
}

// eventually fails t unless cond holds within 10 s, saying what cond said
// of its last try.
func eventually(t *testing.T, cond func() (ok bool, last string)) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %s", last)
		}
	}
}

// waitReady waits until s holds one.
func waitReady(t *testing.T, s *Spare[int]) {
	t.Helper()
	eventually(t, func() (bool, string) { return s.Ready(), "nothing was made" })
}

// waitFreed waits until c freed want.
func waitFreed(t *testing.T, c *counter, want []int) {
	t.Helper()
	eventually(t, func() (bool, string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return slices.Equal(c.freed, want), fmt.Sprintf("freed %v, want %v", c.freed, want)
	})
}

func TestTakeGivesWhatWasMadeAheadAndMakesTheNext(t *testing.T) {
	c := &counter{}
	s := c.spare(time.Hour)
	defer s.Close()
	if v, ok := s.take(true); ok {
		t.Fatalf("took %d before anything was made", v)
	}
	waitReady(t, s)
	if v, ok := s.take(true); !ok || v != 1 {
		t.Fatalf("took %d, %v; want 1, true", v, ok)
	}
	waitReady(t, s)
	if v, ok := s.take(true); !ok || v != 2 {
		t.Fatalf("took %d, %v; want 2, true", v, ok)
	}
	waitReady(t, s)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.made != 3 || len(c.freed) != 0 {
		t.Errorf("made %d, freed %v; want 3 made (one ready), none freed", c.made, c.freed)
	}
}

func TestCloseFreesTheOneReadyAndMakesNoMore(t *testing.T) {
	c := &counter{}
	s := c.spare(time.Hour)
	s.take(true)
	waitReady(t, s)
	s.Close()
	if v, ok := s.take(true); ok {
		t.Fatalf("took %d after Close", v)
	}
	time.Sleep(20 * time.Millisecond) // a make started now would be done
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.made != 1 || len(c.freed) != 1 || c.freed[0] != 1 {
		t.Errorf("made %d, freed %v; want 1 made and freed", c.made, c.freed)
	}
}

func TestOneUnusedForKeepIsFreed(t *testing.T) {
	c := &counter{}
	s := c.spare(20 * time.Millisecond)
	defer s.Close()
	s.take(true)
	waitFreed(t, c, []int{1}) // Keep after it was made
	if v, ok := s.take(true); ok {
		t.Fatalf("took %d, freed as unused", v)
	}
}

func TestAFailedMakeLeavesNone(t *testing.T) {
	c := &counter{fail: true}
	s := c.spare(time.Hour)
	defer s.Close()
	s.take(true)
	eventually(t, func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return !s.making, "still making"
	})
	if v, ok := s.take(true); ok {
		t.Fatalf("took %d from a failed make", v)
	}
}

func TestGetFreesOneNotUsableAndMakesOneNow(t *testing.T) {
	c := &counter{}
	s := c.spare(time.Hour)
	defer s.Close()
	s.Usable = func(v int) bool { return v != 1 }
	now := func() (int, error) { return -1, nil }
	if v, _ := s.Get(now); v != -1 {
		t.Fatalf("got %d with nothing made ahead, want the one made now", v)
	}
	waitReady(t, s)
	if v, _ := s.Get(now); v != -1 {
		t.Fatalf("got %d, which is not usable", v)
	}
	waitReady(t, s)
	if v, _ := s.Get(now); v != 2 {
		t.Fatalf("got %d, want 2, made ahead", v)
	}
	waitFreed(t, c, []int{1})
}

func TestGroupCloseWaitsForAMakeAndStartsNoMore(t *testing.T) {
	var g Group
	started, release := make(chan struct{}), make(chan struct{})
	var freed []int
	s := &Spare[int]{
		Make:  func() (int, bool) { close(started); <-release; return 1, true },
		Free:  func(v int) { freed = append(freed, v) },
		Group: &g,
	}
	s.take(true)
	<-started
	closed := make(chan struct{})
	go func() { g.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("the group closed while one was being made")
	case <-time.After(20 * time.Millisecond):
	}
	s.Close() // the module closes: the one being made is freed as it is done
	close(release)
	<-closed
	if !slices.Equal(freed, []int{1}) {
		t.Errorf("freed %v, want [1]", freed)
	}
	other := &Spare[int]{Make: func() (int, bool) { t.Error("made after the group closed"); return 0, false }, Group: &g}
	other.take(true)
	if other.making {
		t.Error("a make started after the group closed")
	}
}

func TestGetBesideAnotherMakesNoneAhead(t *testing.T) {
	c := &counter{}
	s := c.spare(time.Hour)
	defer s.Close()
	inside, release := make(chan struct{}), make(chan struct{})
	go s.Get(func() (int, error) { close(inside); <-release; return -1, nil })
	<-inside // the first Get is alone: it has one made
	waitReady(t, s)
	if v, _ := s.Get(func() (int, error) { return -1, nil }); v != 1 {
		t.Fatalf("got %d, want 1, made ahead", v)
	}
	close(release)
	time.Sleep(20 * time.Millisecond) // a make started now would be done
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.made != 1 {
		t.Errorf("made %d; want 1: a Get beside another makes none ahead", c.made)
	}
}
