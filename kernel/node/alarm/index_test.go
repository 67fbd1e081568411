package alarm

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
)

func newTestIndex(t testing.TB) *Index {
	ix := &Index{path: filepath.Join(t.TempDir(), "default"), log: slog.Default(), clock: clock.Real, tenant: "default", items: map[string]Entry{}, ready: make(chan struct{})}
	close(ix.ready)
	if err := ix.rewrite(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ix.Close)
	return ix
}

func nothingToSync() error { return nil }

// The entries a file holds after lower and settle, read back as a start
// reads them; every name survives (spaces, quotes, bytes that are not
// UTF-8).
func TestAlarmIndexRecords(t *testing.T) {
	ix := newTestIndex(t)
	names := []string{"a", "room 1", `"quoted"`, "\xff\xfe", strings.Repeat("é", 128)}
	for i, name := range names {
		if err := ix.Lower("default/c/"+name, "c", name, int64(1000+i)); err != nil {
			t.Fatal(err)
		}
	}
	ix.Lower("default/c/a", "c", "a", 2000)                               // later: no record
	ix.Settle("default/c/a", "c", "a", 5000, true, nothingToSync)         // moved later
	ix.Settle("default/c/room 1", "c", "room 1", 0, false, nothingToSync) // removed
	ix.Lower(`default/c/"quoted"`, "c", `"quoted"`, 10)                   // earlier
	items, lines, err := readAlarmIndex(ix.path, "default")
	if err != nil {
		t.Fatal(err)
	}
	if lines != len(names)+3 {
		t.Errorf("%d records, want %d", lines, len(names)+3)
	}
	want := map[string]int64{"a": 5000, `"quoted"`: 10, "\xff\xfe": 1003, strings.Repeat("é", 128): 1004}
	if len(items) != len(want) {
		t.Errorf("entries %v, want %v", items, want)
	}
	for name, at := range want {
		if e := items["default/c/"+name]; e.At != at || e.Name != name || e.Class != "c" {
			t.Errorf("%q: %+v, want at %d", name, e, at)
		}
	}
}

// settle moves an entry later or removes it only after the actor's
// database is synced, and not at all if that fails.
func TestAlarmIndexSettleSyncsFirst(t *testing.T) {
	ix := newTestIndex(t)
	ix.Lower("default/c/a", "c", "a", 1000)
	var order []string
	ix.Settle("default/c/a", "c", "a", 0, false, func() error {
		order = append(order, "sync")
		if _, ok := ix.entries()["default/c/a"]; !ok {
			t.Error("the entry went before the database was synced")
		}
		return fmt.Errorf("disk gone")
	})
	if len(order) != 1 {
		t.Fatal("settle did not sync the database")
	}
	if e, ok := ix.entries()["default/c/a"]; !ok || e.At != 1000 {
		t.Errorf("after a failed sync the entry is %+v, %v; want it kept", e, ok)
	}
}

// A damaged record (its checksum) and a missing header are damage; a last
// line cut short is not, but it makes the file rewritten before appends.
func TestAlarmIndexDamage(t *testing.T) {
	ix := newTestIndex(t)
	ix.Lower("default/c/a", "c", "a", 1000)
	ix.Lower("default/c/b", "c", "b", 1000)
	good, _ := os.ReadFile(ix.path)
	for what, data := range map[string]string{
		"flipped byte": strings.Replace(string(good), `"a"`, `"A"`, 1),
		"no header":    strings.TrimPrefix(string(good), alarmIndexHeader),
		"bad op":       string(good) + formatIndexRecord('X', Entry{Class: "c", Name: "x"}),
		"no class":     string(good) + formatIndexRecord('S', Entry{Name: "x"}),
	} {
		os.WriteFile(ix.path, []byte(data), 0o600)
		if _, _, err := readAlarmIndex(ix.path, "default"); err == nil || !strings.Contains(err.Error(), "damaged") {
			t.Errorf("%s: %v, want damaged", what, err)
		}
	}
	os.WriteFile(ix.path, append(good, "1234"...), 0o600)
	items, lines, err := readAlarmIndex(ix.path, "default")
	if err != nil || len(items) != 2 || lines != -1 {
		t.Errorf("torn last line: %d entries, lines %d, %v; want 2, -1 (rewrite), no error", len(items), lines, err)
	}
}

// BenchmarkAlarmIndex100k reads an index of 100,000 entries: check is what
// a start does before it serves, read all of it (check and parse).
func BenchmarkAlarmIndex100k(b *testing.B) {
	ix := newTestIndex(b)
	for i := range 100_000 {
		ix.items[fmt.Sprintf("default/probe/a-%d", i)] = Entry{Class: "probe", Name: fmt.Sprintf("a-%d", i), At: 1796399302970 + int64(i)}
	}
	if err := ix.rewrite(); err != nil {
		b.Fatal(err)
	}
	b.Run("check", func(b *testing.B) {
		for b.Loop() {
			data, err := os.ReadFile(ix.path)
			if err != nil {
				b.Fatal(err)
			}
			if _, _, err := checkAlarmIndex(ix.path, data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read", func(b *testing.B) {
		for b.Loop() {
			if items, _, err := readAlarmIndex(ix.path, "default"); err != nil || len(items) != 100_000 {
				b.Fatal(len(items), err)
			}
		}
	})
}

// readAlarmIndex checks and parses the file at path.
func readAlarmIndex(path, tenant string) (map[string]Entry, int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	body, torn, err := checkAlarmIndex(path, data)
	if err != nil {
		return nil, 0, err
	}
	items, lines := parseAlarmIndex(body, tenant)
	if torn {
		lines = -1
	}
	return items, lines, nil
}

// entries returns the index's entries.
func (ix *Index) entries() map[string]Entry {
	<-ix.ready
	ix.mu.Lock()
	defer ix.mu.Unlock()
	out := make(map[string]Entry, len(ix.items))
	for k, e := range ix.items {
		out[k] = e
	}
	return out
}
