package wazeroruntime

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/wasmkeep/wasmkeep/internal/cacheprune"
	"github.com/wasmkeep/wasmkeep/internal/spare"
	"github.com/wasmkeep/wasmkeep/internal/wasmbin"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// maxPages is the largest memory runtime.Memory can describe: Size is a
// uint32, and wazero reports 0 for a full 4 GiB memory.
const maxPages = 65535

type engine struct {
	rt    wazero.Runtime
	cache wazero.CompilationCache // nil without a CacheDir
	// cacheDir is this build's part of the CacheDir, emptied when wazero
	// finds an entry it cannot read.
	cacheDir string
	// tier is the code rt makes: TierOptimised with the compiler,
	// TierFast with the interpreter.
	tier runtime.Tier
	// fast is an interpreter on which modules start while rt compiles
	// them in the background (tiering: on or auto); nil without tiering.
	// minTiered is the smallest module started there.
	fast      wazero.Runtime
	minTiered int
	// background counts the compiles running in the background, which
	// Close waits for: wazero cannot stop them. failOptimise, set by tests
	// only, makes them fail with its error.
	background   sync.WaitGroup
	failOptimise error
	// spares are the modules' instances made ahead (module.go), whose
	// making and freeing Close waits for: closing rt closes every instance
	// of it, one being made included.
	spares spare.Group
	// instance is what every instance shares: anonymous (so one module can
	// be instantiated many times), real clocks, a cryptographic random
	// source, no arguments, environment or preopened directory, and no
	// start function (Instantiate runs _initialize itself).
	instance wazero.ModuleConfig
	// memoryLimitPages is runtime.Config's, which Compile checks modules
	// against.
	memoryLimitPages uint32
}

var _ runtime.Engine = (*engine)(nil)

func (d *driver) NewEngine(ctx context.Context, cfg runtime.Config) (runtime.Engine, error) {
	if cfg.MemoryLimitPages == 0 || cfg.MemoryLimitPages > maxPages {
		return nil, fmt.Errorf("wazero: MemoryLimitPages is %d, want 1 to %d", cfg.MemoryLimitPages, maxPages)
	}
	e := &engine{
		instance: wazero.NewModuleConfig().WithName("").WithStartFunctions().
			WithSysWalltime().WithNanotime(runtime.Monotonic, 1).WithRandSource(rand.Reader),
		tier:             runtime.TierFast,
		memoryLimitPages: cfg.MemoryLimitPages,
	}
	rc := wazero.NewRuntimeConfigInterpreter()
	if d.cfg.Compiler && d.cfg.Tiering != runtime.TieringFast {
		rc = wazero.NewRuntimeConfig() // the compiler where supported
		e.tier = runtime.TierOptimised
	}
	if cfg.CacheDir != "" {
		dir, err := cacheDir(cfg.CacheDir)
		if err != nil {
			return nil, err
		}
		// wazero's entries are named by keys it does not export, so a use
		// cannot mark them: they are compiled again a week after they were
		// written, and the folders of other builds go a week after their last.
		cacheprune.Prune(cfg.CacheDir, "wazero", dir, time.Now())
		if e.cache, err = wazero.NewCompilationCacheWithDir(dir); err != nil {
			return nil, fmt.Errorf("wazero: compilation cache: %w", err)
		}
		e.cacheDir = dir
		rc = rc.WithCompilationCache(e.cache)
	}
	var err error
	if e.rt, err = newRuntime(ctx, rc, cfg); err != nil {
		return nil, errors.Join(err, e.Close(ctx))
	}
	if d.cfg.Tiering == runtime.TieringAuto {
		e.minTiered = minTieredSize
	}
	// Tiering needs the compiler: elsewhere wazero interprets anyway.
	tiers := d.cfg.Tiering == runtime.TieringOn || d.cfg.Tiering == runtime.TieringAuto
	if tiers && e.tier == runtime.TierOptimised && compilerSupported() {
		if e.fast, err = newRuntime(ctx, wazero.NewRuntimeConfigInterpreter(), cfg); err != nil {
			return nil, errors.Join(err, e.Close(ctx))
		}
	}
	return e, nil
}

// newRuntime makes a runtime with rc and the engine's settings, WASI and the
// host module.
func newRuntime(ctx context.Context, rc wazero.RuntimeConfig, cfg runtime.Config) (wazero.Runtime, error) {
	// CloseOnContextDone makes guests check for a stop at every loop header
	// (and function entry, see prepare), compiled or interpreted: that is
	// how a ctx interrupts a guest. prepare moves code, so DWARF line
	// numbers would be wrong: traps name functions only.
	rc = rc.WithMemoryLimitPages(cfg.MemoryLimitPages).WithCloseOnContextDone(true).WithDebugInfoEnabled(false)
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		return nil, errors.Join(fmt.Errorf("wazero: WASI: %w", err), rt.Close(ctx))
	}
	if err := instantiateHost(ctx, rt, cfg); err != nil {
		return nil, errors.Join(fmt.Errorf("wazero: host module %q: %w", cfg.HostModule, err), rt.Close(ctx))
	}
	return rt, nil
}

