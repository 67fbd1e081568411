package processbucket

import (
	"context"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/wasmkeep/wasmkeep/plugins/bucket-process/internal/bucketpb"
)

// ProtocolVersion is the bucket provider protocol this package speaks
// (internal/bucketpb/bucket.proto, package wasmkeep.bucket.v1). Host and
// provider agree on it in go-plugin's handshake; a change an old peer
// cannot ignore is a new version (ADR 1007).
const ProtocolVersion = 1

// Handshake is what host and provider check before anything else. The
// magic cookie only tells a provider it was started by wasmkeep; it is not
// a secret, and it never changes.
var Handshake = goplugin.HandshakeConfig{
	// ProtocolVersion stays 0: the versions are negotiated through
	// VersionedPlugins, where the host offers each version it speaks.
	MagicCookieKey:   "WASMKEEP_BUCKET_PROVIDER",
	MagicCookieValue: "7f1c5e0a-bucket-provider-started-by-wasmkeep",
}

// pluginName is the one plugin a provider binary serves, in go-plugin's
// terms.
const pluginName = "bucket"

// versions is the plugin set of each protocol version a side speaks.
func versions(version int, p *grpcPlugin) map[int]goplugin.PluginSet {
	return map[int]goplugin.PluginSet{version: {pluginName: p}}
}

// grpcPlugin is go-plugin's view of the protocol: the provider registers
// its server, the host gets a client.
type grpcPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	server bucketpb.BucketServer // provider side only
}

func (p *grpcPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	bucketpb.RegisterBucketServer(s, p.server)
	return nil
}

func (p *grpcPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return bucketpb.NewBucketClient(c), nil
}
