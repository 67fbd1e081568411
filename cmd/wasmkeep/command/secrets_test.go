package command

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/config"
	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// The prefix sealing binds is the bucket plugin's prefix setting without
// its slashes, and "" for a plugin without one.
func TestBucketPrefix(t *testing.T) {
	type withPrefix struct {
		Bucket string `koanf:"bucket"`
		Prefix string `koanf:"prefix"`
	}
	type withoutPrefix struct {
		Dir string `koanf:"dir"`
	}
	for _, c := range []struct {
		cfg  any
		want string
	}{
		{&withPrefix{Bucket: "b", Prefix: "/prod/eu/"}, "prod/eu"},
		{&withPrefix{Bucket: "b"}, ""},
		{&withoutPrefix{Dir: "/var/b"}, ""},
	} {
		if got := bucketPrefix(config.Choice{Config: c.cfg}); got != c.want {
			t.Errorf("bucketPrefix(%+v) = %q; want %q", c.cfg, got, c.want)
		}
	}
}

// A node without a key refuses to start whenever the app's current set is
// found, whatever else fails with it (issue 27 item 7), and starts when
// the app has no secrets.
func TestFollowSecretsKeyless(t *testing.T) {
	a, err := app.Parse("acme/shop")
	if err != nil {
		t.Fatal(err)
	}
	current := "apps/acme/shop/secrets/current"
	for _, c := range []struct {
		name    string
		current string // "" for none
		refused bool
	}{
		{"no secrets", "", false},
		{"the object missing", "0000000000000009\n", true},
		{"current corrupt", "seven\n", true},
	} {
		b := buckettest.NewMemory(buckettest.Flaws{})
		if c.current != "" {
			if _, err := b.Put(t.Context(), current, strings.NewReader(c.current), int64(len(c.current)), bucket.Condition{}); err != nil {
				t.Fatal(err)
			}
		}
		var opts node.Options
		_, err := followSecrets(t.Context(), &clusterNode{bucket: b}, a, nil, time.Second, &opts, slog.New(slog.DiscardHandler))
		if refused := err != nil; refused != c.refused {
			t.Errorf("%s: refused %v (%v), want %v", c.name, refused, err, c.refused)
		}
	}
}
