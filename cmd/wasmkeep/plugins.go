package main

import (
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
	fsbucket "github.com/wasmkeep/wasmkeep/plugins/bucket-fs"
	processbucket "github.com/wasmkeep/wasmkeep/plugins/bucket-process"
	s3bucket "github.com/wasmkeep/wasmkeep/plugins/bucket-s3"
	wasmtimeruntime "github.com/wasmkeep/wasmkeep/plugins/runtime-wasmtime"
	wazeroruntime "github.com/wasmkeep/wasmkeep/plugins/runtime-wazero"
	sqlitestorage "github.com/wasmkeep/wasmkeep/plugins/storage-sqlite"
	mtlstransport "github.com/wasmkeep/wasmkeep/plugins/transport-mtls"
)

// plugins is the standard set: every plugin this build can hold. In a
// CGO_ENABLED=0 build the cgo plugins list themselves as unavailable, saying
// how to get a build that has them.
func plugins() []plugin.Info {
	return []plugin.Info{
		wazeroruntime.Info(),
		wasmtimeruntime.Info(),
		sqlitestorage.Info(),
		fsbucket.Info(),
		processbucket.Info(),
		s3bucket.Info(),
		mtlstransport.Info(),
	}
}
