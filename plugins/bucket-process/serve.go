package processbucket

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/config"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
	"github.com/wasmkeep/wasmkeep/plugins/bucket-process/internal/bucketpb"
)

// Serve is a provider binary's main: it serves the bucket plugin info
// describes to the wasmkeep that started the binary, building the bucket
// from the settings the host sends (plugins.yaml's bucket.process.settings,
// decoded into info.NewConfig() as strictly as plugins.yaml). It returns
// once the host has stopped the provider and the bucket is closed. Run by
// hand, it says how to use the binary and exits.
func Serve(info plugin.Info) {
	if err := checkInfo(info); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", os.Args[0], err)
		os.Exit(1)
	}
	if os.Getenv(Handshake.MagicCookieKey) != Handshake.MagicCookieValue {
		fmt.Fprintf(os.Stderr, byHand, os.Args[0], info.Name, info.API, ProtocolVersion, os.Args[0])
		os.Exit(1)
	}
	serve(info, ProtocolVersion)
}

const byHand = `%s is a WasmKeep bucket provider (the bucket plugin %q, %s, provider protocol %d).
wasmkeep starts it; it is not run by hand. To use it, name it in plugins.yaml:

  bucket:
    use: process
    process:
      path: %s
      settings: {}  # the provider's own settings

and check it with: wasmkeep conformance bucket --config plugins.yaml
`

func checkInfo(info plugin.Info) error {
	switch {
	case info.Kind != plugin.Bucket:
		return fmt.Errorf("plugin %s is a %s plugin, not a bucket plugin", info.ID(), info.Kind)
	case info.New == nil:
		return fmt.Errorf("plugin %s has no New", info.ID())
	}
	return plugin.CheckAPI(info, bucket.API)
}

// serve is Serve after its checks, speaking the given protocol version
// (tests serve others).
func serve(info plugin.Info, version int) {
	s := &server{info: info}
	// go-plugin points os.Stdout and os.Stderr at pipes it forwards to the
	// host while it serves; after, only the real stderr reaches the host.
	stdout, stderr := os.Stdout, os.Stderr
	go s.exitWithParent(stderr)
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: versions(version, &grpcPlugin{server: s}),
		GRPCServer:       goplugin.DefaultGRPCServer,
		Logger:           hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr}),
	})
	os.Stdout, os.Stderr = stdout, stderr
	if err := s.close(); err != nil {
		fmt.Fprintf(os.Stderr, "closing the bucket: %v\n", err)
	}
}

// orphanCheck is how often a provider checks that the wasmkeep that
// started it still runs.
const orphanCheck = 500 * time.Millisecond

// exitWithParent ends the provider once its parent is gone: a node killed
// before it could close the bucket leaves no provider behind. (Linux's
// Pdeathsig would follow the thread that started the provider, which Go
// may end, not the node.)
func (s *server) exitWithParent(stderr io.Writer) {
	parent := os.Getppid()
	for range time.Tick(orphanCheck) {
		if os.Getppid() != parent {
			fmt.Fprintf(stderr, "the wasmkeep that started this provider (pid %d) is gone; closing the bucket and exiting\n", parent)
			if err := s.close(); err != nil {
				fmt.Fprintf(stderr, "closing the bucket: %v\n", err)
			}
			os.Exit(1)
		}
	}
}

// server is the provider's side of the protocol.
type server struct {
	bucketpb.UnimplementedBucketServer
	info plugin.Info

	mu sync.Mutex
	b  bucket.Bucket // nil until Configure
}

func (s *server) Configure(_ context.Context, req *bucketpb.ConfigureRequest) (*bucketpb.ConfigureResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b != nil {
		return nil, toStatus(errors.New("configured twice"))
	}
	cfg, err := decodeSettings(s.info, req.SettingsJson)
	if err != nil {
		return nil, toStatus(err)
	}
	v, err := s.info.New(cfg)
	if err != nil {
		return nil, toStatus(fmt.Errorf("%s: %w", s.info.ID(), err))
	}
	b, ok := v.(bucket.Bucket)
	if !ok {
		return nil, toStatus(fmt.Errorf("plugin %s's New returned %T, not a bucket.Bucket", s.info.ID(), v))
	}
	s.b = b
	return &bucketpb.ConfigureResponse{Name: s.info.Name, Api: s.info.API, Summary: s.info.Summary}, nil
}

