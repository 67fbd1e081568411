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
	"github.com/wasmkeep/wasmkeep/internal/localfs"
	"github.com/wasmkeep/wasmkeep/internal/populate"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// The compile cache keeps Module.Serialize's output, one file per module:
// <CacheDir>/wasmtime-<version>-<os>-<arch>-layout2/<sha256 of the wasm>.cwasm.
// Wasmtime refuses artifacts of another version, configuration or CPU, but
// it executes the machine code of one it accepts, so each file carries a
// checksum of its artifact: a corrupt or truncated file is not loaded but
// compiled afresh and overwritten. A load marks its file used; an engine's
// start removes the files, and the folders of other versions, no start
// used for a week (cacheprune, ADR 1058).
//
// File layout: the artifact, then cacheMagic, then the artifact's CRC-32C
// (Castagnoli), little-endian. The artifact comes first so that Wasmtime
// maps the file (wasmtime_module_deserialize_file) rather than copying it,
// where the file system is local (ADR 1065's amendment); it ignores the
// bytes after the artifact's ELF. The layout is in the folder's name, so
// builds of another layout on the machine keep files of their own.
var cacheMagic = []byte("wasmkeep wasmtime cache 2\n")

// cacheLayout names the layout in the folder's name.
const cacheLayout = "layout2"

// cacheFooter is the size of what follows the artifact.
var cacheFooter = len(cacheMagic) + 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// makeCacheDir makes this version's folder of root and prunes root.
func makeCacheDir(root string) (string, error) {
	dir := filepath.Join(root, fmt.Sprintf("wasmtime-%s-%s-%s-%s", C.WASMTIME_VERSION, goruntime.GOOS, goruntime.GOARCH, cacheLayout))
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
	if path == "" {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var ptr *C.wasmtime_module_t
	if localfs.Holds(f) {
		ptr = e.deserializeMapped(f)
	} else {
		ptr = e.deserializeRead(path)
	}
	if ptr != nil {
		cacheprune.Touch(path, time.Now())
	}
	return ptr
}

// deserializeMapped checks the cache file f over a read-only mapping (the
// page cache's pages, not a copy), then has Wasmtime map the same file,
// through f's descriptor so that a file renamed over path meanwhile is not
// the one loaded.
func (e *engine) deserializeMapped(f *os.File) *C.wasmtime_module_t {
	info, err := f.Stat()
	if err != nil || int64(int(info.Size())) != info.Size() {
		return nil
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(info.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil
	}
	_, ok := artifactOf(b)
	unix.Munmap(b)
	if !ok {
		return nil
	}
	cpath := C.CString(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	defer C.free(unsafe.Pointer(cpath))
	var ptr *C.wasmtime_module_t
	if errorOf(C.wasmtime_module_deserialize_file(e.opt.ptr, cpath, &ptr)) != nil {
		return nil
	}
	return ptr
}

// deserializeRead reads the cache file at path and has Wasmtime copy the
// artifact: for a file system not known to be local (localfs), where a
// mapping could fault later.
func (e *engine) deserializeRead(path string) *C.wasmtime_module_t {
	b, err := populate.ReadFile(path)
	if err != nil {
		return nil
	}
	artifact, ok := artifactOf(b)
	if !ok {
		return nil
	}
	var ptr *C.wasmtime_module_t
	if errorOf(C.wasmtime_module_deserialize(e.opt.ptr, (*C.uint8_t)(unsafe.Pointer(&artifact[0])), C.size_t(len(artifact)), &ptr)) != nil {
		return nil
	}
	return ptr
}

// artifactOf returns the artifact a cache file's bytes hold, and whether
// they end with cacheMagic and its checksum.
func artifactOf(b []byte) ([]byte, bool) {
	if len(b) <= cacheFooter {
		return nil, false
	}
	artifact, footer := b[:len(b)-cacheFooter], b[len(b)-cacheFooter:]
	return artifact, bytes.Equal(footer[:len(cacheMagic)], cacheMagic) &&
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
