package nodelease

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// Header is the first line of a node lease object (format 3; there is no
// older format to read, ADR 1023).
const Header = "wasmkeep-node 3"

// State is a node lease object's state.
type State string

const (
	Live     State = "live"     // written by the process it names
	Released State = "released" // that process stopped cleanly
	Fenced   State = "fenced"   // a peer or an operator took the lease
	// Forgotten: `wasmkeep cluster forget` retired a fenced or released
	// lease in place of deleting it (ADR 1041): status hides it, and a
	// process starting with the id takes it as it takes a released one.
	Forgotten State = "forgotten"
)

// Info is what a node says of itself in its lease, for membership and
// routing: none of it is lease state.
type Info struct {
	Version     string   // the WasmKeep version it runs
	Advertise   string   // the URL other nodes reach it at (--advertise)
	App         string   // the app it serves, tenant/app (cluster.Join sets it)
	ClusterAddr string   // its cluster listener, https://HOST:PORT, or ""
	Pins        []string // SHA-256 fingerprints of its certificate, or none
	// Serving is the app's deployed version it runs, a Serving's String
	// ("<version> <seq> <since, Unix ms>"), or "" for none (--actor
	// classes). Lease.SetServing changes it and Behind at run time.
	Serving string
	// Behind is why it cannot apply the app's current version, one line,
	// or "" when it is not behind.
	Behind string
	// Secrets says the node reads its app's secrets from the bucket (ADR
	// 1050): wasmkeep secrets refuses, without --force, a change while a
	// live node of the app does not.
	Secrets bool
	// Taking is whether the node takes actors (ADR 1051): "" while it
	// does (Takes: nothing written, so a serving node's lease keeps the
	// bytes it had before this line existed), else Draining, Drained or
	// Stuck. Lease.SetTaking changes it at run time.
	Taking Taking
	// NotTaking are the node's reasons for taking no actor (line 12, after
	// the state): "drain" for an operator's drain request, "secrets" when
	// it cannot open its app's secrets (ADR 1050), so status can tell a
	// drained node from one shut out. None while it takes actors.
	NotTaking []string
	// Capabilities are words naming node calls it answers that not every
	// build may (line 13, space-separated): a peer sends such a call only
	// to a node whose heartbeat names it. Readers ignore words they do not
	// know.
	Capabilities []string
	// Room is how many more actors it would start now (line 14, decimal;
	// ADR 1054): its instance slots under --max-instances not held by a
	// busy instance, 0 while it takes none. 0, nothing written, is also
	// what a node says that does not say (an older build, a full one): no
	// room, so it is sent no relocated actor. Lease.SetRoom reads it for
	// each write.
	Room int
}

// CapabilityTake is the word of a node that answers the take call (book
// ADR 0017; ADR 1052): it acquires and restores an actor it is asked to,
// running no guest code, and arms its alarm.
const CapabilityTake = "take"

// CapabilityNotHeld is the word of a node that marks its 503 to a
// forwarded request for an actor it does not hold (peers.NotHeldHeader:
// nothing of it ran) and drops a guest's x-wasmkeep- headers from its
// answers, so that the mark is only ever its own (ADR 1046's amendment).
// A node believes the mark only from a peer that names it.
const CapabilityNotHeld = "not-held"

// HasCapability reports whether the node's heartbeat names word.
func (i Info) HasCapability(word string) bool { return slices.Contains(i.Capabilities, word) }

// Taking is a node's heartbeat line 12: why peers must not send it a new
// actor, and how far it is in handing over those it holds.
type Taking string

const (
	Takes    Taking = ""         // it takes actors (serving): no line written
	Draining Taking = "draining" // it takes none and hands over those it holds
	Drained  Taking = "drained"  // it takes none and holds none, no socket either
	Stuck    Taking = "stuck"    // it takes none but holds some, and no live peer of its app takes them
)

// The reasons a node gives for taking no actor (Info.NotTaking); a later
// build may give others.
const (
	ReasonDrain   = "drain"   // an operator's drain request (ADR 1051)
	ReasonSecrets = "secrets" // it cannot open its app's secrets (ADR 1050)
)

// String is the state as cluster status shows it: "serving" for Takes.
func (t Taking) String() string {
	if t == Takes {
		return "serving"
	}
	return string(t)
}

