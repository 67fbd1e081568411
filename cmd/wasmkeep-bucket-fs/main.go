// Command wasmkeep-bucket-fs serves the fs bucket (plugins/bucket-fs) out
// of process: an example of a bucket provider binary, and the one the
// process plugin's tests run the shared suite through. wasmkeep starts it
// when plugins.yaml says
//
//	bucket:
//	  use: process
//	  process:
//	    path: ./wasmkeep-bucket-fs
//	    settings:
//	      dir: ./wasmkeep-data/bucket
//
// and the settings are bucket-fs's own (bucket.fs in plugins.yaml).
package main

import (
	fsbucket "github.com/wasmkeep/wasmkeep/plugins/bucket-fs"
	processbucket "github.com/wasmkeep/wasmkeep/plugins/bucket-process"
)

func main() {
	processbucket.Serve(fsbucket.Info())
}
