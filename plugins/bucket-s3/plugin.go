// Package s3bucket is the bucket/v1 plugin on an S3-compatible store,
// through gocloud.dev/blob's s3blob: conditional creates (If-None-Match: *)
// and replaces (If-Match), ETags as version tokens, bounded retries of
// transient faults and a per-request timeout. See README.md for its settings,
// the providers it was checked against and what a caller sees on a retry.
package s3bucket

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob/s3blob"

	"github.com/wasmkeep/wasmkeep/internal/fallbackroots"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

// Config is the plugin's configuration (plugins.yaml, strictly decoded). A
// setting left empty here falls back to its AWS_* variable; one set here
// wins over the variable.
type Config struct {
	// Bucket is the bucket's name. Required.
	Bucket string `koanf:"bucket"`
	// Prefix puts every key under PREFIX/, so that several clusters can
	// share one bucket. PREFIX/ is at most 64 bytes (bucket.MaxPrefixLen):
	// S3's 1,024-byte keys hold it and the kernel's longest key.
	Prefix string `koanf:"prefix"`
	// Endpoint is the store's URL, for any store but AWS S3 (AWS_ENDPOINT,
	// else AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL).
	Endpoint string `koanf:"endpoint"`
	// Region is the bucket's region (AWS_REGION; "auto" on R2).
	Region string `koanf:"region"`
	// PathStyle is "auto" (path-style requests with an endpoint, unless
	// AWS_VIRTUAL_HOSTED_STYLE_REQUEST=true; virtual-hosted on AWS), "path"
	// or "virtual".
	PathStyle string `koanf:"path_style"`
	// AllowHTTP lets a plain http:// endpoint be used (as AWS_ALLOW_HTTP=true
	// does); without either, one is refused.
	AllowHTTP bool `koanf:"allow_http"`
	// RequestTimeout ends a request with no answer after this long: the
	// whole of a PUT, DELETE, HEAD or LIST, a GET until its headers and then
	// while its body sends nothing. It is then tried again, as a 5xx is.
	RequestTimeout time.Duration `koanf:"request_timeout"`
	// MaxAttempts bounds the tries of one request: the first and its
	// retries after a transient fault, with jittered exponential backoff.
	MaxAttempts int `koanf:"max_attempts"`

	// Credentials, when set (by a program embedding the plugin, never by
	// plugins.yaml), replace the SDK's default chain (AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY, the shared files, a role).
	Credentials aws.CredentialsProvider `koanf:"-"`
}

// NewConfig returns the defaults.
func NewConfig() *Config {
	return &Config{PathStyle: "auto", RequestTimeout: 30 * time.Second, MaxAttempts: 4}
}

// maxBackoff caps the wait between two tries of a request.
const maxBackoff = 2 * time.Second

// contract is the bucket contract version this plugin is built against.
// Change it only when the plugin is brought up to a new version of
// kernel/bucket: the kernel refuses a plugin whose version is not its own
// (ADR 1002).
const contract = "bucket/v1"

// Info describes the plugin to the kernel's registry.
func Info() plugin.Info {
	return plugin.Info{
		Kind:      plugin.Bucket,
		Name:      "s3",
		API:       contract,
		Summary:   "an S3-compatible store (AWS S3, R2, OVHcloud, MinIO, VersityGW) with If-None-Match and If-Match writes",
		NewConfig: func() any { return NewConfig() },
		New:       func(config any) (any, error) { return New(config) },
		Scheme:    "s3",
		FromURL:   FromURL,
	}
}

// FromURL applies --bucket s3://BUCKET[/PREFIX] to a *Config: the bucket's
// name and the key prefix; everything else (endpoint, region, credentials)
// comes from plugins.yaml's bucket.s3 and the AWS_* variables, as without a
// URL.
func FromURL(u *url.URL, config any) error {
	cfg, ok := config.(*Config)
	if !ok {
		return fmt.Errorf("config is %T, want *s3bucket.Config", config)
	}
	switch {
	case u.Host == "" || u.Opaque != "":
		return fmt.Errorf("%s: want s3://BUCKET[/PREFIX]", u.Redacted())
	case u.User != nil || u.Port() != "" || u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%s: want s3://BUCKET[/PREFIX], without credentials, port, query or fragment (credentials come from AWS_*, the endpoint from AWS_ENDPOINT or bucket.s3.endpoint)", u.Redacted())
	}
	cfg.Bucket, cfg.Prefix = u.Host, strings.Trim(u.Path, "/")
	return nil
}

