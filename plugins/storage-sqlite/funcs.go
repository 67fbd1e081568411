package sqlitestorage

import "bytes"

// SQLite's built-in functions whose one call can cost more than linear time
// in its arguments, in Go, registered on guest connections under the same
// names (see ADR 1014). SQLite checks for an interrupt and calls the
// progress handler only between virtual machine steps, and one function
// call is one step: instr('<16 MB>', '<300 KB>') in C ran 95 s past every
// limit. These give the same results as SQLite 3.54's func.c (a
// differential test compares them with the built-ins) and ask, every
// workQuantum of work, whether the statement must stop; a stopped call
// fails with SQLITE_INTERRUPT, as a statement stopped between steps does.
//
// instr and replace search with bytes.Index, in linear time; trim and
// LIKE/GLOB keep SQLite's algorithms (so their results stay SQLite's to the
// byte), which are O(n*m) at worst but now stop at the budget.

// workQuantum is the work, in bytes compared or characters read, between
// two looks at whether the statement must stop: about 10 to 100 µs.
const workQuantum = 64 << 10

// guestFuncs are the overrides.
var guestFuncs = []struct {
	name string
	nArg int
	arg  int
	f    sqlFunc
}{
	{"instr", 2, 0, instrFunc},
	{"replace", 3, 0, replaceFunc},
	{"ltrim", 2, trimLeft, trimFunc},
	{"rtrim", 2, trimRight, trimFunc},
	{"trim", 2, trimLeft | trimRight, trimFunc},
	{"like", 2, 0, likeFunc},
	{"like", 3, matchEscape, likeFunc},
	{"glob", 2, matchGlob, likeFunc},
}

// registerGuestFuncs puts the overrides on c; likeBlobs says whether this
// SQLite's LIKE and GLOB match blobs (it was not compiled with
// SQLITE_LIKE_DOESNT_MATCH_BLOBS).
func registerGuestFuncs(c conn, likeBlobs bool) error {
	for _, g := range guestFuncs {
		arg := g.arg
		if likeBlobs && (g.name == "like" || g.name == "glob") {
			arg |= matchBlobs
		}
		if err := c.createFunction(g.name, g.nArg, arg, g.f); err != nil {
			return err
		}
	}
	return nil
}

// meter counts a call's work and asks every workQuantum whether it must
// stop.
type meter struct {
	call    funcCall
	work    int
	stopped bool
}

// add counts n units of work and reports whether the call must stop.
func (m *meter) add(n int) bool {
	m.work += n
	if m.work >= workQuantum {
		m.work = 0
		m.stopped = m.stopped || m.call.stop()
	}
	return m.stopped
}

// interrupted fails the call the way a stopped statement fails.
func (m *meter) interrupted() { m.call.resultError(rcInterrupt, "") }

// index is bytes.Index(h[from:], n) + from, searched a window at a time
// so that the call can stop between windows; ok is false if it must stop.
// Consecutive windows overlap by len(n)-1 bytes, and each spans at least
// len(n), so the work stays linear.
func (m *meter) index(h, n []byte, from int) (i int, ok bool) {
	stride := max(workQuantum, len(n))
	for start := from; ; start += stride {
		end := min(start+stride+len(n)-1, len(h))
		if end-start < len(n) {
			return -1, true
		}
		if i := bytes.Index(h[start:end], n); i >= 0 {
			return start + i, true
		}
		if end == len(h) {
			return -1, true
		}
		if m.add(end - start) {
			return 0, false
		}
	}
}

// isContinuation says whether b continues a UTF-8 sequence.
func isContinuation(b byte) bool { return b&0xc0 == 0x80 }

