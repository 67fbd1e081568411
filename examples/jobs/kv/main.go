//go:build wasip1

// Kv is the jobs app's key-value store: the SDK's ready-made shard class
// (sdk/go/kv). Serve it as class kv with --access kv=internal; other actors
// reach its shards, kv/shard-0 .. kv/shard-<n-1>, through kv.New("kv", n).
package main

import (
	"github.com/wasmkeep/wasmkeep/sdk/go/kv"
	_ "github.com/wasmkeep/wasmkeep/sdk/go/preinit"
)

func init() { kv.Serve() }

func main() {}
