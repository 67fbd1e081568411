package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/wasmkeep/wasmkeep/internal/populate"
	"github.com/wasmkeep/wasmkeep/internal/preinit"
	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/node/access"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// class is one class of the version the node serves (deploy.go): its
// compiled code and what the version says of it. Each version has classes
// of its own; they share the code while its bytes are unchanged.
type class struct {
	*code
	name string
	// seq is the seq of the version it was swapped in under (book ADR
	// 0008, revision 2026-11-04): what its events record in the actor's
	// database and check it against; 0 for --actor classes, never checked.
	seq    uint64
	access access.Access // for requests from outside
	// stateless: the stateless component, which has no database, address
	// or alarms, and gets a fresh instance per request.
	stateless bool
	// spec is what the version says of it, kept to rebuild its values on
	// a secrets change (SetSecrets).
	spec ClassSpec
	// env is what env_get answers: the deployed configuration, the app's
	// secrets over it, the node's --env values over both (values).
	env map[string]string
	// missing are the required names env does not set: while there are
	// any, the class refuses its events.
	missing []string
}

// code is one compiled module, by the hash of its bytes.
type code struct {
	path    string // the module's file
	version string // hex SHA-256 of the module: on-init reruns when it changes
	hooks   hooks
	// mu guards module, which a pre-initialised module replaces once made
	// (preinit.go), closed, and the counts of what module served.
	mu     sync.Mutex
	module *served
	closed bool // no version serves it any more (or the node closed)
	// preinit is the module to pre-initialise in the background, nil for
	// none; module is its instrumented form meanwhile.
	preinit *preinit.Module
}

// hooks records which optional exports a module has.
type hooks struct {
	onInit bool
}

// errRetired is an instantiation of code no version serves any more.
var errRetired = errors.New("the module was retired by a newer version")

var (
	hookSig    = runtime.Signature{Results: []runtime.ValueType{runtime.I32}}
	requestSig = runtime.Signature{Params: []runtime.ValueType{runtime.I32}, Results: []runtime.ValueType{runtime.I32}}
	voidSig    = runtime.Signature{}
	wsSig      = runtime.Signature{Params: []runtime.ValueType{runtime.I64, runtime.I32}, Results: []runtime.ValueType{runtime.I32}}
	wsCloseSig = runtime.Signature{Params: []runtime.ValueType{runtime.I64, runtime.I32, runtime.I32}, Results: []runtime.ValueType{runtime.I32}}
)

// loadCode reads a module file and returns the code in have with its
// bytes, or compiles and checks it (fresh). A module that asks to be
// pre-initialised is, unless the node says not to (preinit.go).
func (n *Node) loadCode(ctx context.Context, path string, have map[string]*code) (c *code, fresh bool, err error) {
	wasm, err := populate.ReadFile(path)
	if err != nil {
		return nil, false, err
	}
	sum := sha256.Sum256(wasm)
	if c := have[hex.EncodeToString(sum[:])]; c != nil {
		return c, false, nil
	}
	c = &code{path: path, version: hex.EncodeToString(sum[:])}
	var mod runtime.Module
	switch asks := preinit.Asks(wasm); {
	case asks && !n.opts.NoPreinit:
		mod, c.hooks, c.preinit, err = n.loadPreinitialised(ctx, wasm, c.version, path)
	case asks:
		// Said, so that whoever waits for one of preinit.go's lines (a
		// benchmark before it measures) knows none is coming.
		n.log.Info("module not pre-initialised", "module", path, "why", "pre-initialisation is off (node.preinit)")
		fallthrough
	default:
		mod, c.hooks, err = n.compileModule(ctx, wasm, path)
	}
	if err != nil {
		return nil, false, err
	}
	c.module = &served{Module: mod}
	return c, true, nil
}

// served is a module a class makes instances of, with the count of its
// Instantiates running: one that is replaced, or whose class closes,
// closes when the last returns, so that no module closes under an
// Instantiate (which may run a guest's start for as long as an event).
type served struct {
	runtime.Module
	making  int
	retired bool // replaced, or the class closed
	done    bool // closed
}

// closable marks s retired and reports whether the caller, holding the
// class's mu, is to close it now.
func (s *served) closable() bool {
	s.retired = true
	if s.making > 0 || s.done {
		return false
	}
	s.done = true
	return true
}

