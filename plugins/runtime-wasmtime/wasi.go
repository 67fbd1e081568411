//go:build cgo

package wasmtimeruntime

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// wasiOverrides are the WASI preview 1 functions the engine defines in place
// of Wasmtime's.
var wasiOverrides = []hostFunc{
	wasiOverride("clock_time_get", clockTimeGet),
	wasiOverride("fd_write", fdWrite),
	wasiOverride("path_open", pathOpen),
	wasiOverride("poll_oneoff", pollOneoff),
}

// wasiOverride defines WASI function name, with its preview 1 signature, as f.
func wasiOverride(name string, f func(in *instance, stack []uint64) bool) hostFunc {
	s := runtime.WASIPreview1[name]
	return hostFunc{module: runtime.WASIModule, name: name, params: s.Params, results: s.Results, wasi: f}
}

// maxWriteBuf is the largest gathering buffer an instance keeps for its next
// fd_write.
const maxWriteBuf = 64 << 10

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
	if parts > 1 && cap(data) <= maxWriteBuf {
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

// clockTimeGet is WASI's clock_time_get(id, precision, time_ptr) -> errno:
// Wasmtime's monotonic clock counts from the instance's creation, the
// kernel's from the process's start (runtime.Monotonic).
func clockTimeGet(in *instance, stack []uint64) bool {
	var now int64
	switch id := uint32(stack[0]); id {
	case clockRealtime:
		now = time.Now().UnixNano()
	case clockMonotonic:
		now = runtime.Monotonic()
	default:
		stack[0] = errnoInval
		return false
	}
	stack[0] = errnoSuccess
	if !in.hostMemory().Write(uint32(stack[2]), binary.LittleEndian.AppendUint64(nil, uint64(now))) {
		stack[0] = errnoFault
	}
	return false
}

// WASI preview 1 values used by clock_time_get and poll_oneoff.
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
	clockMonotonic         = 1
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
// (ENOTSUP in the event) on the others. File
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

	// First pass: is a subscription ready now, and if not, which clock
	// comes first? Nothing is kept per subscription: the guest chooses n.
	now := time.Now()
	ready, first := false, time.Duration(math.MaxInt64)
	for i := range n {
		sub := subs[i*subscriptionSize : (i+1)*subscriptionSize]
		ev, ok := subscribe(sub, now)
		if !ok {
			stack[0] = errnoInval
			return false
		}
		if ev.wait < 0 {
			ready = true
		} else {
			first = min(first, ev.wait)
		}
	}
	if !ready {
		t := time.NewTimer(first)
		var done <-chan struct{}
		if in.ctx != nil {
			done = in.ctx.Done()
		}
		stopped := false
		runtime.AsWait(in.ctx, func() {
			select {
			case <-t.C:
			case <-done:
				t.Stop()
				stopped = true
			}
		})
		if stopped {
			return true
		}
	}

	// Second pass: write the events of the subscriptions whose wait is over,
	// in order. The guest may lay events over subscriptions not read yet:
	// then the subscriptions are copied first (no more than the memory
	// they were in).
	if uint64(inPtr) < uint64(outPtr)+uint64(len(events)) && uint64(outPtr) < uint64(inPtr)+uint64(len(subs)) {
		subs = bytes.Clone(subs)
	}
	count := uint32(0)
	for i := range n {
		sub := subs[i*subscriptionSize : (i+1)*subscriptionSize]
		ev, _ := subscribe(sub, now)
		if ev.wait >= 0 && (ready || ev.wait > first) {
			continue
		}
		e := events[count*eventSize : (count+1)*eventSize]
		clear(e)
		copy(e, sub[:8]) // userdata
		binary.LittleEndian.PutUint16(e[8:], ev.errno)
		e[10] = ev.kind
		binary.LittleEndian.PutUint16(e[24:], ev.fdFlags)
		count++
	}
	binary.LittleEndian.PutUint32(nevents, count)
	stack[0] = errnoSuccess
	return false
}

// event is what poll_oneoff makes of one subscription.
type event struct {
	kind    byte
	errno   uint16
	fdFlags uint16
	// wait is how long from now until a clock fires; < 0 if the event is
	// ready now (descriptors, errors, clocks already past).
	wait time.Duration
}

// subscribe reads a subscription; ok is false if its kind is unknown.
func subscribe(sub []byte, now time.Time) (ev event, ok bool) {
	ev.kind = sub[8]
	switch ev.kind {
	case eventClock:
		id := binary.LittleEndian.Uint32(sub[16:])
		timeout := binary.LittleEndian.Uint64(sub[24:])
		flags := binary.LittleEndian.Uint16(sub[40:])
		switch {
		case id > clockThreadCputime:
			ev.errno = errnoInval
		case flags&subscriptionAbstime == 0:
			ev.wait = time.Duration(min(timeout, math.MaxInt64))
		case id == clockRealtime:
			ev.wait = time.Unix(0, int64(min(timeout, math.MaxInt64))).Sub(now)
		default:
			ev.errno = errnoNotsup
		}
		if ev.errno != 0 || ev.wait <= 0 {
			ev.wait = -1
		}
	case eventFdRead, eventFdWrite:
		ev.wait = -1
		switch fd := binary.LittleEndian.Uint32(sub[16:]); {
		case ev.kind == eventFdRead && fd == 0:
			ev.fdFlags = eventFdReadWriteHangup
		case ev.kind == eventFdWrite && (fd == 1 || fd == 2):
		default:
			ev.errno = errnoBadf
		}
	default:
		return ev, false
	}
	return ev, true
}
