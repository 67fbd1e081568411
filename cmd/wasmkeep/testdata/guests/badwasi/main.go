//go:build wasip1

// badwasi imports a WASI function with the wrong signature (proc_raise takes
// an i32 signal): the node must refuse it at load, naming the import and
// both signatures, rather than fail every request.
package main

//go:wasmimport wasi_snapshot_preview1 proc_raise
func procRaise(signal int64) int32

//go:wasmexport wasmkeep_abi_v1
func abiV1() {}

//go:wasmexport wasmkeep_on_request
func onRequest(n int32) int32 {
	return procRaise(int64(n))
}

func main() {}
