package deploys

import (
	"strings"
	"testing"
	"time"
)

// expire-after-idle: whole seconds, minutes, hours or days of at least an
// hour and at most what the manifest line holds (213505d, which overflowed
// to 24.4 h, is refused: fails without ParseIdle's cap); a manifest line "expire CLASS SECONDS" only for a class with a
// limit (a version without one keeps its id), read back as written; a
// draft keeps a base's limit, sets one, and 0 removes it.
func TestExpireAfterIdle(t *testing.T) {
	for s, want := range map[string]time.Duration{"3600s": time.Hour, "90m": 90 * time.Minute, "36h": 36 * time.Hour, "7d": 7 * 24 * time.Hour, "4294967295s": MaxIdle} {
		if got, err := ParseIdle(s); err != nil || got != want {
			t.Errorf("ParseIdle(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "59m", "1w", "1.5h", "-2h", "h", "2 h", "4294967296s", "49711d", "213505d", "4294967295d"} {
		if _, err := ParseIdle(s); err == nil {
			t.Errorf("ParseIdle(%q) accepted", s)
		}
	}
	digest := strings.Repeat("a", 64)
	base := Manifest{Classes: map[string]string{"cart": digest, "room": digest}}
	id := base.ID()
	m, err := Draft{Expire: map[string]time.Duration{"cart": 7 * 24 * time.Hour}}.apply(base)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(m.Format()), "\nexpire cart 604800\n") || m.ID() == id {
		t.Fatalf("a version with a limit:\n%s", m.Format())
	}
	back, err := ParseManifest("k", m.Format())
	if err != nil || back.Expire["cart"] != 7*24*time.Hour || back.ID() != m.ID() {
		t.Fatalf("read back: %+v %v", back.Expire, err)
	}
	kept, err := Draft{}.apply(back)
	if err != nil || kept.Expire["cart"] != 7*24*time.Hour {
		t.Fatalf("a later deploy that does not name it: %+v %v", kept.Expire, err)
	}
	removed, err := Draft{Expire: map[string]time.Duration{"cart": 0}}.apply(back)
	if err != nil || len(removed.Expire) != 0 || removed.ID() != id {
		t.Fatalf("removed: %+v %v (id %s, want %s)", removed.Expire, err, removed.ID(), id)
	}
	if _, err := (Draft{Expire: map[string]time.Duration{"nope": time.Hour}}).apply(base); err == nil {
		t.Error("a limit for a class the version does not have was taken")
	}
	for _, bad := range []string{"expire cart 60", "expire cart 1h", "expire nope 3600"} {
		text := "wasmkeep-manifest 1\nclass cart " + digest + "\n" + bad + "\n"
		if _, err := ParseManifest("k", []byte(text)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
