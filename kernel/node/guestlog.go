package node

import (
	"bytes"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// maxLogLine is where a guest's log line is cut.
const maxLogLine = 4096

const (
	defaultGuestLogRate = 50   // lines a second per actor instance
	nodeGuestLogRate    = 1000 // lines a second for the whole node
)

// DiscardGuestLogs, as Options.GuestLogRate, discards every line guests
// print. A sentinel rather than 0, so that the zero Options keep the default.
const DiscardGuestLogs = -1

// guestLog turns what a guest writes to stdout or stderr into node log
// entries, one per line, tagged with the actor and the stream. Control
// characters are escaped so a guest cannot forge entries or drive a
// terminal; tabs, which do neither, are kept (Go's panic traces indent with
// them). Writes never fail the guest.
type guestLog struct {
	limit  *guestLimit
	stream string
	buf    []byte
	cut    bool // the current line passed maxLogLine; drop until its newline
}

func (g *guestLog) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			g.add(p)
			break
		}
		g.add(p[:i])
		g.flush()
		p = p[i+1:]
	}
	return n, nil
}

func (g *guestLog) add(p []byte) {
	if g.cut {
		return
	}
	if room := maxLogLine - len(g.buf); len(p) > room {
		p, g.cut = p[:room], true
	}
	g.buf = append(g.buf, p...)
}

// flush logs the line held, if any (also at the end of an instance, for a
// last line without its newline).
func (g *guestLog) flush() {
	if len(g.buf) == 0 && !g.cut {
		return
	}
	g.limit.log(g.stream, g.buf)
	g.buf, g.cut = g.buf[:0], false
}

// guestLimit is what an actor instance's stdout and stderr share: its rate
// limit, and the lines dropped since the last one logged. Only the actor's
// goroutine uses it.
type guestLimit struct {
	node    *Node
	actor   string
	bucket  *bucket
	dropped int64
}

func newGuestLimit(n *Node, actor string) guestLimit {
	return guestLimit{node: n, actor: actor, bucket: newBucket(n.opts.GuestLogRate)}
}

// log logs one line if both the instance's and the node's limits let it
// through, announcing the lines dropped before it; else counts it.
func (l *guestLimit) log(stream string, line []byte) {
	n := l.node
	if n.opts.GuestLogRate < 0 {
		n.guestLogDropped.Add(1)
		return
	}
	now := n.clock.Now()
	if !l.bucket.take(now) || !n.guestLogBucket.take(now) {
		l.dropped++
		n.guestLogDropped.Add(1)
		return
	}
	l.announce()
	n.guestLogLines.Add(1)
	n.log.Info(escapeLine(line), "actor", l.actor, "stream", stream)
}

func (l *guestLimit) announce() {
	if l.dropped > 0 {
		l.node.log.Warn(strconv.FormatInt(l.dropped, 10)+" lines dropped", "actor", l.actor)
		l.dropped = 0
	}
}

// endInstance announces what was dropped now, since the actor may hibernate
// and never log again, and gives the next instance a full burst.
func (l *guestLimit) endInstance() {
	l.announce()
	l.bucket = newBucket(l.node.opts.GuestLogRate)
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

// GuestLogLines is how many lines printed by guests reached the log.
func (n *Node) GuestLogLines() int64 { return n.guestLogLines.Load() }

// GuestLogDropped is how many lines printed by guests the limits dropped
// (every line, with DiscardGuestLogs).
func (n *Node) GuestLogDropped() int64 { return n.guestLogDropped.Load() }

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
