//go:build wasip1

// badimport imports a host function that does not exist: the node must
// refuse it at load, naming the import.
package main

//go:wasmimport wasmkeep no_such_function
func noSuchFunction()

//go:wasmexport wasmkeep_abi_v1
func abiV1() {}

//go:wasmexport wasmkeep_on_request
func onRequest(n int32) int32 {
	noSuchFunction()
	return 0
}

func main() {}
