// Package guestlog turns what guests print to stdout and stderr into log
// entries: one a line, cut at 4 KiB, control characters escaped so a guest
// cannot forge entries or drive a terminal, and rate-limited per instance
// and per node, with the lines dropped counted and announced.
package guestlog

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
)

// maxLine is where a guest's log line is cut.
const maxLine = 4096

const (
	// DefaultRate is the lines a second an instance may print unless told.
	DefaultRate = 50
	nodeRate    = 1000 // lines a second for the whole node
)

// Discard, as a rate, discards every line guests print. A sentinel rather
// than 0, so that a zero rate in options can mean the default.
const Discard = -1

// Sink is what the guests of a node log to: the node's log and clock, the
// rate each instance may print at, the node-wide limit, and the counts of
// lines logged and dropped.
type Sink struct {
	log     *slog.Logger
	clock   clock.Clock
	rate    int     // per instance, a second; Discard for none
	bucket  *bucket // the node-wide limit
	lines   atomic.Int64
	dropped atomic.Int64
}

// NewSink returns a node's sink: each instance may print rate lines a
// second, bursts of twice that (Discard for none), and the node 1,000.
func NewSink(log *slog.Logger, clk clock.Clock, rate int) *Sink {
	return &Sink{log: log, clock: clk, rate: rate, bucket: newBucket(nodeRate)}
}

// Lines is how many lines printed by guests reached the log.
func (s *Sink) Lines() int64 { return s.lines.Load() }

// Dropped is how many lines printed by guests the limits dropped (every
// line, with Discard).
func (s *Sink) Dropped() int64 { return s.dropped.Load() }

// Stream turns what a guest writes to stdout or stderr into log entries,
// one per line, tagged with the actor and the stream. Tabs, which neither
// forge an entry nor drive a terminal, are kept (Go's panic traces indent
// with them). Writes never fail the guest.
type Stream struct {
	limit  *Limit
	stream string
	buf    []byte
	cut    bool // the current line passed maxLine; drop until its newline
}

// NewStream returns the stream named name ("stdout", "stderr") of the
// instance whose limit is l.
func NewStream(l *Limit, name string) Stream { return Stream{limit: l, stream: name} }

func (g *Stream) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			g.add(p)
			break
		}
		g.add(p[:i])
		g.Flush()
		p = p[i+1:]
	}
	return n, nil
}

func (g *Stream) add(p []byte) {
	if g.cut {
		return
	}
	if room := maxLine - len(g.buf); len(p) > room {
		p, g.cut = p[:room], true
	}
	g.buf = append(g.buf, p...)
}

// Flush logs the line held, if any (also at the end of an instance, for a
// last line without its newline).
func (g *Stream) Flush() {
	if len(g.buf) == 0 && !g.cut {
		return
	}
	g.limit.log(g.stream, g.buf)
	g.buf, g.cut = g.buf[:0], false
}

// Limit is what an actor instance's stdout and stderr share: its rate
// limit, and the lines dropped since the last one logged. Only the actor's
// goroutine uses it.
type Limit struct {
	sink    *Sink
	actor   string
	bucket  *bucket
	dropped int64
}

// NewLimit returns the limit of an instance of actor (as the log names it).
func (s *Sink) NewLimit(actor string) Limit {
	return Limit{sink: s, actor: actor, bucket: newBucket(s.rate)}
}

// log logs one line if both the instance's and the node's limits let it
// through, announcing the lines dropped before it; else counts it.
func (l *Limit) log(stream string, line []byte) {
	s := l.sink
	if s.rate < 0 {
		s.dropped.Add(1)
		return
	}
	now := s.clock.Now()
	if !l.bucket.take(now) || !s.bucket.take(now) {
		l.dropped++
		s.dropped.Add(1)
		return
	}
	l.announce()
	s.lines.Add(1)
	s.log.Info(escapeLine(line), "actor", l.actor, "stream", stream)
}

func (l *Limit) announce() {
	if l.dropped > 0 {
		l.sink.log.Warn(strconv.FormatInt(l.dropped, 10)+" lines dropped", "actor", l.actor)
		l.dropped = 0
	}
}

// EndInstance announces what was dropped now, since the actor may hibernate
// and never log again, and gives the next instance a full burst.
func (l *Limit) EndInstance() {
	l.announce()
	l.bucket = newBucket(l.sink.rate)
}

// bucket is a token bucket: rate tokens a second, holding up to burst. A
// dozen lines, so no dependency (golang.org/x/time/rate); take is given the
// time, so tests need no clock.
type bucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

// newBucket returns a full bucket for rate a second, bursts of twice that.
func newBucket(rate int) *bucket {
	r := float64(rate)
	return &bucket{rate: r, burst: 2 * r, tokens: 2 * r}
}

// take takes a token if there is one.
func (b *bucket) take(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// escapeLine escapes control characters other than tab as \u{..}, and
// invalid UTF-8 as \x{..}. The log handler then quotes the tab as it
// quotes any text it must (slog's text handler writes \t).
func escapeLine(b []byte) string {
	var sb strings.Builder
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && size == 1:
			sb.WriteString(`\x{` + strconv.FormatUint(uint64(b[0]), 16) + `}`)
		case r < 0x20 && r != '\t' || r == 0x7f || (r >= 0x80 && r < 0xa0):
			sb.WriteString(`\u{` + strconv.FormatUint(uint64(r), 16) + `}`)
		default:
			sb.Write(b[:size])
		}
		b = b[size:]
	}
	return sb.String()
}
