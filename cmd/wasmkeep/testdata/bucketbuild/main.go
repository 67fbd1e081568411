// Command bucketbuild is a custom wasmkeep build for the tests of `wasmkeep
// conformance bucket`: the standard runtime and storage plugins and a bucket
// plugin "memory" (buckettest's reference bucket), whose flaws plugins.yaml
// sets, so that the command is seen failing a provider as well as passing one.
// It has no bucket-fs, the embedded defaults' bucket: a build that must start
// all the same. For `wasmkeep conformance transport` it has a transport
// plugin "plain", the kernel's plaintext transport, which fails the suite:
// a transport plugin must authenticate its peers.
package main

import (
	"os"

	"github.com/wasmkeep/wasmkeep/cmd/wasmkeep/command"
	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
	"github.com/wasmkeep/wasmkeep/kernel/transport"
	"github.com/wasmkeep/wasmkeep/kernel/transport/plaintext"
	wazeroruntime "github.com/wasmkeep/wasmkeep/plugins/runtime-wazero"
	sqlitestorage "github.com/wasmkeep/wasmkeep/plugins/storage-sqlite"
)

type flaws struct {
	IgnoreConditions      bool `koanf:"ignore_conditions"`
	ReverseList           bool `koanf:"reverse_list"`
	IgnoreDeleteIfVersion bool `koanf:"ignore_delete_if_version"`
	ListByDirectory       bool `koanf:"list_by_directory"`
}

func main() {
	memory := plugin.Info{
		Kind:      plugin.Bucket,
		Name:      "memory",
		API:       bucket.API,
		Summary:   "buckettest's reference bucket, in memory, for tests",
		NewConfig: func() any { return &flaws{} },
		New: func(c any) (any, error) {
			f := c.(*flaws)
			return buckettest.NewMemory(buckettest.Flaws{IgnoreConditions: f.IgnoreConditions, ReverseList: f.ReverseList,
				IgnoreDeleteIfVersion: f.IgnoreDeleteIfVersion, ListByDirectory: f.ListByDirectory}), nil
		},
	}
	plain := plugin.Info{
		Kind:    plugin.Transport,
		Name:    "plain",
		API:     transport.API,
		Summary: "the kernel's plaintext transport, for tests",
		New:     func(any) (any, error) { return plaintext.New(), nil },
	}
	os.Exit(command.Main(wazeroruntime.Info(), sqlitestorage.Info(), memory, plain))
}