// parseTaking reads line 12, the state and the reasons after it;
// "serving", which no build writes but which names Takes, is Takes; a
// state it does not know (a later build's) is kept as written, and counts
// as not taking: such a node is never sent a new actor.
func parseTaking(line string) (Taking, []string) {
	f := strings.Fields(oneLine(line, maxBehind))
	if len(f) == 0 || f[0] == Takes.String() {
		return Takes, nil
	}
	return Taking(f[0]), f[1:]
}

// parseRoom reads line 14; what is not a positive number (absent, or a
// later build's form) is no room: such a node is never sent a relocated
// actor.
func parseRoom(line string) int {
	if n, err := strconv.Atoi(strings.TrimSpace(line)); err == nil && n > 0 {
		return n
	}
	return 0
}

// Serving is a deployed version a node runs: the version's id, the seq
// of current it was swapped in under, and since when.
type Serving struct {
	Version string
	Seq     uint64
	Since   time.Time
}

// String is the Info.Serving line.
func (s Serving) String() string {
	return fmt.Sprintf("%s %d %d", s.Version, s.Seq, s.Since.UnixMilli())
}

// ParseServing reads an Info.Serving line; "" is the zero Serving.
func ParseServing(line string) (Serving, error) {
	if line == "" {
		return Serving{}, nil
	}
	f := strings.Fields(line)
	if len(f) != 3 {
		return Serving{}, fmt.Errorf("serving %q is not <version> <seq> <since>", line)
	}
	seq, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return Serving{}, fmt.Errorf("serving %q: seq %q: %v", line, f[1], err)
	}
	ms, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return Serving{}, fmt.Errorf("serving %q: since %q: %v", line, f[2], err)
	}
	return Serving{Version: f[0], Seq: seq, Since: time.UnixMilli(ms)}, nil
}

// Object is the content of nodes/<id>. Line by line:
//
//	wasmkeep-node 3
//	<state> <instance or -> <seq>
//	<written_at, Unix milliseconds>
//	<version>
//	<advertise>
//	<app>
//	<cluster address>
//	<pins, comma-separated>
//	<serving: version seq since, or empty>
//	<behind: why, or empty>
//	<"secrets" if it reads the app's secrets; absent if not, or empty when line 12 follows>
//	<taking: draining, drained or stuck, then its reasons; empty while it serves>
//	<capabilities: words, space-separated>
//	<room: how many more actors it would start, decimal; absent for 0>
//
// Lines from 11 on are absent when they and every later one are empty.
//
// Seq counts the process's live writes, so every write the lease
// conditions on has content of its own (a version token may hash the
// content). A released, fenced or forgotten object keeps the instance, seq
// and written_at of the live write it replaced.
type Object struct {
	State     State
	Instance  string
	Seq       uint64
	WrittenAt time.Time
	Info      Info
}

// Frees reports whether o, a node's lease read at now, frees the actors
// whose records name that node's process instance: a live lease of
// another instance at once (the node restarted), a fenced or released
// one once ttl + grace passed since its written_at on this clock.
func (o Object) Frees(instance string, now time.Time, s Settings) bool {
	if o.State == Live {
		return o.Instance != instance
	}
	return !now.Before(o.WrittenAt.Add(s.Takeover()))
}

// Key is the bucket key of a node's lease.
func Key(nodeID string) string { return Prefix + nodeID }

// Prefix is where every node's lease is: the heartbeat listing lists it.
const Prefix = "nodes/"

// CheckNodeID refuses an id outside [a-z0-9-] (1 to 63 bytes).
func CheckNodeID(id string) error {
	if id == "" || len(id) > 63 {
		return fmt.Errorf("node id %q must be 1 to 63 bytes of a-z 0-9 -", id)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return fmt.Errorf("node id %q must be 1 to 63 bytes of a-z 0-9 -", id)
		}
	}
	return nil
}

func field(s string) string {
	if s == "" {
		return ""
	}
	return strings.NewReplacer("\n", " ", "\r", " ").Replace(s)
}

// maxBehind bounds Info.Behind: a reason, not a log.
const maxBehind = 300