// instrFunc is instr(X, Y): 1 + the characters (bytes if both are blobs)
// of X before the first Y, 0 if there is none, NULL if either is NULL.
func instrFunc(call funcCall, _ int) {
	th, tn := call.argType(0), call.argType(1)
	if th == typeNull || tn == typeNull {
		return
	}
	isText := th != typeBlob || tn != typeBlob
	// SQLite reads a blob as text when the other is not a blob: the same
	// bytes in a UTF-8 database.
	h, n := argBytes(call, 0, th), argBytes(call, 1, tn)
	if h == nil || n == nil {
		call.resultError(rcNoMem, "")
		return
	}
	if len(n) == 0 {
		call.resultInt(1)
		return
	}
	m := meter{call: call}
	if !isText {
		i, ok := m.index(h, n, 0)
		if !ok {
			m.interrupted()
			return
		}
		call.resultInt(int64(i + 1))
		return
	}
	// SQLite tries the first byte, then each byte that starts a character;
	// a needle that starts with a continuation byte can only match at 0.
	var i int
	if isContinuation(n[0]) {
		i = -1
		if bytes.HasPrefix(h, n) {
			i = 0
		}
	} else {
		var ok bool
		if i, ok = m.index(h, n, 0); !ok {
			m.interrupted()
			return
		}
	}
	if i < 0 {
		call.resultInt(0)
		return
	}
	chars := 1
	for start := 1; start <= i; start += workQuantum {
		for _, b := range h[start:min(start+workQuantum, i+1)] {
			if !isContinuation(b) {
				chars++
			}
		}
		if m.add(workQuantum) {
			m.interrupted()
			return
		}
	}
	call.resultInt(int64(chars))
}

// argBytes is argument i as a blob if it is one, else as text.
func argBytes(call funcCall, i, typ int) []byte {
	if typ == typeBlob {
		return call.argBlob(i)
	}
	return call.argText(i)
}

// replaceFunc is replace(X, Y, Z): X as text with every Y, left to right,
// replaced by Z.
func replaceFunc(call funcCall, _ int) {
	s := call.argText(0)
	if s == nil {
		return
	}
	p := call.argText(1)
	if p == nil {
		return
	}
	if len(p) == 0 || p[0] == 0 { // SQLite reads the pattern as a C string here
		call.resultText(s)
		return
	}
	r := call.argText(2)
	if r == nil {
		return
	}
	limit := call.limit(limitLength)
	if len(s)+1 > limit { // SQLite allocates the output and its NUL first
		call.resultError(rcTooBig, "")
		return
	}
	m := meter{call: call}
	out := make([]byte, 0, len(s))
	for i := 0; ; {
		j, ok := m.index(s, p, i)
		if !ok {
			m.interrupted()
			return
		}
		if j < 0 {
			out = append(out, s[i:]...)
			break
		}
		out = append(append(out, s[i:j]...), r...)
		copied := j - i + len(r)
		i = j + len(p)
		if len(r) > len(p) && len(out)+len(s)-i > limit {
			call.resultError(rcTooBig, "")
			return
		}
		if m.add(copied) {
			m.interrupted()
			return
		}
	}
	call.resultText(out)
}

// trimFunc's arg: which ends it trims.
const (
	trimLeft  = 1
	trimRight = 2
)

// trimFunc is ltrim, rtrim and trim with a second argument: X as text
// without the characters of Y at its start, its end or both. As in SQLite,
// Y is read up to its first NUL byte, and a "character" of Y is a byte
// below 0xc0, or one from 0xc0 with the continuation bytes after it; at
// each step the first character of Y (in Y's order) found there goes.
func trimFunc(call funcCall, ends int) {
	if call.argType(0) == typeNull {
		return
	}
	in := call.argText(0)
	if in == nil {
		return
	}
	set := call.argText(1)
	if set == nil {
		return
	}
	if i := bytes.IndexByte(set, 0); i >= 0 {
		set = set[:i]
	}
	var chars [][]byte
	for z := 0; z < len(set); {
		start := z
		z++
		if set[start] >= 0xc0 {
			for z < len(set) && isContinuation(set[z]) {
				z++
			}
		}
		chars = append(chars, set[start:z])
	}
	// SQLite allocates a pointer and a length per character of Y, and
	// fails as it does for any allocation past the length limit.
	if len(chars)*12 > call.limit(limitLength) {
		call.resultError(rcTooBig, "")
		return
	}
	m := meter{call: call}
	// firsts[b]: some character of Y starts with b (or ends with b, for
	// the right end); a byte that none has ends the trim at once.
	var firsts, lasts [256]bool
	for _, c := range chars {
		firsts[c[0]], lasts[c[len(c)-1]] = true, true
	}
	if ends&trimLeft != 0 {
		for len(in) > 0 && firsts[in[0]] {
			c := trimAt(&m, chars, in, bytes.HasPrefix)
			if c < 0 {
				break
			}
			in = in[c:]
		}
	}
	if ends&trimRight != 0 {
		for len(in) > 0 && lasts[in[len(in)-1]] {
			c := trimAt(&m, chars, in, bytes.HasSuffix)
			if c < 0 {
				break
			}
			in = in[:len(in)-c]
		}
	}
	if m.stopped {
		m.interrupted()
		return
	}
	call.resultText(in)
}

