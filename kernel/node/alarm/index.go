package alarm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// The alarm index (ADR 1018) is a file of the kernel's in the data
// directory, <data-dir>/alarm-index/<tenant>: for every actor of the tenant
// that may have a pending alarm, a time no later than that alarm. A start
// reads it instead of opening every database. Each actor's own alarm row
// stays the truth; the index only says when to look.
//
// The rule that keeps it safe: an entry is never later than its actor's
// committed alarm, and never missing while the actor has one.
//   - Before an event writes an alarm earlier than the actor's entry (or
//     the first one), the entry is lowered and the file fsynced (Lower):
//     a crash before the actor's commit leaves an earlier or an extra
//     entry.
//   - After an event, the entry follows what the actor committed (Settle):
//     moved later or removed only once the actor's database is synced
//     (storage.Syncer), so a crash, even of the machine, loses the index
//     write before it can lose the commit.
//
// An earlier or extra entry costs one wake: the actor is opened at the
// entry's time, finds no due alarm, and Settle corrects the entry. A
// missing, unreadable or damaged file is rebuilt from every database
// (storage.Driver.Walk); a database that cannot be opened then is logged
// and counted (wasmkeep_alarm_index_unreadable_databases_total).
//
// The file is a header line and then one record a line, appended:
//
//	<crc32c of the rest, 8 hex digits> S <at, ms since the epoch> <class> <name, Go-quoted>
//	<crc32c> C <the at it removes> <class> <name>
//
// S sets an actor's entry, C removes it; a later record wins. It is
// rewritten whole (temporary file, fsync, rename) at start when it holds
// more than twice as many records as entries, plus 1,024 (overgrown), and
// when appends make it so.
const alarmIndexHeader = "wasmkeep alarm index 1\n"

// Entry is an actor's entry in the index.
type Entry struct {
	Class, Name string
	At          int64 // ms since the epoch
}

// Index is the index file and its contents in memory.
type Index struct {
	path  string
	log   *slog.Logger
	clock clock.Clock   // times the load for the log
	ready chan struct{} // closed once the entries are read: every method but rewrite waits for it

	syncMu sync.Mutex // held around an fsync or a rewrite; taken before mu
	mu     sync.Mutex
	f      *os.File
	bad    error            // a failed write: the file may hold a torn line; appends stop
	items  map[string]Entry // by actor key (tenant/class/name)
	tenant string
	lines  int    // records in the file
	seq    uint64 // records written
	synced uint64 // records known durable
}

var errIndexDamaged = errors.New("damaged")

// IndexOptions say where a tenant's index lives and what a rebuild reads.
type IndexOptions struct {
	// Root is the storage root the app's databases live under (the node's
	// state directory); the index is a file beside them.
	Root, Tenant   string
	Log            *slog.Logger
	Clock          clock.Clock // times the load and a rebuild for the log
	Storage        storage.Driver
	StorageOptions storage.Options
	// Name reads the actor's name recorded in its database (a file name may
	// hold only a hash of a long name); ok is false if none is.
	Name func(ctx context.Context, db storage.DB) (name string, ok bool, err error)
	// Rebuilt and Unreadable count a rebuild and a database it could not
	// read (wasmkeep_alarm_index_*).
	Rebuilt, Unreadable func()
}

// OpenIndex checks the tenant's index, rebuilding it from every database
// if it is missing or damaged, and opens it for appending; arm gets its
// entries, once read (a whole index is read while the node serves: events
// that touch alarms wait for it).
func OpenIndex(ctx context.Context, o IndexOptions, arm func(map[string]Entry)) (*Index, error) {
	ix := &Index{
		ready:  make(chan struct{}),
		path:   filepath.Join(o.Root, "alarm-index", o.Tenant),
		log:    o.Log,
		clock:  o.Clock,
		tenant: o.Tenant,
	}
	if err := os.MkdirAll(filepath.Dir(ix.path), 0o750); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(ix.path)
	var body []byte
	torn := false
	if err == nil {
		body, torn, err = checkAlarmIndex(ix.path, data)
	}
	switch {
	case err == nil:
		// Whole and checked: parsed and armed while the node already serves.
		go ix.load(body, torn, arm)
		return ix, nil
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, errIndexDamaged):
		o.Log.Warn("rebuilding the alarm index from every actor database", "index", ix.path, "why", err)
		o.Rebuilt()
		if ix.items, err = rebuild(ctx, o); err != nil {
			return nil, fmt.Errorf("rebuilding the alarm index: %w", err)
		}
		if err := ix.rewrite(); err != nil {
			return nil, err
		}
		arm(ix.items)
		close(ix.ready)
		return ix, nil
	default:
		return nil, err
	}
}

