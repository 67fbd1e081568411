//go:build !linux

package linearmem

// NoFaultAround does nothing: the switch is Linux's userfaultfd(2).
func NoFaultAround(mem []byte) bool { return false }
