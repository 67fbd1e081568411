//go:build cgo

package wasmtimeruntime

import (
	"encoding/binary"
	"io"
	"math"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// wasiOverrides are the WASI preview 1 functions the engine defines in place
// of Wasmtime's.
var wasiOverrides = []hostFunc{
	{module: wasiModule, name: "fd_write", params: sig(4), results: sig(1), wasi: fdWrite},
	{module: wasiModule, name: "path_open", params: []runtime.ValueType{
		runtime.I32, runtime.I32, runtime.I32, runtime.I32, runtime.I32,
		runtime.I64, runtime.I64, runtime.I32, runtime.I32,
	}, results: sig(1), wasi: pathOpen},
	{module: wasiModule, name: "poll_oneoff", params: sig(4), results: sig(1), wasi: pollOneoff},
}

// sig is n i32s.
func sig(n int) []runtime.ValueType {
	out := make([]runtime.ValueType, n)
	for i := range out {
		out[i] = runtime.I32
	}
	return out
}

// fdWrite is WASI's fd_write(fd, iovs, iovs_len, nwritten_ptr) -> errno.
// Wasmtime's writes only the first non-empty buffer of the list (a short
// write); this one writes them all, to the instance's writer for fds 1 and 2
// (in one Write) and fails on any other descriptor, since no other can be
// written: stdin is read-only and nothing is preopened.
func fdWrite(in *instance, stack []uint64) bool {
	fd, iovs, n, nwrittenPtr := uint32(stack[0]), uint32(stack[1]), uint32(stack[2]), uint32(stack[3])
	var w io.Writer
	switch fd {
	case 1:
		w = in.stdout
	case 2:
		w = in.stderr
	default:
		stack[0] = errnoBadf
		return false
	}
	stack[0] = errnoFault
	if uint64(n)*8 > math.MaxUint32 {
		return false
	}
	mem := in.hostMemory()
	list, ok := mem.Read(iovs, n*8)
	if !ok {
		return false
	}
	nwritten, ok := mem.Read(nwrittenPtr, 4)
	if !ok {
		return false
	}
	var (
		data  []byte // the one buffer to write
		total uint64
		parts int
	)
	for i := uint32(0); i < n; i++ {
		ptr, size := binary.LittleEndian.Uint32(list[i*8:]), binary.LittleEndian.Uint32(list[i*8+4:])
		b, ok := mem.Read(ptr, size)
		if !ok {
			return false
		}
		if size == 0 {
			continue
		}
		if total += uint64(size); total > math.MaxUint32 {
			stack[0] = errnoInval
			return false
		}
		switch parts++; parts {
		case 1:
			data = b
		case 2:
			data = append(append(in.writeBuf[:0], data...), b...)
		default:
			data = append(data, b...)
		}
	}
	if parts > 1 {
		in.writeBuf = data[:0]
	}
	if w != nil && len(data) > 0 {
		if m, err := w.Write(data); err != nil || m != len(data) {
			stack[0] = errnoIO
			return false
		}
	}
	binary.LittleEndian.PutUint32(nwritten, uint32(total))
	stack[0] = errnoSuccess
	return false
}

// pathOpen is WASI's path_open. No directory is preopened, so it fails on
// every descriptor: the stdio ones are not directories and no other exists.
// (Wasmtime's traps instead of failing when the rights have unknown bits.)
func pathOpen(_ *instance, stack []uint64) bool {
	if fd := uint32(stack[0]); fd <= 2 {
		stack[0] = errnoNotdir
	} else {
		stack[0] = errnoBadf
	}
	return false
}

// WASI preview 1 values used by poll_oneoff.
const (
	errnoSuccess = 0
	errnoBadf    = 8
	errnoFault   = 21
	errnoInval   = 28
	errnoIO      = 29
	errnoNotdir  = 54
	errnoNotsup  = 58

	eventClock   = 0
	eventFdRead  = 1
	eventFdWrite = 2

	clockRealtime          = 0
	clockThreadCputime     = 3
	subscriptionAbstime    = 1
	eventFdReadWriteHangup = 1

	subscriptionSize = 48
	eventSize        = 32
)

// pollOneoff is WASI's poll_oneoff(in, out, nsubscriptions, nevents_ptr) ->
// errno. Wasmtime's sleeps inside Rust, where no epoch reaches it, so a
// guest asleep for an hour would hold its call for an hour after the ctx is
// done; this one wakes when the ctx is done and interrupts the call.
//
// Clock subscriptions: relative timeouts on any clock are waited for in real
// time; an absolute timeout is supported on the realtime clock and refused
// (ENOTSUP in the event) on the others, whose origin is Wasmtime's. File
// descriptor subscriptions are ready at once, as they are here: stdin is
// empty (readable, at its end), stdout and stderr are always writable, and
// no other descriptor exists (EBADF in the event).
func pollOneoff(in *instance, stack []uint64) (interrupt bool) {
	inPtr, outPtr, n, neventsPtr := uint32(stack[0]), uint32(stack[1]), uint32(stack[2]), uint32(stack[3])
	stack[0] = errnoFault
	if n == 0 {
		stack[0] = errnoInval
		return false
	}
	if uint64(n)*subscriptionSize > math.MaxUint32 {
		return false
	}
	mem := in.hostMemory()
	subs, ok := mem.Read(inPtr, n*subscriptionSize)
	if !ok {
		return false
	}
	events, ok := mem.Read(outPtr, n*eventSize)
	if !ok {
		return false
	}
	nevents, ok := mem.Read(neventsPtr, 4)
	if !ok {
		return false
	}
	// The subscriptions are read before any event is written: the two may
	// overlap.
	type sub struct {
		userdata []byte
		kind     byte
		errno    uint16
		wait     time.Duration // clock: how long from now; < 0 if no wait
		fdFlags  uint16
	}
	list := make([]sub, n)
	now := time.Now()
	ready := false // an event is ready without waiting
	for i := range list {
		b := subs[i*subscriptionSize : (i+1)*subscriptionSize]
		s := &list[i]
		s.userdata = append([]byte(nil), b[:8]...)
		s.kind = b[8]
		switch s.kind {
		case eventClock:
			id := binary.LittleEndian.Uint32(b[16:])
			timeout := binary.LittleEndian.Uint64(b[24:])
			flags := binary.LittleEndian.Uint16(b[40:])
			switch {
			case id > clockThreadCputime:
				s.errno = errnoInval
			case flags&subscriptionAbstime == 0:
				s.wait = time.Duration(min(timeout, math.MaxInt64))
			case id == clockRealtime:
				s.wait = time.Unix(0, int64(min(timeout, math.MaxInt64))).Sub(now)
			default:
				s.errno = errnoNotsup
			}
		case eventFdRead, eventFdWrite:
			fd := binary.LittleEndian.Uint32(b[16:])
			switch {
			case s.kind == eventFdRead && fd == 0:
				s.fdFlags = eventFdReadWriteHangup
			case s.kind == eventFdWrite && (fd == 1 || fd == 2):
			default:
				s.errno = errnoBadf
			}
		default:
			stack[0] = errnoInval
			return false
		}
		if s.kind != eventClock || s.errno != 0 || s.wait <= 0 {
			s.wait = -1
			ready = true
		}
	}
	if !ready {
		// Wait for the first clock, or the ctx.
		first := time.Duration(math.MaxInt64)
		for _, s := range list {
			first = min(first, s.wait)
		}
		t := time.NewTimer(first)
		var done <-chan struct{}
		if in.ctx != nil {
			done = in.ctx.Done()
		}
		select {
		case <-t.C:
		case <-done:
			t.Stop()
			return true
		}
		for i := range list {
			if list[i].wait <= first {
				list[i].wait = -1
			}
		}
	}
	// The events are the subscriptions whose wait is over, in order.
	count := uint32(0)
	for _, s := range list {
		if s.wait >= 0 {
			continue
		}
		e := events[count*eventSize : (count+1)*eventSize]
		clear(e)
		copy(e, s.userdata)
		binary.LittleEndian.PutUint16(e[8:], s.errno)
		e[10] = s.kind
		binary.LittleEndian.PutUint16(e[24:], s.fdFlags)
		count++
	}
	binary.LittleEndian.PutUint32(nevents, count)
	stack[0] = errnoSuccess
	return false
}
