package deploys

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/node/access"
	"github.com/wasmkeep/wasmkeep/kernel/node/envfile"
)

var shop = app.Name{Tenant: "acme", App: "shop"}

func newBucket() *buckettest.Memory { return buckettest.NewMemory(buckettest.Flaws{}) }

func rule(t *testing.T, s string) access.Access {
	t.Helper()
	a, err := access.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func publish(t *testing.T, b bucket.Bucket, d Draft) Result {
	t.Helper()
	r, err := Publish(t.Context(), b, shop, d)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	return r
}

func object(t *testing.T, b bucket.Bucket, key string) string {
	t.Helper()
	data, _, err := get(t.Context(), b, key, maxModule)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func putRaw(t *testing.T, b bucket.Bucket, key, data string) {
	t.Helper()
	if _, err := b.Put(t.Context(), key, strings.NewReader(data), int64(len(data)), bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
}

func keyCount(t *testing.T, b bucket.Bucket, prefix string) int {
	t.Helper()
	all, err := bucket.ListAll(t.Context(), b, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return len(all)
}

// A manifest formats as it parses, its id hashes its identity and its
// previous, and the parser refuses unknown lines and rules for classes
// the version lacks, naming the object and the line.
func TestManifest(t *testing.T) {
	m := Manifest{
		Previous: "0123456789abcdef",
		Front:    Digest([]byte("f")),
		Classes:  map[string]string{"hub": Digest([]byte("h")), "chat": Digest([]byte("c"))},
		Access:   map[string]access.Access{"hub": rule(t, "existing:main,b")},
		Config:   map[string]string{"hub": Digest([]byte("cfg"))},
		Requires: map[string][]string{"hub": {"A_TOKEN", "URL"}},
	}
	text := string(m.Format())
	want := "wasmkeep-manifest 1\nprevious 0123456789abcdef\nfront " + m.Front + "\nclass chat " + m.Classes["chat"] +
		"\nclass hub " + m.Classes["hub"] + "\naccess hub existing:b,main\nconfig hub " + m.Config["hub"] + "\nrequires hub A_TOKEN,URL\n"
	if text != want {
		t.Fatalf("Format:\n%s\nwant\n%s", text, want)
	}
	back, err := ParseManifest("k", []byte(text))
	if err != nil || string(back.Format()) != text || back.ID() != m.ID() {
		t.Fatalf("round trip: %v\n%s", err, back.Format())
	}
	other := m
	other.Previous = "fedcba9876543210"
	if other.ID() == m.ID() || other.Identity() != m.Identity() || len(m.ID()) != 16 {
		t.Errorf("ids %s %s: previous must change the id, not the identity", m.ID(), other.ID())
	}
	for bad, msg := range map[string]string{
		strings.Replace(text, "class chat", "klass chat", 1):                   `k line 4: unknown line (starting "klass")`,
		strings.Replace(text, "access hub", "access nope", 1):                  `access for class "nope", which the version does not have`,
		strings.Replace(text, "existing:b,main", "existing:main,b", 1):         "k line 6: access hub: not a rule in canonical form",
		strings.Replace(text, "wasmkeep-manifest 1", "wasmkeep-manifest 2", 1): "k line 1",
		text + "class chat " + m.Classes["chat"] + "\n":                        "k line 9: a second class line for class chat",
		strings.TrimSuffix(text, "\n"):                                         "does not end with a newline",
		strings.Replace(text, "A_TOKEN,URL", "URL,A_TOKEN", 1):                 "sorted",
	} {
		if _, err := ParseManifest("k", []byte(bad)); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseManifest of\n%s= %v; want an error with %q", bad, err, msg)
		}
	}
	if c, err := ParseCurrent("c", []byte("0123456789abcdef 12\n")); err != nil || c != (Current{"0123456789abcdef", 12}) {
		t.Errorf("ParseCurrent = %v, %v", c, err)
	}
	for _, bad := range []string{"0123456789abcdef 12", "0123456789abcdef 0\n", "0123456789abcdef 012\n", "x 1\n", "0123456789abcdef 1 2\n"} {
		if _, err := ParseCurrent("c", []byte(bad)); err == nil {
			t.Errorf("ParseCurrent(%q) accepted", bad)
		}
	}
}

// A deploy keeps what it does not name, refuses rules for classes the new
// version lacks, and the same version again is a no-op; the same classes
// after another version are a new directory whose previous is that one.
func TestPublish(t *testing.T) {
	b := newBucket()
	r1 := publish(t, b, Draft{Classes: map[string][]byte{"hub": []byte("hub1"), "chat": []byte("chat1")},
		Access: map[string]access.Access{"hub": rule(t, "existing")},
		Config: map[string]map[string]string{"hub": {"URL": "u", "MODE": "x"}}})
	if r1.To.Seq != 1 || r1.From != (Current{}) || object(t, b, "apps/acme/shop/current") != r1.To.Version+" 1\n" {
		t.Fatalf("first deploy: %+v", r1)
	}
	if !slices.Contains(r1.Changes, "access hub: open -> existing") || !slices.Contains(r1.Changes, "config hub: added MODE, URL") {
		t.Errorf("first deploy's changes: %q", r1.Changes)
	}
	// Code only: the rule and configuration stay, and the seq grows.
	r2 := publish(t, b, Draft{Classes: map[string][]byte{"hub": []byte("hub2"), "chat": []byte("chat1")}})
	m2, _, err := readManifest(t.Context(), b, keysOf(shop), r2.To.Version)
	if err != nil || r2.To.Seq != 2 || m2.Previous != r1.To.Version || m2.Access["hub"].Mode != access.Existing || m2.Config["hub"] == "" {
		t.Fatalf("second deploy %+v: %+v, %v", r2, m2, err)
	}
	if !slices.Equal(r2.Changes, []string{"class hub: new code"}) {
		t.Errorf("second deploy's changes: %q", r2.Changes)
	}
	// Configuration only, without --actor: the modules are copied.
	r3 := publish(t, b, Draft{Config: map[string]map[string]string{"hub": {"URL": "v", "NEW": "n"}}})
	if !slices.Equal(r3.Changes, []string{"config hub: added NEW; changed URL; removed MODE"}) {
		t.Errorf("config deploy's changes: %q", r3.Changes)
	}
	if object(t, b, "apps/acme/shop/"+r3.To.Version+"/hub.wasm") != "hub2" {
		t.Error("the kept module was not copied")
	}
	if object(t, b, "apps/acme/shop/"+r3.To.Version+"/hub.config") != "NEW='n'\nURL='v'\n" {
		t.Error("the .config object is not the canonical values")
	}
	// The same again: nothing written.
	before := keyCount(t, b, "apps/")
	r4 := publish(t, b, Draft{Classes: map[string][]byte{"hub": []byte("hub2"), "chat": []byte("chat1")}})
	if !r4.NoOp || r4.To != r3.To || keyCount(t, b, "apps/") != before {
		t.Errorf("redeploy of the current version: %+v", r4)
	}
	// A rule for a class the new version lacks is refused, and nothing
	// is written.
	for _, d := range []Draft{
		{Access: map[string]access.Access{"hbu": rule(t, "internal")}},
		{Classes: map[string][]byte{"chat": []byte("chat1")}, Config: map[string]map[string]string{"hub": {"A": "b"}}},
		{Requires: map[string][]string{"nope": {"A"}}},
	} {
		if _, err := Publish(t.Context(), b, shop, d); err == nil || !strings.Contains(err.Error(), "which the new version does not have") {
			t.Errorf("Publish(%+v) = %v", d, err)
		}
	}
	if keyCount(t, b, "apps/") != before {
		t.Error("a refused deploy wrote to the bucket")
	}
	// Dropping a class drops its rule; a rename is warned about.
	r5 := publish(t, b, Draft{Classes: map[string][]byte{"hub2": []byte("hub2"), "chat": []byte("chat1")}})
	if !slices.Contains(r5.Changes, "class hub: removed, and its rule existing with it") || len(r5.Warnings) != 1 || !strings.Contains(r5.Warnings[0], "hub2 is new and open") {
		t.Errorf("rename: %q %q", r5.Changes, r5.Warnings)
	}
	// Back to the classes of r4: a new directory, whose previous is r5's.
	r6 := publish(t, b, Draft{Classes: map[string][]byte{"hub": []byte("hub2"), "chat": []byte("chat1")},
		Access: map[string]access.Access{"hub": rule(t, "existing")}, Config: map[string]map[string]string{"hub": {"URL": "v", "NEW": "n"}}})
	m6, _, _ := readManifest(t.Context(), b, keysOf(shop), r6.To.Version)
	if r6.To.Version == r3.To.Version || m6.Previous != r5.To.Version || r6.To.Seq != 5 {
		t.Errorf("redeploy after another version: %+v, previous %s", r6, m6.Previous)
	}
}

// conflicting runs another deploy just before the first write of current
// that it sees: a deploy racing another.
type conflicting struct {
	*buckettest.Memory
	race func()
}

func (c *conflicting) Put(ctx context.Context, key string, body io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	if race := c.race; strings.HasSuffix(key, "/current") && race != nil {
		c.race = nil
		race()
	}
	return c.Memory.Put(ctx, key, body, size, cond)
}

// Two deploys from the same current: one wins, the other fails with
// ErrConflict and loses nothing (its rule is not silently dropped).
func TestPublishConflict(t *testing.T) {
	b := &conflicting{Memory: newBucket()}
	r1 := publish(t, b, Draft{Classes: map[string][]byte{"hub": []byte("v1")}})
	var raced Result
	b.race = func() { raced = publish(t, b.Memory, Draft{Classes: map[string][]byte{"hub": []byte("v2")}}) }
	_, err := Publish(t.Context(), b, shop, Draft{Access: map[string]access.Access{"hub": rule(t, "internal")}})
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "apps/acme/shop/current") {
		t.Fatalf("the losing deploy: %v", err)
	}
	cur, _, _, _ := readCurrent(t.Context(), b, keysOf(shop))
	if cur != raced.To || cur.Seq != r1.To.Seq+1 {
		t.Errorf("current %v; want the winner's %v", cur, raced.To)
	}
	// The first deploy of an app races too: IfAbsent.
	b2 := &conflicting{Memory: newBucket()}
	// The other's objects are there already: without a floor it would be
	// refused as a lost current.
	b2.race = func() { publish(t, b2.Memory, Draft{Classes: map[string][]byte{"a": []byte("x")}, SeqFloor: 1}) }
	if _, err := Publish(t.Context(), b2, shop, Draft{Classes: map[string][]byte{"a": []byte("y")}}); !errors.Is(err, ErrConflict) {
		t.Errorf("two first deploys: %v", err)
	}
}

// An object already under a version's key with other content is refused,
// not used.
func TestPublishRefusesAlteredObject(t *testing.T) {
	b := newBucket()
	m := Manifest{Classes: map[string]string{"hub": Digest([]byte("code"))}}
	putRaw(t, b, "apps/acme/shop/"+m.ID()+"/hub.wasm", "other")
	_, err := Publish(t.Context(), b, shop, Draft{Classes: map[string][]byte{"hub": []byte("code")}})
	if err == nil || !strings.Contains(err.Error(), m.ID()+"/hub.wasm exists with other content") {
		t.Errorf("Publish = %v", err)
	}
	if keyCount(t, b, "apps/acme/shop/current") != 0 {
		t.Error("current was written")
	}
}

// A rollback makes previous current with a higher seq; one that reopens a
// class needs allowReopen.
func TestRollback(t *testing.T) {
	b := newBucket()
	if _, err := Rollback(t.Context(), b, shop, false); !errors.Is(err, ErrNothingDeployed) {
		t.Errorf("rollback of nothing: %v", err)
	}
	r1 := publish(t, b, Draft{Classes: map[string][]byte{"hub": []byte("v1"), "mon": []byte("m")}, Access: map[string]access.Access{"mon": rule(t, "existing:a")}})
	if _, err := Rollback(t.Context(), b, shop, false); err == nil || !strings.Contains(err.Error(), "is its first") {
		t.Errorf("rollback of the first: %v", err)
	}
	r2 := publish(t, b, Draft{Classes: map[string][]byte{"hub": []byte("v2"), "mon": []byte("m")}})
	back, err := Rollback(t.Context(), b, shop, false)
	if err != nil || back.To != (Current{r1.To.Version, 3}) || back.From != r2.To || !slices.Equal(back.Changes, []string{"class hub: new code"}) {
		t.Fatalf("rollback: %+v, %v", back, err)
	}
	// Harden mon, then roll back: that reopens it.
	publish(t, b, Draft{Access: map[string]access.Access{"mon": rule(t, "internal"), "hub": rule(t, "existing:x,y")}})
	publish(t, b, Draft{Access: map[string]access.Access{"hub": rule(t, "existing:x")}})
	_, err = Rollback(t.Context(), b, shop, false)
	if err == nil || !strings.Contains(err.Error(), "hub: existing:x -> existing:x,y") || !strings.Contains(err.Error(), "--allow-reopen") {
		t.Fatalf("a rollback growing a list: %v", err)
	}
	r, err := Rollback(t.Context(), b, shop, true)
	if err != nil || r.To.Seq != 6 {
		t.Fatalf("allowed rollback: %+v, %v", r, err)
	}
	_, err = Rollback(t.Context(), b, shop, false)
	if err == nil || !strings.Contains(err.Error(), "mon: internal -> existing:a") {
		t.Errorf("a rollback from internal: %v", err)
	}
	if cur, _, _, _ := readCurrent(t.Context(), b, keysOf(shop)); cur.Seq != 6 {
		t.Errorf("a refused rollback moved current to %v", cur)
	}
}

// Load writes modules under their digest and parses configuration; an
// altered object, or a current naming a missing version, is refused,
// naming it.
func TestLoad(t *testing.T) {
	b := newBucket()
	r := publish(t, b, Draft{Classes: map[string][]byte{"hub": []byte("hub"), "chat": []byte("chat")}, Front: []byte("front"),
		Access: map[string]access.Access{"hub": rule(t, "internal")}, Config: map[string]map[string]string{"hub": {"URL": "it's"}},
		Requires: map[string][]string{"hub": {"URL", "A", "URL"}}})
	dir := t.TempDir()
	l, err := Load(t.Context(), b, shop, dir)
	if err != nil {
		t.Fatal(err)
	}
	hub := l.Classes["hub"]
	if l.Version != r.To.Version || l.Seq != 1 || hub.Access.String() != "internal" || l.Classes["chat"].Access.String() != "open" ||
		!maps.Equal(hub.Config, map[string]string{"URL": "it's"}) || !slices.Equal(hub.Requires, []string{"A", "URL"}) ||
		hub.Digest != Digest([]byte("hub")) || hub.Module != dir+"/"+hub.Digest+".wasm" || l.Classes["chat"].Config != nil {
		t.Fatalf("Load = %+v", l)
	}
	for path, want := range map[string]string{hub.Module: "hub", l.Front: "front"} {
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Errorf("%s holds %q, %v", path, got, err)
		}
	}
	key := "apps/acme/shop/" + r.To.Version + "/chat.wasm"
	putRaw(t, b, key, "evil")
	if _, err := Load(t.Context(), b, shop, t.TempDir()); err == nil || !strings.Contains(err.Error(), key+": its SHA-256 is not the manifest's") {
		t.Errorf("Load of an altered module: %v", err)
	}
	putRaw(t, b, "apps/acme/shop/current", "0123456789abcdef 2\n")
	if _, err := Load(t.Context(), b, shop, t.TempDir()); !errors.Is(err, ErrMissingVersion) || !strings.Contains(err.Error(), "names 0123456789abcdef") {
		t.Errorf("Load of a missing version: %v", err)
	}
}

// List shows current's line newest first, then the other directories.
func TestList(t *testing.T) {
	b := newBucket()
	r1 := publish(t, b, Draft{Classes: map[string][]byte{"a": []byte("1")}})
	r2 := publish(t, b, Draft{Classes: map[string][]byte{"a": []byte("2")}})
	if _, err := Rollback(t.Context(), b, shop, false); err != nil {
		t.Fatal(err)
	}
	putRaw(t, b, "apps/acme/shop/0000000000000000/manifest", "wasmkeep-manifest 1\nbogus\n")
	cur, vs, err := List(t.Context(), b, shop)
	if err != nil || cur != (Current{r1.To.Version, 3}) || len(vs) != 3 {
		t.Fatalf("List = %v %+v %v", cur, vs, err)
	}
	if vs[0].ID != r1.To.Version || !vs[0].Current || !vs[0].InLine || vs[1].ID != "0000000000000000" || vs[1].InLine ||
		vs[1].Err == nil || !strings.Contains(vs[1].Err.Error(), "0000000000000000/manifest line 2") ||
		vs[2].ID != r2.To.Version || vs[2].InLine || vs[2].Err != nil {
		t.Errorf("List = %+v", vs)
	}
}

// Collect deletes only versions of current's line older than the Keep
// before current and the retention, never one a node serves, and stops
// when current changes.
func TestCollect(t *testing.T) {
	b := newBucket()
	var ids []string
	for i := range 9 {
		ids = append(ids, publish(t, b, Draft{Classes: map[string][]byte{"a": {byte(i)}}}).To.Version)
	}
	// A version off the line: rolled back from.
	off := publish(t, b, Draft{Classes: map[string][]byte{"a": []byte("off")}}).To.Version
	if _, err := Rollback(t.Context(), b, shop, false); err != nil {
		t.Fatal(err)
	}
	// ids[8] is current: ids[3..7] are kept, ids[0..2] candidates.
	got, err := Collect(t.Context(), b, shop, time.Hour, time.Now(), nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("within the retention: %v, %v", got, err)
	}
	got, err = Collect(t.Context(), b, shop, time.Hour, time.Now().Add(2*time.Hour), map[string]bool{ids[1]: true})
	if err != nil || !slices.Equal(got, []string{ids[0], ids[2]}) {
		t.Fatalf("Collect = %v, %v; want %v", got, err, []string{ids[0], ids[2]})
	}
	for _, v := range []string{ids[0], ids[2]} {
		if n := keyCount(t, b, "apps/acme/shop/"+v+"/"); n != 0 {
			t.Errorf("%s: %d keys left", v, n)
		}
	}
	for _, v := range append(slices.Clone(ids[3:]), ids[1], off) {
		if keyCount(t, b, "apps/acme/shop/"+v+"/manifest") != 1 {
			t.Errorf("%s was collected", v)
		}
	}
	// ids[1] is past a collected version now: the line ends at ids[2]'s
	// missing manifest, so nothing past it is a candidate.
	if got, err := Collect(t.Context(), b, shop, 0, time.Now(), nil); err != nil || len(got) != 0 {
		t.Errorf("after a pass: %v, %v", got, err)
	}
}

// Collect stops when current changes under it.
func TestCollectStopsWhenCurrentChanges(t *testing.T) {
	mem := newBucket()
	for i := range 8 {
		publish(t, mem, Draft{Classes: map[string][]byte{"a": {byte(i)}}})
	}
	b := &deployOnGet{Memory: mem, t: t}
	got, err := Collect(t.Context(), b, shop, 0, time.Now(), nil)
	if err != nil || len(got) != 0 {
		t.Errorf("Collect = %v, %v; want nothing deleted", got, err)
	}
}

// deployOnGet deploys once current has been read once, as if a deploy
// landed during a collection pass.
type deployOnGet struct {
	*buckettest.Memory
	t     *testing.T
	reads int
}

func (d *deployOnGet) Get(ctx context.Context, key string, opts bucket.GetOptions) (*bucket.Object, error) {
	if strings.HasSuffix(key, "/current") {
		if d.reads++; d.reads == 2 {
			publish(d.t, d.Memory, Draft{Classes: map[string][]byte{"a": []byte("new")}})
		}
	}
	return d.Memory.Get(ctx, key, opts)
}

// A class may be called front: the front's module has a key no class's
// module can have.
func TestFrontKeyIsNoClassKey(t *testing.T) {
	k := keysOf(app.Name{Tenant: "acme", App: "shop"})
	if k.front("0123456789abcdef") == k.module("0123456789abcdef", "front") {
		t.Fatalf("the front and a class named front share %s", k.front("0123456789abcdef"))
	}
}

// huge says a key's object is size bytes, with a body that fails the test
// when read: an object over its cap must be refused before its body is.
type huge struct {
	*buckettest.Memory
	t    *testing.T
	key  string
	size int64
}

type unread struct{ t *testing.T }

func (u unread) Read([]byte) (int, error) {
	u.t.Error("the body of an object over its cap was read")
	return 0, io.EOF
}
func (unread) Close() error { return nil }

func (h *huge) Get(ctx context.Context, key string, opts bucket.GetOptions) (*bucket.Object, error) {
	o, err := h.Memory.Get(ctx, key, opts)
	if err == nil && key == h.key {
		o.Body.Close()
		o.Body, o.Size = unread{h.t}, h.size
	}
	return o, err
}

// Each kind of object is read only up to its cap, checked on the size the
// bucket gives before the body is read and on the bytes themselves; the
// error names the key and the cap. A deploy refuses what nodes would.
func TestObjectCaps(t *testing.T) {
	mem := newBucket()
	r := publish(t, mem, Draft{Classes: map[string][]byte{"hub": []byte("hub")}, Front: []byte("front"),
		Config: map[string]map[string]string{"hub": {"A": "b"}}})
	root := "apps/acme/shop/"
	for key, max := range map[string]int64{
		root + "current":                     1 << 10,
		root + r.To.Version + "/manifest":    1 << 20,
		root + r.To.Version + "/hub.config":  envfile.MaxSize,
		root + r.To.Version + "/hub.wasm":    256 << 20,
		root + r.To.Version + "/_front.wasm": 256 << 20,
	} {
		b := &huge{Memory: mem, t: t, key: key, size: max + 1}
		want := fmt.Sprintf("%s: over its cap of %d bytes", key, max)
		if _, err := Load(t.Context(), b, shop, t.TempDir()); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load with %s of %d bytes: %v; want %q", key, max+1, err, want)
		}
	}
	// A size that lies: the bytes past the cap are not read.
	putRaw(t, mem, root+"current", r.To.String()+"\n"+strings.Repeat("x", 2<<10))
	if _, err := Load(t.Context(), lyingSize{mem}, shop, t.TempDir()); err == nil || !strings.Contains(err.Error(), "over its cap of 1024 bytes") {
		t.Errorf("Load of a current larger than its size says: %v", err)
	}
	putRaw(t, mem, root+"current", r.To.String()+"\n")
	bigConfig := map[string]string{"A": strings.Repeat("x", envfile.MaxSize)}
	if _, err := Publish(t.Context(), mem, shop, Draft{Config: map[string]map[string]string{"hub": bigConfig}}); err == nil || !strings.Contains(err.Error(), "class hub's configuration is") {
		t.Errorf("Publish of a configuration over the cap: %v", err)
	}
}

