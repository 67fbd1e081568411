package node

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxLogLine is where a guest's log line is cut.
const maxLogLine = 4096

// guestLog turns what a guest writes to stdout or stderr into node log
// entries, one per line, tagged with the actor and the stream. Control
// characters are escaped so a guest cannot forge entries or drive a
// terminal. Writes never fail the guest.
type guestLog struct {
	log    *slog.Logger
	actor  string
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
	g.log.Info(escapeLine(g.buf), "actor", g.actor, "stream", g.stream)
	g.buf, g.cut = g.buf[:0], false
}

// escapeLine escapes control characters and invalid UTF-8 as \u{..}.
func escapeLine(b []byte) string {
	var sb strings.Builder
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && size == 1:
			sb.WriteString(`\x{` + strconv.FormatUint(uint64(b[0]), 16) + `}`)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			sb.WriteString(`\u{` + strconv.FormatUint(uint64(r), 16) + `}`)
		default:
			sb.Write(b[:size])
		}
		b = b[size:]
	}
	return sb.String()
}