// decodeSettings decodes the host's settings into the plugin's
// configuration, as strictly as plugins.yaml is decoded.
func decodeSettings(info plugin.Info, settings []byte) (any, error) {
	var cfg any = &struct{}{}
	if info.NewConfig != nil {
		cfg = info.NewConfig()
	}
	var m map[string]any
	if err := json.Unmarshal(settings, &m); err != nil {
		return nil, fmt.Errorf("settings: %w", err)
	}
	if err := config.DecodeStrict(m, cfg, "bucket.process.settings"); err != nil {
		return nil, fmt.Errorf("%s: %w", info.ID(), err)
	}
	return cfg, nil
}

func (s *server) bucket() (bucket.Bucket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b == nil {
		return nil, toStatus(errors.New("not configured: the host calls Configure first"))
	}
	return s.b, nil
}

func (s *server) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b == nil {
		return nil
	}
	return s.b.Close()
}

func (s *server) Get(req *bucketpb.GetRequest, stream bucketpb.Bucket_GetServer) error {
	b, err := s.bucket()
	if err != nil {
		return err
	}
	obj, err := b.Get(stream.Context(), req.Key, bucket.GetOptions{Offset: req.Offset, Length: req.Length})
	if err != nil {
		return toStatus(err)
	}
	defer obj.Body.Close()
	// The first message has the info and the first chunk: a small object
	// is one message.
	msg := &bucketpb.GetResponse{Info: &bucketpb.ObjectInfo{Size: obj.Size, Version: string(obj.Version), ModTimeUnixNano: toNano(obj.ModTime)}}
	for {
		// A fresh buffer each time: gRPC may hold a sent message.
		buf := make([]byte, chunkLen(obj.Size))
		n, err := io.ReadFull(obj.Body, buf)
		if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
			return toStatus(err)
		}
		msg.Data = buf[:n]
		if serr := stream.Send(msg); serr != nil {
			return serr
		}
		if err != nil {
			return nil
		}
		msg = &bucketpb.GetResponse{}
	}
}

func (s *server) Put(stream bucketpb.Bucket_PutServer) error {
	b, err := s.bucket()
	if err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	h := first.Header
	if h == nil {
		return toStatus(errors.New("protocol error: the first message of a put has no header"))
	}
	v, err := b.Put(stream.Context(), h.Key, &putBody{stream: stream, buf: first.Data}, h.Size, fromCondition(h.Condition))
	if err != nil {
		return toStatus(err)
	}
	return stream.SendAndClose(&bucketpb.PutResponse{Version: string(v)})
}

// putBody reads a put's chunks as they arrive. The stream ends with io.EOF
// only when the host has sent the whole body; if the host gives up, Read
// fails and the provider's Put writes nothing.
type putBody struct {
	stream bucketpb.Bucket_PutServer
	buf    []byte
}

func (r *putBody) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		msg, err := r.stream.Recv()
		if err != nil {
			return 0, err
		}
		r.buf = msg.Data
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (s *server) Delete(ctx context.Context, req *bucketpb.DeleteRequest) (*bucketpb.DeleteResponse, error) {
	b, err := s.bucket()
	if err != nil {
		return nil, err
	}
	if err := b.Delete(ctx, req.Key, fromCondition(req.Condition)); err != nil {
		return nil, toStatus(err)
	}
	return &bucketpb.DeleteResponse{}, nil
}

// listBatch is the most entries one List message carries: with keys of at
// most 1,024 bytes, about 1 MiB.
const listBatch = 1000

func (s *server) List(req *bucketpb.ListRequest, stream bucketpb.Bucket_ListServer) error {
	b, err := s.bucket()
	if err != nil {
		return err
	}
	page, err := b.List(stream.Context(), req.Prefix, bucket.ListOptions{StartAfter: req.StartAfter, Limit: int(req.Limit)})
	if err != nil {
		return toStatus(err)
	}
	entries := page.Entries
	for {
		n := min(len(entries), listBatch)
		msg := &bucketpb.ListResponse{Entries: make([]*bucketpb.Entry, n)}
		for i, e := range entries[:n] {
			msg.Entries[i] = &bucketpb.Entry{Key: e.Key, Size: e.Size, Version: string(e.Version), ModTimeUnixNano: toNano(e.ModTime)}
		}
		entries = entries[n:]
		if len(entries) == 0 {
			msg.Next = page.Next
		}
		if err := stream.Send(msg); err != nil {
			return err
		}
		if len(entries) == 0 {
			return nil
		}
	}
}
