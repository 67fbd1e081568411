package s3bucket_test

import (
	"testing"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/plugins/bucket-s3/s3test"
)

// Every bucket/v1 rule, against a real S3 server (VersityGW), and both
// capabilities: the plugin sends If-Match on a DELETE, and VersityGW
// honours it and lists in byte order.
func TestConformance(t *testing.T) {
	srv := s3test.Start(t)
	cfg := srv.Config(srv.NewBucket(t))
	buckettest.RunWith(t, func(t *testing.T) bucket.Bucket { return open(t, cfg) }, buckettest.Options{RequireCapabilities: true})
}

// The same rules under a key prefix, on less data.
func TestConformanceUnderPrefix(t *testing.T) {
	srv := s3test.Start(t)
	cfg := srv.Config(srv.NewBucket(t))
	cfg.Prefix = "cluster-a"
	buckettest.RunWith(t, func(t *testing.T) bucket.Bucket { return open(t, cfg) }, buckettest.Options{Quick: true})
}
