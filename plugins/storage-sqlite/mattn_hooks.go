//go:build cgo

package sqlitestorage

// #include <stdint.h>
import "C"

import (
	"runtime/cgo"
	"unsafe"
)

// SQLite's callbacks into Go for the mattn binding (C trampolines in
// mattn.go). A file with //export may only declare C, hence this one.
// They run on the goroutine inside sqlite3_prepare_v3 or sqlite3_step.

//export wkAuthorize
func wkAuthorize(h C.uintptr_t, action C.int, arg1, arg2, dbName *C.char) C.int {
	hk := cgo.Handle(h).Value().(*chooks)
	return C.int(hk.auth(int(action), cstring(arg1), cstring(arg2), cstring(dbName)))
}

//export wkProgress
func wkProgress(h C.uintptr_t) C.int {
	if cgo.Handle(h).Value().(*chooks).progress() {
		return 1
	}
	return 0
}

//export wkFunc
func wkFunc(ctx, argv unsafe.Pointer, h C.uintptr_t) {
	fn := cgo.Handle(h).Value().(*cgoFunc)
	fn.f(&ccall{ctx: ctx, argv: argv, progress: fn.hooks.progress}, fn.arg)
}

func cstring(p *C.char) string {
	if p == nil {
		return ""
	}
	return C.GoString(p)
}
