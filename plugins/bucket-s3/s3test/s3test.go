// Package s3test runs a real S3 server for tests: VersityGW
// (github.com/versity/versitygw) on a free port of 127.0.0.1, over a
// temporary directory, with fresh buckets on demand. ./scripts/test
// installs it; a test that needs it and cannot find it fails saying so.
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"golang.org/x/sys/unix"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	s3bucket "github.com/wasmkeep/wasmkeep/plugins/bucket-s3"
)

// Version is the VersityGW release the tests run.
const Version = "v1.8.0"

// InstallHint says how to get the server.
const InstallHint = "run ./scripts/test, which installs versitygw (go install github.com/versity/versitygw/cmd/versitygw@" + Version + ")"

// Region is the region the server answers for.
const Region = "us-east-1"

// Server is a running VersityGW.
type Server struct {
	Endpoint  string // http://127.0.0.1:PORT
	AccessKey string
	SecretKey string
	Dir       string // the directory it serves; each bucket is a subdirectory

	cmd     *exec.Cmd
	done    chan struct{}
	client  *s3.Client
	buckets atomic.Int64
}

// Binary finds versitygw in PATH, else where go install puts it: GOBIN,
// or the first GOPATH's bin.
func Binary() (string, error) {
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output()
	if err != nil {
		return "", fmt.Errorf("versitygw is not in PATH, and go env failed (%v): %s", err, InstallHint)
	}
	gobin, gopath, _ := strings.Cut(string(out), "\n")
	gobin, gopath = strings.TrimSpace(gobin), strings.TrimSpace(gopath)
	if gobin == "" {
		gopath, _, _ = strings.Cut(gopath, string(os.PathListSeparator))
		gobin = filepath.Join(gopath, "bin")
	}
	p := filepath.Join(gobin, "versitygw")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("versitygw is not in PATH nor in %s: %s", gobin, InstallHint)
	}
	return p, nil
}

// Start runs a server for the test and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := StartServer(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartServer runs a server over dir (for a TestMain or a benchmark; Stop
// it when done). It returns once the server answers.
func StartServer(dir string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	s := &Server{AccessKey: "wasmkeep-test", SecretKey: "wasmkeep-test-secret", Dir: filepath.Join(dir, "root"), done: make(chan struct{})}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, err
	}
	meta, err := metadataStore(s.Dir, filepath.Join(dir, "meta"))
	if err != nil {
		return nil, err
	}
	// A port that was free a moment ago; if another process takes it
	// first, the server exits and the wait below says so.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	s.Endpoint = "http://" + addr
	logf, err := os.Create(filepath.Join(dir, "versitygw.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := append([]string{"--access", s.AccessKey, "--secret", s.SecretKey, "--region", Region,
		"--port", addr, "--quiet", "posix"}, meta...)
	s.cmd = exec.Command(bin, append(args, s.Dir)...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	s.client = s3.New(s3.Options{
		Region:       Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
	})
	if err := s.waitReady(logf.Name()); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// waitReady polls until the server answers an S3 request.
func (s *Server) waitReady(logName string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := s.client.ListBuckets(ctx, &s3.ListBucketsInput{})
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(logName)
			return fmt.Errorf("versitygw exited at start (%v):\n%s", s.cmd.ProcessState, log)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw at %s did not answer within 20s: %w", s.Endpoint, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop ends the server.
func (s *Server) Stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Signal(os.Interrupt)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			s.cmd.Process.Kill()
			<-s.done
		}
	}
}

// NewBucket creates an empty bucket with a name unique on this server.
func (s *Server) NewBucket(t testing.TB) string {
	t.Helper()
	name, err := s.CreateBucket(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// CreateBucket creates an empty bucket with a name unique on this server.
func (s *Server) CreateBucket(ctx context.Context) (string, error) {
	var r [4]byte
	rand.Read(r[:])
	name := fmt.Sprintf("wasmkeep-%d-%s", s.buckets.Add(1), hex.EncodeToString(r[:]))
	if _, err := s.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return "", fmt.Errorf("creating bucket %s on versitygw: %w", name, err)
	}
	return name, nil
}

// Config is the plugin's configuration for a bucket on this server, with
// the server's credentials.
func (s *Server) Config(bucketName string) *s3bucket.Config {
	cfg := s3bucket.NewConfig()
	cfg.Bucket = bucketName
	cfg.Endpoint = s.Endpoint
	cfg.Region = Region
	cfg.AllowHTTP = true
	cfg.Credentials = credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, "")
	return cfg
}

// Environ is the AWS_* environment that reaches this server, for a process
// (a node, an out-of-process provider) that reads its settings from it.
func (s *Server) Environ() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + s.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretKey,
		"AWS_REGION=" + Region,
		"AWS_ENDPOINT=" + s.Endpoint,
		"AWS_ALLOW_HTTP=true",
	}
}

// Open builds the plugin's bucket on a fresh bucket of this server and
// closes it when the test ends.
func (s *Server) Open(t testing.TB) bucket.Bucket {
	t.Helper()
	b, err := s3bucket.New(s.Config(s.NewBucket(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// PutRaw writes an object straight to the server, past the plugin and its
// key rule: what another tool leaves in a bucket (an S3 console's folder
// marker "dir/", say).
func (s *Server) PutRaw(t testing.TB, bucketName, key string, body []byte) {
	t.Helper()
	_, err := s.client.PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(bucketName), Key: aws.String(key), Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
	})
	if err != nil {
		t.Fatalf("putting %q on versitygw: %v", key, err)
	}
}

// metadataStore is where the server keeps object metadata: in extended
// attributes of the objects' files (no flags), or, on a file system
// without user attributes, in a sidecar directory. The sidecar tears reads:
// VersityGW v1.8.0 stores a replace's ETag there before it links the new
// body, and a Get reads the two unlocked, so a Get racing a conditional Put
// can pair the old body with the new ETag, and two nodes then each win one
// ownership record (the conformance rule GetDuringReplace). It is used
// only where attributes are not, and says so.
func metadataStore(root, sidecar string) ([]string, error) {
	const probe = "user.wasmkeep-probe"
	if err := unix.Setxattr(root, probe, []byte("1"), 0); err == nil {
		unix.Removexattr(root, probe) //nolint:errcheck // a leftover attribute on a test directory is harmless
		return nil, nil
	}
	fmt.Fprintf(os.Stderr, "s3test: %s has no user extended attributes: VersityGW keeps metadata in a sidecar directory, whose Gets may pair an old body with a new ETag during a replace\n", root)
	if err := os.MkdirAll(sidecar, 0o755); err != nil {
		return nil, err
	}
	return []string{"--sidecar", sidecar}, nil
}
