//go:build !cgo || !linux

package hugeheap

// Prepared is false without cgo on Linux: there is no glibc heap to tune.
func Prepared() bool { return false }

// Use does nothing here.
func Use() bool { return false }

// Advise does nothing.
func Advise() {}
