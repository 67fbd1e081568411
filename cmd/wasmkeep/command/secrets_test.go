package command

import (
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/config"
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
