//go:build cgo

package wasmtimeruntime

/*
#include "shim.h"
*/
import "C"

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"time"
	"unsafe"

	"github.com/wasmkeep/wasmkeep/internal/cacheprune"
	"github.com/wasmkeep/wasmkeep/internal/populate"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// The compile cache keeps Module.Serialize's output, one file per module:
// <CacheDir>/wasmtime-<version>-<os>-<arch>/<sha256 of the wasm>.cwasm.
// Wasmtime refuses artifacts of another version, configuration or CPU, but
// it executes the machine code of one it accepts, so each file carries a
// digest of its artifact: a corrupt or truncated file is not loaded but
// compiled afresh and overwritten. A load marks its file used; an engine's
// start removes the files, and the folders of other versions, no start
// used for a week (cacheprune, ADR 1058).
//
// File layout: cacheMagic, then the SHA-256 of the artifact, then the
// artifact.
var cacheMagic = []byte("wasmkeep wasmtime cache 1\n")

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
	if path == "" {
		return nil
	}
	b, err := populate.ReadFile(path)
	if err != nil {
		return nil
	}
	head := len(cacheMagic) + sha256.Size
	if len(b) <= head || !bytes.Equal(b[:len(cacheMagic)], cacheMagic) {
		return nil
	}
	artifact := b[head:]
	if sum := sha256.Sum256(artifact); !bytes.Equal(sum[:], b[len(cacheMagic):head]) {
		return nil
	}
	var ptr *C.wasmtime_module_t
	cerr := C.wasmtime_module_deserialize(e.opt.ptr, (*C.uint8_t)(unsafe.Pointer(&artifact[0])), C.size_t(len(artifact)), &ptr)
	if errorOf(cerr) != nil {
		return nil
	}
	cacheprune.Touch(path, time.Now())
	return ptr
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
	sum := sha256.Sum256(artifact)
	// Another build's start may have removed the folder, unused for a week.
	os.MkdirAll(filepath.Dir(path), 0o700) // else CreateTemp says why
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(append(bytes.Clone(cacheMagic), sum[:]...))
	if err == nil {
		_, err = f.Write(artifact)
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
