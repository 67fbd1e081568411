package processbucket

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/plugins/bucket-process/internal/bucketpb"
)

// ErrExited: the provider process is gone (it crashed or was killed).
// Calls then fail at once with an error wrapping it; the node must be
// restarted to start the provider again.
var ErrExited = errors.New("the provider process exited")

// chunkSize is the most data one message carries, well under gRPC's
// default 4 MiB message limit.
const chunkSize = 1 << 20

// chunkLen is the buffer for streaming an object of size bytes: a chunk,
// or less for a small object, with a byte to spare so that one read sees
// the end.
func chunkLen(size int64) int {
	return int(min(chunkSize, max(size, 0)+1))
}

// exitGrace is how long a call whose connection broke waits for go-plugin
// to see the process exit, to say "exited" rather than "unreachable".
const exitGrace = 2 * time.Second

// Bucket is a bucket served by a provider process.
type Bucket struct {
	desc   string // "bucket provider PATH (pid N)", the prefix of every error
	pc     *goplugin.Client
	rpc    bucketpb.BucketClient
	output *tail
	log    *slog.Logger

	closeOnce sync.Once
	closed    chan struct{}
}

var _ bucket.Bucket = (*Bucket)(nil)

// Open starts the provider binary cfg names, agrees on the protocol
// version, hands it its settings and returns the bucket it serves. log
// receives what the provider prints, and go-plugin's own messages.
func Open(cfg Config, log *slog.Logger) (*Bucket, error) {
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = defaultStartTimeout
	}
	if cfg.Path == "" {
		return nil, errors.New("path: no provider binary set (bucket.process.path)")
	}
	path, err := exec.LookPath(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("path: %w", err)
	}
	settings, err := json.Marshal(cfg.Settings)
	if err != nil {
		return nil, fmt.Errorf("settings: %w", err)
	}
	log = log.With("bucket_provider", path)
	cmd := exec.Command(path, cfg.Args...)
	// The configured variables come last, so they win over the node's.
	cmd.Env = os.Environ()
	for k, v := range cfg.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	b := &Bucket{
		desc:   describe(cfg.Path, ""),
		output: &tail{},
		log:    log,
		closed: make(chan struct{}),
	}
	cc := &goplugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: versions(ProtocolVersion, &grpcPlugin{}),
		Cmd:              cmd,
		SkipHostEnv:      true, // cmd.Env has it, in the right order
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		StartTimeout:     cfg.StartTimeout,
		Stderr:           &output{log: log, stream: "stderr", tail: b.output},
		SyncStdout:       &output{log: log, stream: "os.Stdout", tail: b.output},
		SyncStderr:       &output{log: log, stream: "os.Stderr", tail: b.output},
		Logger:           &hclogSlog{log: log, level: hclog.Info},
		AutoMTLS:         true,
	}
	if cfg.SHA256 != "" {
		sum, err := hex.DecodeString(cfg.SHA256)
		if err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("sha256: %q is not a SHA-256 in hex", cfg.SHA256)
		}
		cc.SecureConfig = &goplugin.SecureConfig{Checksum: sum, Hash: sha256.New()}
	}
	b.pc = goplugin.NewClient(cc)
	if err := b.start(cfg.Path, settings, cfg.StartTimeout); err != nil {
		b.pc.Kill()
		return nil, err
	}
	return b, nil
}

// pluginVersionRE finds the provider's version in go-plugin's mismatch
// error, which calls the protocol "API" and lists the host's versions as a
// Go slice.
var pluginVersionRE = regexp.MustCompile(`Plugin version: (\d+)`)