// compilerSupported reports whether wazero compiles on this platform
// (wazero.NewRuntimeConfig's rule).
func compilerSupported() bool {
	switch goruntime.GOARCH {
	case "amd64", "arm64":
		switch goruntime.GOOS {
		case "linux", "darwin", "freebsd", "netbsd", "dragonfly", "windows":
			return true
		}
	}
	return false
}

// instantiateHost builds the host module from the kernel's functions.
func instantiateHost(ctx context.Context, rt wazero.Runtime, cfg runtime.Config) error {
	if len(cfg.HostFunctions) == 0 {
		return nil
	}
	if cfg.HostModule == "" {
		return errors.New("host functions need a module name")
	}
	b := rt.NewHostModuleBuilder(cfg.HostModule)
	seen := map[string]bool{}
	for _, hf := range cfg.HostFunctions {
		switch {
		case seen[hf.Name]:
			return fmt.Errorf("function %q defined twice", hf.Name)
		case hf.Func == nil:
			return fmt.Errorf("function %q has no Func", hf.Name)
		}
		seen[hf.Name] = true
		b.NewFunctionBuilder().
			WithGoModuleFunction(hostFunc(hf.Func), apiTypes(hf.Params), apiTypes(hf.Results)).
			Export(hf.Name)
	}
	_, err := b.Instantiate(ctx)
	return err
}

// hostFunc adapts a kernel host function to wazero's fast calling convention
// (no reflection). m is the calling guest instance.
func hostFunc(f func(context.Context, runtime.Memory, []uint64)) api.GoModuleFunc {
	return func(ctx context.Context, m api.Module, stack []uint64) {
		f(ctx, memoryOf(m), stack)
	}
}

// memoryOf is the guest's "memory" as host functions see it. api.Memory has
// runtime.Memory's methods, so it is passed as is: no adapter, no allocation.
func memoryOf(m api.Module) runtime.Memory {
	if mem := m.ExportedMemory("memory"); mem != nil {
		return mem
	}
	return noMemory{}
}

// noMemory stands for the memory of a guest that exports none: every range
// is out of bounds.
type noMemory struct{}

func (noMemory) Read(uint32, uint32) ([]byte, bool) { return nil, false }
func (noMemory) Write(uint32, []byte) bool          { return false }
func (noMemory) Size() uint32                       { return 0 }

func apiTypes(ts []runtime.ValueType) []api.ValueType {
	out := make([]api.ValueType, len(ts))
	for i, t := range ts {
		out[i] = api.ValueType(t)
	}
	return out
}

func (e *engine) Compile(ctx context.Context, wasm []byte) (runtime.Module, error) {
	p, err := prepare(wasm, e.memoryLimitPages)
	if err != nil {
		return nil, fmt.Errorf("wazero: compile: %w", err)
	}
	// With tiering, a module starts on the interpreter unless it is small
	// (auto) or its compiled code is in the cache already.
	sum := sha256.Sum256(p.wasm)
	tiered := e.fast != nil && len(p.wasm) >= e.minTiered && !e.compiled(sum)
	if e.fast != nil {
		slog.Debug("wazero: compiling", "module", hex.EncodeToString(sum[:8]), "bytes", len(p.wasm), "interpreted_first", tiered)
	}
	first := &code{rt: e.rt, tier: e.tier}
	if tiered {
		first = &code{rt: e.fast, tier: runtime.TierFast}
		first.cm, err = e.fast.CompileModule(ctx, p.wasm)
	} else {
		first.cm, err = e.compile(ctx, p.wasm)
	}
	if err != nil {
		return nil, fmt.Errorf("wazero: compile: %w", err)
	}
	cm := first.cm
	imps, err := imports(p.imports, cm.ImportedFunctions())
	if err != nil {
		return nil, errors.Join(fmt.Errorf("wazero: reading imports: %w", err), cm.Close(ctx))
	}
	m := &module{e: e, imports: imps, memories: map[string]bool{}, optimised: make(chan struct{}), start: wasmbin.HasSection(wasm, wasmbin.StartSection)}
	m.code.Store(first)
	m.newSpare()
	if p.image != nil {
		if m.image, err = newImage(p.image); err != nil {
			return nil, errors.Join(fmt.Errorf("wazero: %w", err), cm.Close(ctx))
		}
	}
	for name, def := range cm.ExportedFunctions() {
		m.exports = append(m.exports, runtime.Export{Name: name, Signature: runtime.Signature{
			Params: valueTypes(def.ParamTypes()), Results: valueTypes(def.ResultTypes()),
		}})
		m.initialize = m.initialize || name == "_initialize"
	}
	slices.SortFunc(m.exports, func(a, b runtime.Export) int { return strings.Compare(a.Name, b.Name) })
	for name := range cm.ExportedMemories() {
		m.memories[name] = true
	}
	if !tiered {
		close(m.optimised)
		return m, nil
	}
	e.background.Add(1)
	go func() {
		defer e.background.Done()
		m.optimise(p.wasm, sum)
	}()
	return m, nil
}