// lyingSize says every object is 1 byte.
type lyingSize struct{ *buckettest.Memory }

func (l lyingSize) Get(ctx context.Context, key string, opts bucket.GetOptions) (*bucket.Object, error) {
	o, err := l.Memory.Get(ctx, key, opts)
	if err == nil {
		o.Size = 1
	}
	return o, err
}

// A current naming a missing version is repaired by a deploy of the whole
// class table, as a first version with the next seq, current still
// replaced on condition; a deploy keeping classes and a rollback refuse,
// saying to deploy the classes again.
func TestPublishOverMissingVersion(t *testing.T) {
	b := &conflicting{Memory: newBucket()}
	publish(t, b, Draft{Classes: map[string][]byte{"hub": []byte("v1")}})
	r2 := publish(t, b, Draft{Classes: map[string][]byte{"hub": []byte("v2")}, Access: map[string]access.Access{"hub": rule(t, "internal")}})
	if err := b.Delete(t.Context(), "apps/acme/shop/"+r2.To.Version+"/manifest", bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Publish(t.Context(), b, shop, Draft{Access: map[string]access.Access{"hub": rule(t, "existing")}}); !errors.Is(err, ErrMissingVersion) || !strings.Contains(err.Error(), "--actor for each class") {
		t.Errorf("a deploy keeping the missing version's classes: %v", err)
	}
	if _, err := Rollback(t.Context(), b, shop, false); !errors.Is(err, ErrMissingVersion) || !strings.Contains(err.Error(), "deploy the app's classes again") {
		t.Errorf("a rollback from a missing version: %v", err)
	}
	// Current is still replaced IfVersion the one read.
	b.race = func() { putRaw(t, b.Memory, "apps/acme/shop/current", r2.To.Version+" 7\n") }
	if _, err := Publish(t.Context(), b, shop, Draft{Classes: map[string][]byte{"hub": []byte("v3")}}); !errors.Is(err, ErrConflict) {
		t.Fatalf("a repair racing another write of current: %v", err)
	}
	r := publish(t, b, Draft{Classes: map[string][]byte{"hub": []byte("v3")}})
	m, _, err := readManifest(t.Context(), b, keysOf(shop), r.To.Version)
	if err != nil || r.To.Seq != 8 || m.Previous != "" || len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "version "+r2.To.Version+", which is not in the bucket") {
		t.Fatalf("the repair: %+v, manifest %+v, %v", r, m, err)
	}
	if _, err := Load(t.Context(), b, shop, t.TempDir()); err != nil {
		t.Errorf("Load after the repair: %v", err)
	}
}

