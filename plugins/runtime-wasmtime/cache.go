//go:build cgo

package wasmtimeruntime

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	goruntime "runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/wasmkeep/internal/cacheprune"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// The compile cache keeps Module.Serialize's output, one file per module:
// <CacheDir>/wasmtime-<version>-<os>-<arch>/<sha256 of the wasm>.cwasm.
// Wasmtime refuses artifacts of another version, configuration or CPU, but
// it executes the machine code of one it accepts, so each file carries a
// checksum of its artifact: a corrupt or truncated file is not loaded but
// compiled afresh and overwritten. A load marks its file used; an engine's
// start removes the files, and the folders of other versions, no start
// used for a week (cacheprune, ADR 1058).
//
// File layout: the artifact, then cacheMagic, then the artifact's CRC-32C
// (Castagnoli), little-endian. The artifact comes first so that Wasmtime
// maps the file (wasmtime_module_deserialize_file) rather than copying it
// (ADR 1065's amendment); it ignores the bytes after the artifact's ELF.
var cacheMagic = []byte("wasmkeep wasmtime cache 2\n")

// cacheFooter is the size of what follows the artifact.
var cacheFooter = len(cacheMagic) + 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// makeCacheDir makes this version's folder of root and prunes root.
func makeCacheDir(root string) (string, error) {
	dir := filepath.Join(root, fmt.Sprintf("wasmtime-%s-%s-%s", C.WASMTIME_VERSION, goruntime.GOOS, goruntime.GOARCH))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("wasmtime: compile cache: %w", err)
	}
	cacheprune.Prune(root, "wasmtime-", dir, time.Now())
	return dir, nil
}

// cachePath is where the cache keeps wasm's optimised code, "" for
// nowhere.
func (e *engine) cachePath(wasm []byte) string {
	if e.cacheDir == "" || e.opt.tier != runtime.TierOptimised {
		return ""
	}
	sum := sha256.Sum256(wasm)
	return filepath.Join(e.cacheDir, hex.EncodeToString(sum[:])+".cwasm")
}

// compileAndKeep compiles wasm on the optimising engine and keeps it in the
// cache.
func (e *engine) compileAndKeep(wasm []byte) (*C.wasmtime_module_t, error) {
	ptr, err := e.opt.compile(wasm)
	if err != nil {
		return nil, err
	}
	if path := e.cachePath(wasm); path != "" {
		// The cache only saves time: a module that cannot be kept still runs.
		_ = e.keep(path, ptr)
	}
	return ptr, nil
}

// loadCached returns wasm's optimised code kept in the cache, or nil if
// there is none or it is unusable.
func (e *engine) loadCached(wasm []byte) *C.wasmtime_module_t {
	path := e.cachePath(wasm)
	if path == "" || !intact(path) {
		return nil
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var ptr *C.wasmtime_module_t
	if errorOf(C.wasmtime_module_deserialize_file(e.opt.ptr, cpath, &ptr)) != nil {
		return nil
	}
	cacheprune.Touch(path, time.Now())
	return ptr
}

// intact reports whether the cache file at path ends with cacheMagic and
// the checksum of the artifact before them. It reads the file mapped: the
// page cache's pages, not a copy, which Wasmtime maps again.
func intact(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || info.Size() <= int64(cacheFooter) || int64(int(info.Size())) != info.Size() {
		return false
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(info.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return false
	}
	defer unix.Munmap(b)
	artifact, footer := b[:len(b)-cacheFooter], b[len(b)-cacheFooter:]
	return bytes.Equal(footer[:len(cacheMagic)], cacheMagic) &&
		binary.LittleEndian.Uint32(footer[len(cacheMagic):]) == crc32.Checksum(artifact, castagnoli)
}

// keep writes the compiled module to path, through a temporary file renamed
// into place so that readers never see a partial file.
func (e *engine) keep(path string, ptr *C.wasmtime_module_t) error {
	var out C.wasm_byte_vec_t
	if err := errorOf(C.wasmtime_module_serialize(ptr, &out)); err != nil {
		return err
	}
	defer C.wasm_byte_vec_delete(&out)
	if out.size == 0 {
		return errors.New("empty artifact")
	}
	artifact := unsafe.Slice((*byte)(unsafe.Pointer(out.data)), int(out.size))
	footer := binary.LittleEndian.AppendUint32(bytes.Clone(cacheMagic), crc32.Checksum(artifact, castagnoli))
	// Another build's start may have removed the folder, unused for a week.
	os.MkdirAll(filepath.Dir(path), 0o700) // else CreateTemp says why
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(artifact)
	if err == nil {
		_, err = f.Write(footer)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
