package guestlog

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
)

func TestBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newBucket(50)
	for i := range 100 {
		if !b.take(t0) {
			t.Fatalf("take %d of a full burst refused", i)
		}
	}
	if b.take(t0) {
		t.Fatal("take past the burst allowed")
	}
	// 100 ms refill 5 tokens.
	at := t0.Add(100 * time.Millisecond)
	for i := range 5 {
		if !b.take(at) {
			t.Fatalf("take %d after 100ms refused", i)
		}
	}
	if b.take(at) {
		t.Fatal("a sixth take after 100ms allowed")
	}
	// An hour refills only the burst.
	at = at.Add(time.Hour)
	got := 0
	for b.take(at) {
		got++
	}
	if got != 100 {
		t.Fatalf("after an hour, %d takes; want the burst, 100", got)
	}
}

// logSink is a sink logging to a buffer.
func logSink(rate int) (*Sink, *strings.Builder) {
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	return NewSink(log, clock.Real, rate), &buf
}

// Buckets that never refill (rate 0) make the tests independent of time.
func TestGuestLogDropsCountsAndAnnounces(t *testing.T) {
	n, buf := logSink(DefaultRate)
	l := n.NewLimit("t/c/a")
	l.bucket = &bucket{burst: 3, tokens: 3}
	out := NewStream(&l, "stdout")
	errs := NewStream(&l, "stderr")
	for range 5 {
		out.Write([]byte("o\n"))
		errs.Write([]byte("e\n"))
	}
	want := "level=INFO msg=o actor=t/c/a stream=stdout\n" +
		"level=INFO msg=e actor=t/c/a stream=stderr\n" +
		"level=INFO msg=o actor=t/c/a stream=stdout\n"
	if buf.String() != want {
		t.Fatalf("log:\n%s\nwant:\n%s", buf, want)
	}
	if n.Lines() != 3 || n.Dropped() != 7 {
		t.Fatalf("lines %d, dropped %d; want 3, 7", n.Lines(), n.Dropped())
	}

	buf.Reset()
	l.bucket.tokens = 1
	errs.Write([]byte("next\n"))
	want = "level=WARN msg=\"7 lines dropped\" actor=t/c/a\n" +
		"level=INFO msg=next actor=t/c/a stream=stderr\n"
	if buf.String() != want {
		t.Fatalf("log:\n%s\nwant:\n%s", buf, want)
	}

	// At the end of the instance: the last line without newline, what was
	// dropped, and a full burst for the next instance.
	buf.Reset()
	out.Write([]byte("unfinished"))
	out.Flush()
	l.EndInstance()
	if want := "level=WARN msg=\"1 lines dropped\" actor=t/c/a\n"; buf.String() != want {
		t.Fatalf("log:\n%s\nwant:\n%s", buf, want)
	}
	if l.bucket.tokens != 2*DefaultRate {
		t.Fatalf("next instance gets %v tokens; want %d", l.bucket.tokens, 2*DefaultRate)
	}
}

func TestGuestLogNodeLimit(t *testing.T) {
	n, buf := logSink(DefaultRate)
	n.bucket = &bucket{burst: 2, tokens: 2}
	a, b := n.NewLimit("t/c/a"), n.NewLimit("t/c/b")
	ga, gb := NewStream(&a, "stdout"), NewStream(&b, "stdout")
	ga.Write([]byte("1\n"))
	gb.Write([]byte("2\n"))
	ga.Write([]byte("3\n"))
	if strings.Contains(buf.String(), "msg=3") || n.Lines() != 2 || n.Dropped() != 1 || a.dropped != 1 {
		t.Fatalf("past the node's limit: lines %d, dropped %d (actor a %d), log:\n%s",
			n.Lines(), n.Dropped(), a.dropped, buf)
	}
}

func TestGuestLogDiscard(t *testing.T) {
	n, buf := logSink(Discard)
	l := n.NewLimit("t/c/a")
	g := NewStream(&l, "stdout")
	g.Write([]byte("a\nb\nc"))
	g.Flush()
	l.EndInstance()
	if buf.Len() != 0 || n.Lines() != 0 || n.Dropped() != 3 {
		t.Fatalf("discarding: lines %d, dropped %d, log:\n%s", n.Lines(), n.Dropped(), buf)
	}
}
