package delay

import (
	"math"
	"slices"
	"testing"
)

func TestBackoff(t *testing.T) {
	var got []int64
	for n := 1; n <= 6; n++ {
		got = append(got, Backoff(1000, 10_000, n))
	}
	if want := []int64{1000, 2000, 4000, 8000, 10_000, 10_000}; !slices.Equal(got, want) {
		t.Errorf("Backoff: %v, want %v", got, want)
	}
	// No doubling wraps: a huge cap or attempt never gives a wait of 0.
	for n := 1; n < 100; n++ {
		if d := Backoff(1000, math.MaxInt64, n); d <= 0 || d > Max {
			t.Fatalf("Backoff(1000, MaxInt64, %d) = %d", n, d)
		}
	}
	for n, want := range map[int]int64{1: 1000, 2: 2000, 3: 4000, 9: 256_000, 10: 300_000, 50: 300_000, 1 << 31: 300_000} {
		if got := Backoff(1000, 300_000, n); got != want {
			t.Errorf("Backoff(1000, 300000, %d) = %d, want %d", n, got, want)
		}
	}
}

func TestAfter(t *testing.T) {
	if got := After(1000, math.MaxInt64); got != 1000+Max {
		t.Errorf("After(1000, MaxInt64) = %d", got)
	}
	if got := After(1000, -5); got != 1000 {
		t.Errorf("After(1000, -5) = %d", got)
	}
}
