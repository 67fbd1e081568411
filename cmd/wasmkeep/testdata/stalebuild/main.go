// Command stalebuild is a custom wasmkeep build holding a plugin left behind
// by a contract change: a bucket plugin built against bucket/v0, a version of
// the bucket contract this kernel does not speak, beside the standard
// runtime and storage plugins. The binary must refuse to start, whatever the
// command, naming the plugin, both versions and what to do.
package main

import (
	"os"

	"github.com/wasmkeep/wasmkeep/cmd/wasmkeep/command"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
	fsbucket "github.com/wasmkeep/wasmkeep/plugins/bucket-fs"
	wazeroruntime "github.com/wasmkeep/wasmkeep/plugins/runtime-wazero"
	sqlitestorage "github.com/wasmkeep/wasmkeep/plugins/storage-sqlite"
)

// contract is the version the stale plugin was built against, as a plugin
// states it: its own literal, not the kernel's constant.
const contract = "bucket/v0"

func main() {
	stale := plugin.Info{
		Kind:      plugin.Bucket,
		Name:      "stale",
		API:       contract,
		Summary:   "bucket-fs under another name, built against a bucket contract this kernel does not speak",
		NewConfig: func() any { return fsbucket.NewConfig() },
		New:       func(c any) (any, error) { return fsbucket.New(c) },
	}
	os.Exit(command.Main(wazeroruntime.Info(), sqlitestorage.Info(), stale))
}