// current is the module new instances of the class are made of.
func (c *code) current() runtime.Module {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.module.Module
}

// retired reports whether no version serves c any more: an instance of it
// can no longer be made.
func (c *code) retired() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// instantiate makes an instance of the class's module and says which tier
// of code it runs (runtime.Tiered).
func (c *code) instantiate(ctx context.Context, cfg runtime.InstanceConfig) (runtime.Instance, runtime.Tier, error) {
	c.mu.Lock()
	if c.closed { // an event that took its class before a version replaced it
		c.mu.Unlock()
		return nil, "", unavailable("the app's version changed as the event started; retry", errRetired)
	}
	s := c.module
	s.making++
	c.mu.Unlock()
	tier := runtime.TierOptimised
	if t, ok := s.Module.(runtime.Tiered); ok {
		tier = t.Tier() // before Instantiate: the tier may change meanwhile
	}
	inst, err := s.Instantiate(ctx, cfg)
	c.mu.Lock()
	s.making--
	closeNow := s.retired && s.closable()
	c.mu.Unlock()
	if closeNow {
		s.Close(context.Background())
	}
	return inst, tier, err
}

// replace makes mod the class's module; the one it replaces closes once no
// Instantiate runs on it (its instances run on: both engines allow it). If
// the class was closed meanwhile, mod closes instead.
func (c *code) replace(mod runtime.Module) {
	c.mu.Lock()
	old := &served{Module: mod}
	if !c.closed {
		old, c.module = c.module, old
	}
	closeNow := old.closable()
	c.mu.Unlock()
	if closeNow {
		old.Close(context.Background())
	}
}

func (c *code) close(ctx context.Context) {
	c.mu.Lock()
	c.closed = true
	closeNow := c.module.closable()
	c.mu.Unlock()
	if closeNow {
		c.module.Close(ctx)
	}
}

// compileModule compiles and checks the module read from path.
func (n *Node) compileModule(ctx context.Context, wasm []byte, path string) (runtime.Module, hooks, error) {
	return compileModule(ctx, n.engine, n.host, wasm, path)
}

// compileModule compiles wasm, read from path, on eng and checks it
// against host.
func compileModule(ctx context.Context, eng runtime.Engine, host map[string]runtime.HostFunction, wasm []byte, path string) (runtime.Module, hooks, error) {
	mod, err := eng.Compile(ctx, wasm)
	if err != nil {
		return nil, hooks{}, fmt.Errorf("compiling %s: %w", path, err)
	}
	h, err := checkModule(mod, host)
	if err != nil {
		mod.Close(ctx)
		return nil, hooks{}, fmt.Errorf("%s: %w", path, err)
	}
	return mod, h, nil
}

