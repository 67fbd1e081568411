// A Go reactor (GOOS=wasip1, -buildmode=c-shared) for the suite's GoReactor
// rule: it needs _initialize first, writes through the Go runtime to stdout
// and stderr, sleeps, and calls a host function.
package main

import (
	"fmt"
	"os"
	"time"
	"unsafe"
)

//go:wasmimport wasmkeep upper
func upper(ptr unsafe.Pointer, n uint32, out unsafe.Pointer, outCap uint32) int32

// greeting is set by package initialization, which only _initialize runs.
var greeting = fmt.Sprint("hello from ", "go")

func main() {}

//go:wasmexport run
func run(napMillis int32) int32 {
	fmt.Println(greeting)
	fmt.Fprintln(os.Stderr, "to stderr")
	nap := time.Duration(napMillis) * time.Millisecond
	start := time.Now()
	time.Sleep(nap)
	if time.Since(start) < nap {
		return -1
	}
	in := []byte(greeting)
	out := make([]byte, 64)
	n := upper(unsafe.Pointer(&in[0]), uint32(len(in)), unsafe.Pointer(&out[0]), uint32(len(out)))
	fmt.Println(string(out[:n]))
	return n
}