// trimAt is the length of the first of chars that in has at the end that
// has looks at, or -1 if none (or if the call must stop).
func trimAt(m *meter, chars [][]byte, in []byte, has func(s, affix []byte) bool) int {
	for _, c := range chars {
		if m.add(len(c)) {
			return -1
		}
		if has(in, c) {
			return len(c)
		}
	}
	return -1
}

// likeFunc's arg.
const (
	matchGlob   = 1 // GLOB rather than LIKE
	matchBlobs  = 2 // a blob matches as text (else it never matches)
	matchEscape = 4 // the third argument is the escape character
)

// patternCompare's results.
const (
	match = iota
	noMatch
	noWildcardMatch // no match, though the pattern has wildcards
	matchStopped    // the call must stop
)

// likeInfo is SQLite's compareInfo.
type likeInfo struct {
	matchAll, matchOne, matchSet uint32
	noCase                       bool
}

// likeFunc is like(P, S), like(P, S, E) and glob(P, S): whether S matches
// the pattern P (LIKE: ASCII-case-insensitive, with E as the escape).
func likeFunc(call funcCall, arg int) {
	if arg&matchBlobs == 0 && (call.argType(0) == typeBlob || call.argType(1) == typeBlob) {
		call.resultInt(0)
		return
	}
	info := likeInfo{matchAll: '%', matchOne: '_', noCase: true}
	if arg&matchGlob != 0 {
		info = likeInfo{matchAll: '*', matchOne: '?', matchSet: '['}
	}
	pattern := call.argText(0)
	if len(pattern) > call.limit(limitLikePattern) {
		call.resultError(rcError, "LIKE or GLOB pattern too complex")
		return
	}
	escape := info.matchSet
	if arg&matchEscape != 0 {
		esc := call.argText(2)
		if esc == nil {
			return
		}
		if utf8CharLen(esc) != 1 {
			call.resultError(rcError, "ESCAPE expression must be a single character")
			return
		}
		escape, _ = utf8Read(cstr(esc), 0)
		if escape == info.matchAll {
			info.matchAll = 0
		}
		if escape == info.matchOne {
			info.matchOne = 0
		}
	}
	str := call.argText(1)
	if pattern == nil || str == nil {
		return
	}
	m := meter{call: call}
	r := patternCompare(&m, cstr(pattern), cstr(str), &info, escape)
	if r == matchStopped {
		m.interrupted()
		return
	}
	n := int64(0)
	if r == match {
		n = 1
	}
	call.resultInt(n)
}