// compile compiles wasm on rt, through the cache if there is one.
func (e *engine) compile(ctx context.Context, wasm []byte) (wazero.CompiledModule, error) {
	cm, err := e.rt.CompileModule(ctx, wasm)
	if err != nil && e.cacheDir != "" && strings.Contains(err.Error(), "compilationcache") {
		// wazero fails the compile when it cannot read a cache entry rather
		// than compiling afresh, and its cache keys cannot be computed
		// outside wazero, so drop every entry of this build and retry.
		if perr := purge(e.cacheDir); perr != nil {
			return nil, fmt.Errorf("%w (clearing the cache: %w)", err, perr)
		}
		cm, err = e.rt.CompileModule(ctx, wasm)
	}
	var missing *fs.PathError
	if err != nil && e.cacheDir != "" && errors.As(err, &missing) && errors.Is(err, fs.ErrNotExist) &&
		strings.HasPrefix(missing.Path, e.cacheDir+string(filepath.Separator)) {
		// wazero fails the compile when it cannot keep the code, as when
		// another build's start removed this build's folder, unused for
		// a week (cacheprune): make it again.
		if os.MkdirAll(filepath.Dir(missing.Path), 0o700) == nil {
			cm, err = e.rt.CompileModule(ctx, wasm)
		}
	}
	return cm, err
}

func (e *engine) Close(ctx context.Context) error {
	e.spares.Close()
	e.background.Wait()
	var err error
	for _, rt := range []wazero.Runtime{e.fast, e.rt} {
		if rt != nil {
			err = errors.Join(err, rt.Close(ctx))
		}
	}
	if e.cache != nil {
		err = errors.Join(err, e.cache.Close(ctx))
	}
	return err
}

// cacheDir is the part of root this build keeps compiled code in, named
// after wazero's version (wazero files its entries under it too, read from
// the build's dependency list) so that cacheprune can remove other
// versions' whole. A replaced module reports the version it replaces: this
// repository's patched copy (third_party/wazero, ADR 1065) adds its digest
// to the name; a test binary has no dependency list ("dev" to wazero) and
// any other replacement is unknown, so either could load code another
// wazero compiled: such builds get a directory named after their
// executable.
func cacheDir(root string) (string, error) {
	if info, ok := debug.ReadBuildInfo(); ok {
		if name := cacheDirName(info.Deps); name != "" {
			return filepath.Join(root, name), nil
		}
	}
	id, err := executableID()
	if err != nil {
		return "", fmt.Errorf("wazero: compilation cache: naming this build: %w", err)
	}
	return filepath.Join(root, "wazero-build-"+id), nil
}

// thirdPartyWazero is the path go.mod's replace gives this repository's
// copy of wazero, and thirdPartyWazeroDigest a digest of its files (a
// compile cache must not outlive a change to them:
// TestThirdPartyWazeroDigest checks it).
const (
	thirdPartyWazero       = "./third_party/wazero"
	thirdPartyWazeroDigest = "96e61f7d1774117a"
)

// cacheDirName names the cache directory of a build with these
// dependencies, or returns "" if it cannot name its wazero. The toolchain
// records a replacement by a directory with the version "(devel)".
func cacheDirName(deps []*debug.Module) string {
	for _, dep := range deps {
		if dep.Path != "github.com/tetratelabs/wazero" || dep.Version == "" {
			continue
		}
		switch {
		case dep.Replace == nil:
			return "wazero-" + dep.Version
		case dep.Replace.Path == thirdPartyWazero && (dep.Replace.Version == "(devel)" || dep.Replace.Version == ""):
			return "wazero-" + dep.Version + "-" + thirdPartyWazeroDigest
		}
	}
	return ""
}

// executableID is a digest of the running executable, read once.
var executableID = sync.OnceValues(func() (string, error) {
	path, err := os.Executable()
	if err != nil {
		return "", err
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)[:8]), nil
})

// purge removes the cache entries under dir. It leaves wazero's temporary
// files, which a concurrent compile may be about to rename into place.
func purge(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || strings.HasSuffix(path, ".tmp") {
			return err
		}
		return os.Remove(path)
	})
}