// newEngine makes an engine of rt serving the host ABI, with the host's
// functions by name.
func newEngine(ctx context.Context, rt runtime.Driver, memoryLimit uint32, cacheDir string) (runtime.Engine, map[string]runtime.HostFunction, error) {
	host := hostFunctions()
	hostList := make([]runtime.HostFunction, 0, len(host))
	for _, f := range host {
		hostList = append(hostList, f)
	}
	sort.Slice(hostList, func(i, j int) bool { return hostList[i].Name < hostList[j].Name })
	eng, err := rt.NewEngine(ctx, runtime.Config{
		MemoryLimitPages: memoryLimit / 65536,
		CacheDir:         cacheDir,
		HostModule:       abi.HostModule,
		HostFunctions:    hostList,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("runtime engine: %w", err)
	}
	return eng, host, nil
}

// CheckModule checks the module file at path as a node loading it as a
// class or front does, before it is deployed: compiled by rt within the
// compile bounds under the default memory limit, its imports checked
// against the host ABI and its exports against what the node calls.
func CheckModule(ctx context.Context, rt runtime.Driver, path string) error {
	wasm, err := populate.ReadFile(path)
	if err != nil {
		return err
	}
	eng, host, err := newEngine(ctx, rt, Options{}.WithDefaults().MemoryLimit, "")
	if err != nil {
		return err
	}
	defer eng.Close(ctx)
	mod, _, err := compileModule(ctx, eng, host, wasm, path)
	if err != nil {
		return err
	}
	return mod.Close(ctx)
}

// checkModule refuses a module that imports what the host does not provide
// or does not declare ABI v1, with a message naming what is wrong.
func checkModule(mod runtime.Module, host map[string]runtime.HostFunction) (hooks, error) {
	for _, im := range mod.Imports() {
		if err := checkImport(im, host); err != nil {
			return hooks{}, err
		}
	}
	exports := map[string]runtime.Signature{}
	for _, ex := range mod.Exports() {
		exports[ex.Name] = ex.Signature
	}
	if _, ok := exports[abi.VersionExport]; !ok {
		for n := range exports {
			if v, found := strings.CutPrefix(n, "wasmkeep_abi_v"); found {
				return hooks{}, fmt.Errorf("module is built for WasmKeep ABI v%s, but this host serves ABI v%d", v, abi.Version)
			}
		}
		return hooks{}, fmt.Errorf("module declares no WasmKeep ABI version (it must export %s; build it with a WasmKeep SDK)", abi.VersionExport)
	}
	if _, ok := exports["_start"]; ok {
		if _, ok := exports[abi.ExportInitialize]; !ok {
			return hooks{}, fmt.Errorf("module is a command (it exports _start): build a reactor instead (Go: go build -buildmode=c-shared; C: -mexec-model=reactor)")
		}
	}
	if !mod.ExportsMemory(abi.ExportMemory) {
		return hooks{}, fmt.Errorf("module exports no memory named %q", abi.ExportMemory)
	}
	want := map[string]runtime.Signature{
		abi.ExportOnRequest:  requestSig,
		abi.ExportOnInit:     hookSig,
		abi.ExportInitialize: voidSig,
		abi.VersionExport:    voidSig,

		abi.ExportOnWebSocketOpen:    wsSig,
		abi.ExportOnWebSocketMessage: wsSig,
		abi.ExportOnWebSocketClose:   wsCloseSig,
	}
	for n, sig := range want {
		got, ok := exports[n]
		if ok && !sameSig(got, sig) {
			return hooks{}, fmt.Errorf("export %s has type %s, want %s", n, sigString(got), sigString(sig))
		}
	}
	if _, ok := exports[abi.ExportOnRequest]; !ok {
		return hooks{}, fmt.Errorf("module exports no %s (every actor handles requests)", abi.ExportOnRequest)
	}
	_, onInit := exports[abi.ExportOnInit]
	return hooks{onInit: onInit}, nil
}

func checkImport(im runtime.Import, host map[string]runtime.HostFunction) error {
	name := im.Module + "." + im.Name
	if !im.IsFunc {
		return fmt.Errorf("module imports %s, which is not a function: the host provides only functions", name)
	}
	var want runtime.Signature
	var provider string // who defines want
	switch im.Module {
	case abi.HostModule:
		hf, ok := host[im.Name]
		if !ok {
			return fmt.Errorf("module imports %s, which the host does not provide (ABI v%d; see docs/abi.md)", name, abi.Version)
		}
		want, provider = hf.Signature, "the host provides"
	case runtime.WASIModule:
		sig, ok := runtime.WASIPreview1[im.Name]
		if !ok {
			return fmt.Errorf("module imports %s, which is not part of WASI preview 1", name)
		}
		want, provider = sig, "WASI preview 1 defines it as"
	default:
		return fmt.Errorf("module imports %s, which the host does not provide (only %s and %s)", name, abi.HostModule, runtime.WASIModule)
	}
	if !sameSig(want, im.Signature) {
		return fmt.Errorf("module imports %s with type %s, but %s %s", name, sigString(im.Signature), provider, sigString(want))
	}
	return nil
}

func sameSig(a, b runtime.Signature) bool {
	return slices.Equal(a.Params, b.Params) && slices.Equal(a.Results, b.Results)
}

func sigString(s runtime.Signature) string {
	str := func(ts []runtime.ValueType) string {
		parts := make([]string, len(ts))
		for i, t := range ts {
			parts[i] = t.String()
		}
		return "(" + strings.Join(parts, ", ") + ")"
	}
	return str(s.Params) + " -> " + str(s.Results)
}