// load parses a checked file into the entries, opens it for appending (or
// rewrites it, when it must be) and arms the entries; then the index is
// ready.
func (ix *Index) load(body []byte, torn bool, arm func(map[string]Entry)) {
	defer close(ix.ready)
	start := ix.clock.Now()
	ix.items, ix.lines = parseAlarmIndex(body, ix.tenant)
	var err error
	if torn || ix.overgrown() { // an append would join a torn line; or too long
		err = ix.rewrite()
	} else {
		ix.f, err = os.OpenFile(ix.path, os.O_WRONLY|os.O_APPEND, 0)
	}
	if err != nil {
		ix.bad = fmt.Errorf("alarm index: %w", err)
		ix.log.Error("alarm index: cannot be written; alarms already indexed are armed, new ones are refused", "index", ix.path, "err", err)
	}
	arm(ix.items)
	ix.log.Debug("alarm index loaded", "alarms", len(ix.items), "took", ix.clock.Now().Sub(start).Round(time.Microsecond))
}

// checkAlarmIndex checks a whole file, every record's checksum and form,
// and returns its records. A last line without its newline is a write a
// crash cut short, dropped (torn): the protocol never relied on it (an
// entry is lowered only once its record is synced, and a later or
// removing record may be lost). Any other bad line makes the file damaged.
func checkAlarmIndex(path string, data []byte) (body []byte, torn bool, err error) {
	if !bytes.HasPrefix(data, []byte(alarmIndexHeader)) {
		return nil, false, fmt.Errorf("%s: %w: no header", path, errIndexDamaged)
	}
	body = data[len(alarmIndexHeader):]
	if i := bytes.LastIndexByte(body, '\n'); i+1 < len(body) {
		body, torn = body[:i+1], true
	}
	for n, rest := 1, body; len(rest) > 0; n++ {
		i := bytes.IndexByte(rest, '\n')
		if err := checkIndexRecord(rest[:i]); err != nil {
			return nil, false, fmt.Errorf("%s: %w: record %d: %v", path, errIndexDamaged, n, err)
		}
		rest = rest[i+1:]
	}
	return body, torn, nil
}

// parseAlarmIndex reads checked records into the entries they leave, and
// counts them.
func parseAlarmIndex(body []byte, tenant string) (map[string]Entry, int) {
	items := make(map[string]Entry, bytes.Count(body, []byte{'\n'}))
	lines := 0
	for len(body) > 0 {
		i := bytes.IndexByte(body, '\n')
		op, e := parseIndexRecord(body[:i])
		body = body[i+1:]
		lines++
		key := tenant + "/" + e.Class + "/" + e.Name
		if op == 'S' {
			items[key] = e
		} else {
			delete(items, key)
		}
	}
	return items, lines
}