func (b *Bucket) start(path string, settings []byte, timeout time.Duration) error {
	rpc, err := b.pc.Client()
	if err != nil {
		if m := pluginVersionRE.FindStringSubmatch(err.Error()); m != nil {
			return fmt.Errorf("%s speaks bucket provider protocol version %s, but this wasmkeep speaks version %d: "+
				"use a build of the provider made for this wasmkeep", b.desc, m[1], ProtocolVersion)
		}
		return fmt.Errorf("%s did not start: %w%s", b.desc, err, b.output)
	}
	b.desc = describe(path, b.pc.ID())
	raw, err := rpc.Dispense(pluginName)
	if err != nil {
		return fmt.Errorf("%s: %w", b.desc, err)
	}
	b.rpc = raw.(bucketpb.BucketClient)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := b.rpc.Configure(ctx, &bucketpb.ConfigureRequest{SettingsJson: settings})
	if ctx.Err() != nil {
		return fmt.Errorf("%s: no answer to configure within start_timeout (%s)", b.desc, timeout)
	}
	if err != nil {
		return b.fail(ctx, "configure", err)
	}
	if resp.Api != bucket.API {
		return fmt.Errorf("%s serves %s plugin %q, but this kernel requires %s: "+
			"use a build of the provider made for %s (ADR 1002)", b.desc, resp.Api, resp.Name, bucket.API, bucket.API)
	}
	b.log.Info("bucket provider started", "pid", b.pc.ID(), "protocol", b.pc.NegotiatedVersion(), "plugin", resp.Name)
	return nil
}

// Close stops the provider: gracefully if it answers, else killed. It
// returns once the process is gone.
func (b *Bucket) Close() error {
	b.closeOnce.Do(func() {
		close(b.closed)
		b.pc.Kill()
	})
	return nil
}

// check fails a call at once if the bucket is closed or the provider has
// exited.
func (b *Bucket) check() error {
	select {
	case <-b.closed:
		return fmt.Errorf("%s: the bucket is closed", b.desc)
	default:
	}
	if b.pc.Exited() {
		return b.exited()
	}
	return nil
}

func (b *Bucket) exited() error {
	return fmt.Errorf("%s: %w%s", b.desc, ErrExited, b.output)
}

// fail turns an RPC's error into the call's: the caller's context ending,
// the provider's own error (its kinds intact), the provider having exited,
// or the connection failing.
func (b *Bucket) fail(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %s: %w", b.desc, op, ctx.Err())
	}
	if perr := fromStatus(b.desc, err); perr != nil {
		return perr
	}
	// The deadline crossed with the call and may fire on the provider's
	// side a moment before the caller's.
	if status.Code(err) == codes.DeadlineExceeded {
		return fmt.Errorf("%s: %s: %w", b.desc, op, context.DeadlineExceeded)
	}
	if b.waitExited() {
		return b.exited()
	}
	if status.Code(err) == codes.Unavailable {
		return fmt.Errorf("%s: %s: %w: %v", b.desc, op, bucket.ErrTransient, err)
	}
	return fmt.Errorf("%s: %s: %w", b.desc, op, err)
}

