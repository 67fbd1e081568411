package s3bucket

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestResolve(t *testing.T) {
	base := func() Config { c := *NewConfig(); c.Bucket = "b"; return c }
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		env  map[string]string
		want settings
		err  string
	}{
		{name: "aws, region from the environment", env: map[string]string{"AWS_REGION": "eu-west-3"},
			want: settings{region: "eu-west-3"}},
		{name: "the book's AWS_ENDPOINT, path style by default", env: map[string]string{"AWS_ENDPOINT": "https://acct.r2.cloudflarestorage.com", "AWS_REGION": "auto"},
			want: settings{endpoint: "https://acct.r2.cloudflarestorage.com", region: "auto", pathStyle: true}},
		{name: "plugins.yaml wins over the environment", cfg: func(c *Config) { c.Endpoint = "https://s3.bhs.io.cloud.ovh.net"; c.Region = "bhs" },
			env:  map[string]string{"AWS_ENDPOINT": "https://elsewhere", "AWS_REGION": "auto"},
			want: settings{endpoint: "https://s3.bhs.io.cloud.ovh.net", region: "bhs", pathStyle: true}},
		{name: "the SDK's endpoint variables", env: map[string]string{"AWS_ENDPOINT_URL": "https://generic", "AWS_ENDPOINT_URL_S3": "https://s3only"},
			want: settings{endpoint: "https://s3only", pathStyle: true}},
		{name: "virtual-hosted requests asked for", env: map[string]string{"AWS_ENDPOINT": "https://minio.example", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true"},
			want: settings{endpoint: "https://minio.example"}},
		{name: "path style forced on AWS", cfg: func(c *Config) { c.PathStyle = "path" }, want: settings{pathStyle: true}},
		{name: "prefix", cfg: func(c *Config) { c.Prefix = "/prod/eu/" }, want: settings{prefix: "prod/eu/"}},
		{name: "http with AWS_ALLOW_HTTP", env: map[string]string{"AWS_ENDPOINT": "http://10.0.0.5:9000", "AWS_ALLOW_HTTP": "true"},
			want: settings{endpoint: "http://10.0.0.5:9000", pathStyle: true}},
		{name: "http with allow_http", cfg: func(c *Config) { c.Endpoint = "http://127.0.0.1:7070"; c.AllowHTTP = true },
			want: settings{endpoint: "http://127.0.0.1:7070", pathStyle: true}},

		{name: "http refused", env: map[string]string{"AWS_ENDPOINT": "http://10.0.0.5:9000"},
			err: `AWS_ENDPOINT "http://10.0.0.5:9000" is plain HTTP: credentials and data would cross the network unencrypted; use https, or set AWS_ALLOW_HTTP=true`},
		{name: "http refused though AWS_ALLOW_HTTP=false", cfg: func(c *Config) { c.Endpoint = "http://h:1" }, env: map[string]string{"AWS_ALLOW_HTTP": "false"},
			err: `endpoint "http://h:1" is plain HTTP`},
		{name: "bad AWS_ALLOW_HTTP", env: map[string]string{"AWS_ALLOW_HTTP": "yes please"}, err: `AWS_ALLOW_HTTP is "yes please", want true or false`},
		{name: "endpoint without scheme", cfg: func(c *Config) { c.Endpoint = "minio:9000" }, err: `endpoint "minio:9000": want http(s)://HOST[:PORT]`},
		{name: "no bucket", cfg: func(c *Config) { c.Bucket = "" }, err: "bucket is not set: name the bucket in plugins.yaml (bucket.s3.bucket)"},
		{name: "bucket as URL", cfg: func(c *Config) { c.Bucket = "s3://b/p" }, err: `bucket "s3://b/p" is a name, not a URL or path`},
		{name: "bad prefix", cfg: func(c *Config) { c.Prefix = "a//b" }, err: "prefix: bucket: invalid key"},
		{name: "longest prefix", cfg: func(c *Config) { c.Prefix = strings.Repeat("p", 63) + "/" }, want: settings{prefix: strings.Repeat("p", 63) + "/"}},
		{name: "long prefix", cfg: func(c *Config) { c.Prefix = strings.Repeat("p", 64) },
			err: "prefix \"" + strings.Repeat("p", 64) + "\" is 65 bytes with its /, at most 64: S3 allows keys of 1,024 bytes and the kernel's may take 960"},
		{name: "bad path style", cfg: func(c *Config) { c.PathStyle = "yes" }, err: `path_style is "yes", want auto, path or virtual`},
		{name: "no timeout", cfg: func(c *Config) { c.RequestTimeout = 0 }, err: "request_timeout is 0s, want more than 0"},
		{name: "no attempts", cfg: func(c *Config) { c.MaxAttempts = 0 }, err: "max_attempts is 0, want at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			got, err := resolve(cfg, func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestNewNeedsARegion(t *testing.T) {
	for _, k := range []string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_CONFIG_FILE"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	cfg := NewConfig()
	cfg.Bucket = "b"
	_, err := New(cfg)
	if err == nil || !strings.Contains(err.Error(), "no region: set region in plugins.yaml or AWS_REGION") {
		t.Fatalf("New without a region: %v", err)
	}
	cfg.Region = "us-east-1"
	if _, err := New(cfg); err != nil {
		t.Fatal(err)
	}
	if d := NewConfig().RequestTimeout; d != 30*time.Second {
		t.Fatalf("default request_timeout %s, want the book's 30s", d)
	}
}

// --bucket s3://BUCKET[/PREFIX] sets the bucket and the prefix and keeps the
// other settings; anything an S3 URL cannot mean here is refused, naming it.
func TestFromURL(t *testing.T) {
	for raw, want := range map[string]string{
		"s3://demo":             "demo|",
		"s3://demo/":            "demo|",
		"s3://demo/prod/eu":     "demo|prod/eu",
		"s3://demo/prod/":       "demo|prod",
		"s3:demo":               "want s3://BUCKET",
		"s3:///prefix":          "want s3://BUCKET",
		"s3://key:secret@demo":  "without credentials",
		"s3://demo:9000/x":      "without credentials, port",
		"s3://demo/x?region=eu": "query",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		cfg := NewConfig()
		cfg.Region = "kept"
		err = FromURL(u, cfg)
		got := cfg.Bucket + "|" + cfg.Prefix
		if err != nil {
			got = err.Error()
			if strings.Contains(got, "secret") {
				t.Errorf("%s: the error shows the secret: %s", raw, got)
			}
		}
		if !strings.Contains(got, want) {
			t.Errorf("%s: %s, want %s", raw, got, want)
		}
		if err == nil && cfg.Region != "kept" {
			t.Errorf("%s: region changed to %q", raw, cfg.Region)
		}
	}
}
