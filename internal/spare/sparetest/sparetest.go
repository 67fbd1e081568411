// Package sparetest helps the engines' tests watch what their modules make
// ahead (internal/spare).
package sparetest

import (
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/spare"
)

// Record has s report each one it makes; call it before s's first Take.
func Record[T any](s *spare.Spare[T]) <-chan T {
	made := make(chan T, 16)
	mk := s.Make
	s.Make = func() (T, bool) {
		v, ok := mk()
		if ok {
			made <- v
		}
		return v, ok
	}
	return made
}

// Freed has s report each one it frees; call it before s's first Take.
// What a receiver reads of one after receiving it is race-free.
func Freed[T any](s *spare.Spare[T]) <-chan T {
	freed := make(chan T, 16)
	free := s.Free
	s.Free = func(v T) {
		free(v)
		freed <- v
	}
	return freed
}

// WaitFreed waits for v to be freed (freed, from Freed).
func WaitFreed[T comparable](t *testing.T, freed <-chan T, v T, what string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case f := <-freed:
			if f == v {
				return
			}
		case <-deadline:
			t.Fatalf("%s: not freed after 10 s", what)
		}
	}
}

// Next waits for the next one s makes (made, from Record) to be ready to
// take and returns it.
func Next[T any](t *testing.T, s *spare.Spare[T], made <-chan T) T {
	t.Helper()
	select {
	case v := <-made:
		eventually(t, s.Ready, "the one made ahead is ready")
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing was made ahead in 10 s")
		var zero T
		return zero
	}
}

// eventually fails t unless cond holds within 10 s.
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 10 s", what)
		}
	}
}