// New builds the bucket from a *Config. It makes no request: a store that
// is unreachable or ignores conditions shows at first use, or in
// bucket.Probe.
func New(config any) (bucket.Bucket, error) {
	cfg, ok := config.(*Config)
	if !ok {
		return nil, fmt.Errorf("config is %T, want *s3bucket.Config", config)
	}
	s, err := resolve(*cfg, os.Getenv)
	if err != nil {
		return nil, err
	}
	fallbackroots.Ensure() // the S3 endpoint's and the credential providers' TLS
	opts := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		awsconfig.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
		awsconfig.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = cfg.MaxAttempts
				o.MaxBackoff = maxBackoff
				// Every try is worth making: no client-side retry quota.
				o.RateLimiter = ratelimit.None
				o.Retryables = append(append([]retry.IsErrorRetryable{}, o.Retryables...),
					// A concurrent conditional write to the key: S3 applied
					// neither, so the condition is worth evaluating again.
					retry.RetryableErrorCode{Codes: map[string]struct{}{"ConditionalRequestConflict": {}}})
			})
		}),
		awsconfig.WithHTTPClient(awshttp.NewBuildableClient()),
	}
	if s.region != "" {
		opts = append(opts, awsconfig.WithRegion(s.region))
	}
	if cfg.Credentials != nil {
		opts = append(opts, awsconfig.WithCredentialsProvider(cfg.Credentials))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	if awsCfg.Region == "" {
		return nil, errors.New("no region: set region in plugins.yaml or AWS_REGION (\"auto\" on R2, \"us-east-1\" on MinIO and VersityGW)")
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if s.endpoint != "" {
			o.BaseEndpoint = aws.String(s.endpoint)
		}
		o.UsePathStyle = s.pathStyle
		o.APIOptions = append(o.APIOptions, perRequest(cfg.RequestTimeout))
	})
	bkt, err := s3blob.OpenBucket(context.Background(), client, cfg.Bucket, &s3blob.Options{
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
	})
	if err != nil {
		return nil, err
	}
	return &Bucket{blob: bkt, name: cfg.Bucket, prefix: s.prefix}, nil
}

// settings are what the configuration and the environment resolve to.
type settings struct {
	prefix, endpoint, region string
	pathStyle                bool
}

// resolve checks cfg and fills what it leaves empty from the environment.
func resolve(cfg Config, getenv func(string) string) (settings, error) {
	var s settings
	if cfg.Bucket == "" {
		return s, errors.New("bucket is not set: name the bucket in plugins.yaml (bucket.s3.bucket)")
	}
	if strings.ContainsAny(cfg.Bucket, "/:") {
		return s, fmt.Errorf("bucket %q is a name, not a URL or path: put a key prefix in prefix", cfg.Bucket)
	}
	if p := strings.Trim(cfg.Prefix, "/"); p != "" {
		if err := bucket.CheckKey(p); err != nil {
			return s, fmt.Errorf("prefix: %w", err)
		}
		if len(p)+1 > bucket.MaxPrefixLen {
			return s, fmt.Errorf("prefix %q is %d bytes with its /, at most %d: S3 allows keys of 1,024 bytes and the kernel's may take %d",
				p, len(p)+1, bucket.MaxPrefixLen, bucket.MaxKeyLen)
		}
		s.prefix = p + "/"
	}
	if cfg.RequestTimeout <= 0 {
		return s, fmt.Errorf("request_timeout is %s, want more than 0", cfg.RequestTimeout)
	}
	if cfg.MaxAttempts < 1 {
		return s, fmt.Errorf("max_attempts is %d, want at least 1", cfg.MaxAttempts)
	}
	s.region = firstSet(cfg.Region, getenv("AWS_REGION"), getenv("AWS_DEFAULT_REGION"))

	from := "endpoint"
	s.endpoint = cfg.Endpoint
	for _, name := range []string{"AWS_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"} {
		if s.endpoint == "" {
			s.endpoint, from = getenv(name), name
		}
	}
	allowHTTP := cfg.AllowHTTP
	if v := getenv("AWS_ALLOW_HTTP"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return s, fmt.Errorf("AWS_ALLOW_HTTP is %q, want true or false", v)
		}
		allowHTTP = allowHTTP || b
	}
	if s.endpoint != "" {
		u, err := url.Parse(s.endpoint)
		switch {
		case err != nil:
			return s, fmt.Errorf("%s %q: %w", from, s.endpoint, err)
		case u.Host == "" || (u.Scheme != "http" && u.Scheme != "https"):
			return s, fmt.Errorf("%s %q: want http(s)://HOST[:PORT]", from, s.endpoint)
		case u.Scheme == "http" && !allowHTTP:
			return s, fmt.Errorf("%s %q is plain HTTP: credentials and data would cross the network unencrypted; "+
				"use https, or set AWS_ALLOW_HTTP=true (allow_http: true) for a private network", from, s.endpoint)
		}
	}

	virtual := getenv("AWS_VIRTUAL_HOSTED_STYLE_REQUEST")
	switch cfg.PathStyle {
	case "auto":
		if virtual != "" {
			b, err := strconv.ParseBool(virtual)
			if err != nil {
				return s, fmt.Errorf("AWS_VIRTUAL_HOSTED_STYLE_REQUEST is %q, want true or false", virtual)
			}
			s.pathStyle = !b
		} else {
			s.pathStyle = s.endpoint != ""
		}
	case "path":
		s.pathStyle = true
	case "virtual":
	default:
		return s, fmt.Errorf("path_style is %q, want auto, path or virtual", cfg.PathStyle)
	}
	return s, nil
}

func firstSet(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