// oneLine makes s one printable line of at most max bytes: control
// characters become spaces, and a longer text is cut at a rune boundary.
func oneLine(s string, max int) string {
	s = strings.TrimSpace(strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?")))
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// Encode renders o.
func (o Object) Encode() []byte {
	inst := o.Instance
	if inst == "" {
		inst = "-"
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\n%s %s %d\n%d\n", Header, o.State, inst, o.Seq, o.WrittenAt.UnixMilli())
	for _, f := range []string{o.Info.Version, o.Info.Advertise, o.Info.App, o.Info.ClusterAddr, strings.Join(o.Info.Pins, ","), o.Info.Serving, o.Info.Behind} {
		b.WriteString(field(f))
		b.WriteByte('\n')
	}
	// Lines 11 on are written up to the last one that says something, so
	// an object keeps the bytes it had before a later line existed.
	secrets := ""
	if o.Info.Secrets {
		secrets = secretsLine
	}
	taking := ""
	if o.Info.Taking != Takes {
		taking = strings.Join(append([]string{string(o.Info.Taking)}, o.Info.NotTaking...), " ")
	}
	room := ""
	if o.Info.Room > 0 {
		room = strconv.Itoa(o.Info.Room)
	}
	tail := []string{secrets, taking, strings.Join(o.Info.Capabilities, " "), room}
	for len(tail) > 0 && tail[len(tail)-1] == "" {
		tail = tail[:len(tail)-1]
	}
	for _, f := range tail {
		b.WriteString(field(f))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// secretsLine is line 11 of a node that reads its app's secrets.
const secretsLine = "secrets"

// Decode parses an object; anything but format 3 is an error.
func Decode(data []byte) (Object, error) {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() && len(lines) < 14 {
		lines = append(lines, sc.Text())
	}
	if len(lines) < 3 || lines[0] != Header {
		return Object{}, fmt.Errorf("not a %q object", Header)
	}
	var o Object
	st := strings.Fields(lines[1])
	if len(st) != 3 {
		return Object{}, fmt.Errorf("line 2 %q is not <state> <instance> <seq>", lines[1])
	}
	switch o.State = State(st[0]); o.State {
	case Live, Released, Fenced, Forgotten:
	default:
		return Object{}, fmt.Errorf("unknown state %q", st[0])
	}
	if st[1] != "-" {
		o.Instance = st[1]
	} else if o.State == Live {
		return Object{}, errors.New("a live object names no instance")
	}
	var err error
	if o.Seq, err = strconv.ParseUint(st[2], 10, 64); err != nil {
		return Object{}, fmt.Errorf("seq %q: %v", st[2], err)
	}
	ms, err := strconv.ParseInt(lines[2], 10, 64)
	if err != nil {
		return Object{}, fmt.Errorf("written_at %q: %v", lines[2], err)
	}
	o.WrittenAt = time.UnixMilli(ms)
	get := func(i int) string {
		if i < len(lines) {
			return lines[i]
		}
		return ""
	}
	o.Info = Info{Version: get(3), Advertise: get(4), App: get(5), ClusterAddr: get(6), Serving: get(8), Behind: get(9), Secrets: get(10) == secretsLine}
	o.Info.Taking, o.Info.NotTaking = parseTaking(get(11))
	if p := get(7); p != "" {
		o.Info.Pins = strings.Split(p, ",")
	}
	o.Info.Capabilities = strings.Fields(oneLine(get(12), maxBehind))
	o.Info.Room = parseRoom(get(13))
	return o, nil
}

// Read is one versioned GET of a node's lease. Found is false when the key
// is absent; Err is set when the object is there but is not format 3.
type Read struct {
	Found   bool
	Version bucket.Version
	ModTime time.Time // the bucket's time for the object's last write
	Body    []byte
	Object  Object
	Err     error
}

// ReadObject reads nodes/<id>; only a failed request is an error.
func ReadObject(ctx context.Context, b bucket.Bucket, nodeID string) (Read, error) {
	o, err := b.Get(ctx, Key(nodeID), bucket.GetOptions{})
	if errors.Is(err, bucket.ErrNotFound) {
		return Read{}, nil
	}
	if err != nil {
		return Read{}, err
	}
	defer o.Body.Close()
	body, err := io.ReadAll(io.LimitReader(o.Body, 64<<10))
	if err != nil {
		return Read{}, err
	}
	r := Read{Found: true, Version: o.Version, ModTime: o.ModTime, Body: body}
	r.Object, r.Err = Decode(body)
	return r, nil
}

// writeObject puts o as nodes/<id> under cond.
func writeObject(ctx context.Context, b bucket.Bucket, id string, o Object, cond bucket.Condition) (bucket.Version, error) {
	body := o.Encode()
	return b.Put(ctx, Key(id), bytes.NewReader(body), int64(len(body)), cond)
}

// same reports whether two reads saw the same content (never comparing
// version tokens).
func (r Read) same(o Read) bool { return r.Found == o.Found && bytes.Equal(r.Body, o.Body) }

// live reports whether r holds a live format-3 object.
func (r Read) live() bool { return r.Found && r.Err == nil && r.Object.State == Live }