func formatIndexRecord(op byte, e Entry) string {
	body := fmt.Sprintf("%c %d %s %s", op, e.At, e.Class, strconv.Quote(e.Name))
	return fmt.Sprintf("%08x %s\n", crc32.Checksum([]byte(body), crcTable), body)
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// checkIndexRecord checks a record's checksum and form without
// allocating: a record it passes, parseIndexRecord reads.
func checkIndexRecord(line []byte) error {
	if len(line) < 11 || line[8] != ' ' || line[10] != ' ' || line[9] != 'S' && line[9] != 'C' {
		return errors.New("malformed")
	}
	var sum uint32
	for _, c := range line[:8] {
		switch {
		case '0' <= c && c <= '9':
			sum = sum<<4 | uint32(c-'0')
		case 'a' <= c && c <= 'f':
			sum = sum<<4 | uint32(c-'a'+10)
		default:
			return errors.New("malformed checksum")
		}
	}
	if sum != crc32.Checksum(line[9:], crcTable) {
		return errors.New("checksum")
	}
	at, rest, ok1 := bytes.Cut(line[11:], []byte{' '})
	class, quoted, ok2 := bytes.Cut(rest, []byte{' '})
	if !ok1 || !ok2 || len(at) == 0 || len(class) == 0 || len(quoted) < 2 || quoted[0] != '"' || quoted[len(quoted)-1] != '"' {
		return errors.New("malformed")
	}
	for i, c := range at {
		if (c < '0' || c > '9') && !(i == 0 && c == '-' && len(at) > 1) {
			return errors.New("malformed time")
		}
	}
	if bytes.IndexByte(quoted, '\\') >= 0 {
		if _, err := strconv.Unquote(string(quoted)); err != nil {
			return errors.New("malformed name")
		}
	} else if bytes.IndexByte(quoted[1:len(quoted)-1], '"') >= 0 {
		return errors.New("malformed name")
	}
	return nil
}

// parseIndexRecord reads a record checkIndexRecord passed.
func parseIndexRecord(line []byte) (byte, Entry) {
	atText, rest, _ := bytes.Cut(line[11:], []byte{' '})
	class, quoted, _ := bytes.Cut(rest, []byte{' '})
	at, _ := strconv.ParseInt(string(atText), 10, 64)
	e := Entry{Class: string(class), At: at}
	if bytes.IndexByte(quoted, '\\') < 0 {
		e.Name = string(quoted[1 : len(quoted)-1]) // nothing escaped
	} else {
		e.Name, _ = strconv.Unquote(string(quoted))
	}
	return line[9], e
}

// rebuild reads the pending alarm of every database of the tenant, of
// every class (served or not: the index is the tenant's).
func rebuild(ctx context.Context, o IndexOptions) (map[string]Entry, error) {
	items := map[string]Entry{}
	start := o.Clock.Now()
	dbs := 0
	err := o.Storage.Walk(ctx, o.Root, o.Tenant, o.StorageOptions, func(f storage.Found) error {
		dbs++
		unreadable := func(err error) error {
			o.Unreadable()
			o.Log.Error("alarm index rebuild: an actor database cannot be read; its alarm, if any, is not scheduled", "class", f.Class, "where", f.Where, "err", err)
			return nil
		}
		if f.Err != nil {
			return unreadable(f.Err)
		}
		at, _, ok, err := Read(ctx, f.DB)
		switch {
		case storage.KindOf(err) == abi.SQLSyntax:
			return nil // no host tables (an actor from before them): no alarm either
		case err != nil:
			return unreadable(err)
		case !ok:
			return nil
		}
		name, ok, err := o.Name(ctx, f.DB)
		if err == nil && !ok {
			err = errors.New("an alarm, but no name recorded")
		}
		if err != nil {
			return unreadable(err)
		}
		items[o.Tenant+"/"+f.Class+"/"+name] = Entry{Class: f.Class, Name: name, At: at}
		return nil
	})
	o.Log.Info("alarm index rebuilt", "databases", dbs, "alarms", len(items), "took", o.Clock.Now().Sub(start).Round(time.Millisecond))
	return items, err
}

// rewrite writes every entry to a new file, syncs it and renames it over
// the index.
func (ix *Index) rewrite() error {
	tmp := ix.path + ".new"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	w.WriteString(alarmIndexHeader)
	for _, e := range ix.items {
		w.WriteString(formatIndexRecord('S', e))
	}
	err = w.Flush()
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = os.Rename(tmp, ix.path)
	}
	if err == nil { // the rename durable
		var dir *os.File
		if dir, err = os.Open(filepath.Dir(ix.path)); err == nil {
			err = errors.Join(dir.Sync(), dir.Close())
		}
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("writing the alarm index: %w", err)
	}
	if ix.f != nil {
		ix.f.Close()
	}
	ix.f, ix.lines, ix.bad, ix.synced = f, len(ix.items), nil, ix.seq
	return nil
}

