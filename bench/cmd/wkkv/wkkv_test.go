//go:build linux

package main

import (
	"testing"

	"github.com/wasmkeep/wasmkeep/sdk/go/kv"
)

func TestShardKeys(t *testing.T) {
	keys := shardKeys(8, 0)
	seen := map[string]bool{}
	for _, k := range keys {
		if kv.ShardOf(k, shards) != 0 || seen[k] {
			t.Errorf("key %q: shard %d, or twice", k, kv.ShardOf(k, shards))
		}
		seen[k] = true
	}
	if len(keys) != 8 {
		t.Errorf("%d keys, want 8", len(keys))
	}
}