// A first deploy of an app whose current is gone but whose versions are
// there is refused, saying why and naming --seq-floor; with a floor it
// proceeds under that seq, and a floor above the next seq raises it.
func TestPublishLostCurrent(t *testing.T) {
	b := newBucket()
	for i := range 3 {
		publish(t, b, Draft{Classes: map[string][]byte{"hub": {byte(i)}}})
	}
	if err := b.Delete(t.Context(), "apps/acme/shop/current", bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
	before := keyCount(t, b, "apps/")
	_, err := Publish(t.Context(), b, shop, Draft{Classes: map[string][]byte{"hub": []byte("new")}})
	for _, want := range []string{"no apps/acme/shop/current", "restored from an older backup", "below the seq its actors recorded", "--seq-floor", "cluster status"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a first deploy over versions: %v; want it to say %q", err, want)
		}
	}
	if keyCount(t, b, "apps/") != before {
		t.Error("the refused deploy wrote to the bucket")
	}
	r := publish(t, b, Draft{Classes: map[string][]byte{"hub": []byte("new")}, SeqFloor: 10})
	if r.To.Seq != 10 || r.From != (Current{}) || object(t, b, "apps/acme/shop/current") != r.To.Version+" 10\n" {
		t.Fatalf("with --seq-floor 10: %+v", r)
	}
	if r := publish(t, b, Draft{Classes: map[string][]byte{"hub": []byte("next")}, SeqFloor: 5}); r.To.Seq != 11 {
		t.Errorf("a floor below the next seq: %+v", r)
	}
	if r := publish(t, b, Draft{Classes: map[string][]byte{"hub": []byte("then")}, SeqFloor: 20}); r.To.Seq != 20 {
		t.Errorf("a floor above the next seq: %+v", r)
	}
	// A first deploy that stopped before current is tried again: its own
	// directory is no lost current.
	b2 := newBucket()
	m := Manifest{Classes: map[string]string{"hub": Digest([]byte("hub"))}}
	putRaw(t, b2, "apps/acme/shop/"+m.ID()+"/hub.wasm", "hub")
	if r := publish(t, b2, Draft{Classes: map[string][]byte{"hub": []byte("hub")}}); r.To != (Current{m.ID(), 1}) {
		t.Errorf("a first deploy tried again: %+v", r)
	}
}

// The app's secrets (ADR 1050) sit beside its versions and are not one: a
// first deploy is not refused as a lost current because of them, and List
// does not show them.
func TestSecretsAreNotAVersion(t *testing.T) {
	b := newBucket()
	for _, key := range []string{shop.SecretsRoot() + "current", shop.SecretsRoot() + "0000000000000001"} {
		if _, err := b.Put(t.Context(), key, strings.NewReader("x"), 1, bucket.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	r := publish(t, b, Draft{Classes: map[string][]byte{"a": []byte("v1")}})
	_, versions, err := List(t.Context(), b, shop)
	if err != nil || len(versions) != 1 || versions[0].ID != r.To.Version {
		t.Errorf("List = %+v, %v; want only %s", versions, err, r.To.Version)
	}
}