// append writes one record; the caller holds mu. After a failed write the
// file may end in a torn line, so nothing more is appended: the next start
// finds it damaged and rebuilds it, or the next rewrite replaces it.
func (ix *Index) append(op byte, key string, e Entry) error {
	if ix.bad != nil {
		return ix.bad
	}
	if _, err := io.WriteString(ix.f, formatIndexRecord(op, e)); err != nil {
		ix.bad = fmt.Errorf("alarm index: %w", err)
		return ix.bad
	}
	if op == 'S' {
		ix.items[key] = e
	} else {
		delete(ix.items, key)
	}
	ix.lines++
	ix.seq++
	return nil
}

// Class returns the entries of class's actors, by actor key: what a
// version that serves the class again arms.
func (ix *Index) Class(class string) map[string]Entry {
	<-ix.ready
	ix.mu.Lock()
	defer ix.mu.Unlock()
	out := map[string]Entry{}
	for key, e := range ix.items {
		if e.Class == class {
			out[key] = e
		}
	}
	return out
}

// Lower makes sure the actor's entry is no later than at, durably, before
// the caller commits an alarm at at.
func (ix *Index) Lower(key, class, name string, at int64) error {
	<-ix.ready
	ix.mu.Lock()
	if e, ok := ix.items[key]; ok && e.At <= at {
		ix.mu.Unlock()
		return nil
	}
	err := ix.append('S', key, Entry{Class: class, Name: name, At: at})
	seq := ix.seq
	ix.mu.Unlock()
	if err == nil {
		err = ix.sync(seq)
	}
	return err
}

// sync returns once record seq is durable; concurrent callers share one
// fsync.
func (ix *Index) sync(seq uint64) error {
	ix.syncMu.Lock()
	defer ix.syncMu.Unlock()
	ix.mu.Lock()
	if ix.synced >= seq {
		ix.mu.Unlock()
		return nil
	}
	f, target := ix.f, ix.seq
	ix.mu.Unlock()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("alarm index: %w", err)
	}
	ix.mu.Lock()
	ix.synced = max(ix.synced, target)
	ix.mu.Unlock()
	return nil
}

// Settle makes the actor's entry what it committed: at, or none. durable
// makes the actor's commit durable first; it is called only when the entry
// would move later or go.
func (ix *Index) Settle(key, class, name string, at int64, has bool, durable func() error) {
	<-ix.ready
	ix.mu.Lock()
	e, indexed := ix.items[key]
	ix.mu.Unlock()
	switch {
	case has && indexed && e.At == at, !has && !indexed:
		return
	case has && (!indexed || e.At > at):
		// Not from an event (Lower ran before every alarm it wrote): say so,
		// and index it now.
		ix.log.Error("alarm index: an actor's alarm was committed without its entry", "actor", key)
		if err := ix.Lower(key, class, name, at); err != nil {
			ix.log.Error("alarm index", "actor", key, "err", err)
		}
		return
	}
	if err := durable(); err != nil {
		ix.log.Error("alarm index: syncing the actor's database; its entry stays as it was", "actor", key, "err", err)
		return
	}
	ix.mu.Lock()
	var err error
	if has {
		err = ix.append('S', key, Entry{Class: class, Name: name, At: at})
	} else {
		err = ix.append('C', key, e)
	}
	grown := ix.overgrown()
	ix.mu.Unlock()
	if err != nil {
		ix.log.Error("alarm index: the entry stays as it was", "actor", key, "err", err)
	}
	if grown || err != nil {
		ix.compact()
	}
}

// compact rewrites the file from the entries in memory.
func (ix *Index) compact() {
	ix.syncMu.Lock()
	defer ix.syncMu.Unlock()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.bad == nil && !ix.overgrown() {
		return
	}
	if err := ix.rewrite(); err != nil {
		ix.log.Error("alarm index", "err", err)
	}
}

// Close syncs and closes the file; appends fail after it.
func (ix *Index) Close() {
	<-ix.ready
	ix.syncMu.Lock()
	defer ix.syncMu.Unlock()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.f != nil {
		ix.f.Sync()
		ix.f.Close()
		ix.f = nil
		ix.bad = errors.New("alarm index: closed")
	}
}

// overgrown reports whether the file holds so many more records than
// entries that it is worth rewriting; ix.mu is held.
func (ix *Index) overgrown() bool { return ix.lines > 2*len(ix.items)+1024 }