// cstr is b up to its first NUL byte: SQLite reads LIKE and GLOB's
// arguments as C strings.
func cstr(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// at is z[i], or the terminating NUL past the end.
func at(z []byte, i int) uint32 {
	if i < len(z) {
		return uint32(z[i])
	}
	return 0
}

var utf8Trans1 = [64]byte{
	0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
	0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
	0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
	0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x00, 0x01, 0x02, 0x03, 0x00, 0x01, 0x00, 0x00,
}

// utf8Read is sqlite3Utf8Read: the character at z[i] and the index after
// it (past the end once it has read the terminating NUL).
func utf8Read(z []byte, i int) (uint32, int) {
	c := at(z, i)
	i++
	if c >= 0xc0 {
		c = uint32(utf8Trans1[c-0xc0])
		for at(z, i)&0xc0 == 0x80 {
			c = c<<6 + at(z, i)&0x3f
			i++
		}
		if c < 0x80 || c&0xFFFFF800 == 0xD800 {
			c = 0xFFFD
		}
	}
	return c, i
}

// skipUTF8 is SQLITE_SKIP_UTF8.
func skipUTF8(z []byte, i int) int {
	i++
	if at(z, i-1) >= 0xc0 {
		for at(z, i)&0xc0 == 0x80 {
			i++
		}
	}
	return i
}

// utf8CharLen is sqlite3Utf8CharLen(z, -1).
func utf8CharLen(z []byte) int {
	z = cstr(z)
	n := 0
	for i := 0; i < len(z); n++ {
		i = skipUTF8(z, i)
	}
	return n
}

func toLower(c uint32) uint32 {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func toUpper(c uint32) uint32 {
	if c >= 'a' && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}

// patternCompare is SQLite's, line for line (func.c): whether str matches
// pattern, with matchOther the escape (LIKE) or '[' (GLOB). Both end at
// their first NUL. It counts a unit of work per character it reads.
func patternCompare(m *meter, pattern, str []byte, info *likeInfo, matchOther uint32) int {
	p, s := 0, 0
	escaped := -1 // the pattern index after the last escaped character
	for {
		var c, c2 uint32
		if c, p = utf8Read(pattern, p); c == 0 {
			break
		}
		if m.add(1) {
			return matchStopped
		}
		if c == info.matchAll {
			for {
				if c, p = utf8Read(pattern, p); c != info.matchAll && (c != info.matchOne || info.matchOne == 0) {
					break
				}
				if c == info.matchOne {
					if c2, s = utf8Read(str, s); c2 == 0 {
						return noWildcardMatch
					}
				}
			}
			if c == 0 {
				return match
			} else if c == matchOther {
				if info.matchSet == 0 {
					if c, p = utf8Read(pattern, p); c == 0 {
						return noWildcardMatch
					}
				} else {
					for at(str, s) != 0 {
						if r := patternCompare(m, pattern[p-1:], str[s:], info, matchOther); r != noMatch {
							return r
						}
						s = skipUTF8(str, s)
					}
					return noWildcardMatch
				}
			}
			if c < 0x80 {
				stop0, stop1 := c, c
				if info.noCase {
					stop0, stop1 = toUpper(c), toLower(c)
				}
				for {
					for at(str, s) != 0 && at(str, s) != stop0 && at(str, s) != stop1 {
						s++
						if m.add(1) {
							return matchStopped
						}
					}
					if at(str, s) == 0 {
						break
					}
					s++
					if r := patternCompare(m, pattern[p:], str[s:], info, matchOther); r != noMatch {
						return r
					}
				}
			} else {
				for {
					if c2, s = utf8Read(str, s); c2 == 0 {
						break
					}
					if m.add(1) {
						return matchStopped
					}
					if c2 != c {
						continue
					}
					if r := patternCompare(m, pattern[p:], str[s:], info, matchOther); r != noMatch {
						return r
					}
				}
			}
			return noWildcardMatch
		}
		if c == matchOther {
			if info.matchSet == 0 {
				if c, p = utf8Read(pattern, p); c == 0 {
					return noMatch
				}
				escaped = p
			} else {
				var prior uint32
				seen, invert := false, false
				if c, s = utf8Read(str, s); c == 0 {
					return noMatch
				}
				c2, p = utf8Read(pattern, p)
				if c2 == '^' {
					invert = true
					c2, p = utf8Read(pattern, p)
				}
				if c2 == ']' {
					if c == ']' {
						seen = true
					}
					c2, p = utf8Read(pattern, p)
				}
				for c2 != 0 && c2 != ']' {
					if c2 == '-' && at(pattern, p) != ']' && at(pattern, p) != 0 && prior > 0 {
						c2, p = utf8Read(pattern, p)
						if c >= prior && c <= c2 {
							seen = true
						}
						prior = 0
					} else {
						if c == c2 {
							seen = true
						}
						prior = c2
					}
					c2, p = utf8Read(pattern, p)
				}
				if c2 == 0 || seen == invert {
					return noMatch
				}
				continue
			}
		}
		c2, s = utf8Read(str, s)
		if c == c2 {
			continue
		}
		if info.noCase && toLower(c) == toLower(c2) && c < 0x80 && c2 < 0x80 {
			continue
		}
		if c == info.matchOne && p != escaped && c2 != 0 {
			continue
		}
		return noMatch
	}
	if at(str, s) == 0 {
		return match
	}
	return noMatch
}