// waitExited reports whether the provider has exited, waiting a little for
// go-plugin to notice an exit that has just broken the connection.
func (b *Bucket) waitExited() bool {
	deadline := time.Now().Add(exitGrace)
	for !b.pc.Exited() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

func (b *Bucket) Get(ctx context.Context, key string, opts bucket.GetOptions) (*bucket.Object, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	op := fmt.Sprintf("get %q", key)
	sctx, cancel := context.WithCancel(ctx)
	stream, err := b.rpc.Get(sctx, &bucketpb.GetRequest{Key: key, Offset: opts.Offset, Length: opts.Length})
	if err != nil {
		cancel()
		return nil, b.fail(ctx, op, err)
	}
	first, err := stream.Recv()
	if err != nil {
		cancel()
		return nil, b.fail(ctx, op, err)
	}
	if first.Info == nil {
		cancel()
		return nil, fmt.Errorf("%s: %s: protocol error: the first message has no object info", b.desc, op)
	}
	return &bucket.Object{
		Body:    &getBody{b: b, ctx: ctx, op: op, stream: stream, cancel: cancel, buf: first.Data},
		Size:    first.Info.Size,
		Version: bucket.Version(first.Info.Version),
		ModTime: fromNano(first.Info.ModTimeUnixNano),
	}, nil
}

// getBody reads an object's chunks as they arrive; closing it ends the
// stream.
type getBody struct {
	b      *Bucket
	ctx    context.Context
	op     string
	stream bucketpb.Bucket_GetClient
	cancel context.CancelFunc
	buf    []byte
	err    error
}

func (r *getBody) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		msg, err := r.stream.Recv()
		switch {
		case err == io.EOF:
			r.err = io.EOF
		case err != nil:
			r.err = r.b.fail(r.ctx, r.op, err)
		default:
			r.buf = msg.Data
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *getBody) Close() error {
	r.cancel()
	return nil
}

func (b *Bucket) Put(ctx context.Context, key string, body io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	if err := b.check(); err != nil {
		return "", err
	}
	op := fmt.Sprintf("put %q", key)
	// Ending the stream without closing it (a failed body read) cancels
	// the provider's Put, which then writes nothing.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := b.rpc.Put(sctx)
	if err != nil {
		return "", b.fail(ctx, op, err)
	}
	// The first message has the header and the first chunk: a small object
	// is one message.
	msg := &bucketpb.PutRequest{Header: &bucketpb.PutHeader{Key: key, Size: size, Condition: toCondition(cond)}}
	buf := make([]byte, chunkLen(size))
	for {
		n, rerr := io.ReadFull(body, buf)
		if rerr != nil && rerr != io.EOF && rerr != io.ErrUnexpectedEOF {
			return "", fmt.Errorf("%s: %s: reading the body: %w", b.desc, op, rerr)
		}
		msg.Data = buf[:n]
		if err = stream.Send(msg); err != nil || rerr != nil {
			break
		}
		msg = &bucketpb.PutRequest{}
	}
	// io.EOF from Send: the provider ended the call early; CloseAndRecv
	// has its answer.
	if err != nil && err != io.EOF {
		return "", b.fail(ctx, op, err)
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return "", b.fail(ctx, op, err)
	}
	return bucket.Version(resp.Version), nil
}

func (b *Bucket) Delete(ctx context.Context, key string, cond bucket.Condition) error {
	if err := b.check(); err != nil {
		return err
	}
	if _, err := b.rpc.Delete(ctx, &bucketpb.DeleteRequest{Key: key, Condition: toCondition(cond)}); err != nil {
		return b.fail(ctx, fmt.Sprintf("delete %q", key), err)
	}
	return nil
}

func (b *Bucket) List(ctx context.Context, prefix string, opts bucket.ListOptions) (bucket.ListPage, error) {
	if err := b.check(); err != nil {
		return bucket.ListPage{}, err
	}
	op := fmt.Sprintf("list %q", prefix)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := b.rpc.List(sctx, &bucketpb.ListRequest{Prefix: prefix, StartAfter: opts.StartAfter, Limit: int64(opts.Limit)})
	if err != nil {
		return bucket.ListPage{}, b.fail(ctx, op, err)
	}
	var page bucket.ListPage
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			return page, nil
		}
		if err != nil {
			return bucket.ListPage{}, b.fail(ctx, op, err)
		}
		for _, e := range msg.Entries {
			page.Entries = append(page.Entries, bucket.Entry{
				Key: e.Key, Size: e.Size, Version: bucket.Version(e.Version), ModTime: fromNano(e.ModTimeUnixNano),
			})
		}
		page.Next = msg.Next
	}
}

func toCondition(c bucket.Condition) *bucketpb.Condition {
	return &bucketpb.Condition{IfAbsent: c.IfAbsent, IfVersion: string(c.IfVersion)}
}

func fromCondition(c *bucketpb.Condition) bucket.Condition {
	return bucket.Condition{IfAbsent: c.GetIfAbsent(), IfVersion: bucket.Version(c.GetIfVersion())}
}

// toNano and fromNano carry a time as Unix nanoseconds, 0 for the zero
// time.
func toNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// describe is how messages name a provider: its path, and its pid once it
// runs.
func describe(path, pid string) string {
	if pid == "" {
		return "bucket provider " + path
	}
	return fmt.Sprintf("bucket provider %s (pid %s)", path, pid)
}
