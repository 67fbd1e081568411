package node

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/atomicfile"
	"github.com/wasmkeep/wasmkeep/internal/cacheprune"
	"github.com/wasmkeep/wasmkeep/internal/populate"
	"github.com/wasmkeep/wasmkeep/internal/preinit"
	"github.com/wasmkeep/wasmkeep/kernel/cputime"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// Pre-initialisation (ADR 1040, docs/abi.md): a module that exports
// preinit.Marker has its start (_initialize: a Go guest's runtime and
// package init) run once, in the background after its class loads (the
// class serves the module meanwhile), and every new instance starts
// from the memory and globals it left, as a module of their own whose data
// segments hold them. An actor's first request then skips the start, and
// the pages the start wrote are shared by every instance (copy-on-write,
// both engines) until one writes them.
//
// The snapshot is kept under the cache directory, named after the module's
// SHA-256, so a restart compiles it from the engine's cache and runs no
// start at all. A module whose snapshot cannot be made (its start calls the
// host, fails, or the module is of a kind preinit refuses) is served as if
// it had not asked, and the log says why.

// preinitVersion names the snapshots of this build's rules: a change in
// what a snapshot holds takes a new name, so old files are never read.
const preinitVersion = "v1"

// preinitPath is where the snapshot of the module whose hex SHA-256 is
// version is kept.
func (n *Node) preinitPath(version string) string {
	return filepath.Join(n.opts.CacheDir, "preinit", preinitVersion+"-"+version+".wasm")
}

// loadPreinitialised returns the module to serve wasm (whose hex SHA-256 is
// version) with: the kept pre-initialised module if there is one; else wasm
// instrumented, with the preinit.Module that n.preinitialise then snapshots
// in the background (so a fresh start waits for one compile, not two); or,
// for a module preinit refuses, wasm as it is. Only the errors wasm itself would give fail it.
func (n *Node) loadPreinitialised(ctx context.Context, wasm []byte, version, path string) (runtime.Module, hooks, *preinit.Module, error) {
	if n.opts.CacheDir != "" {
		kept := n.preinitPath(version)
		if snap, err := populate.ReadFile(kept); err == nil {
			cacheprune.Touch(kept, time.Now()) // in use: see removeStaleSnapshots
			mod, h, err := n.compileModule(ctx, snap, path)
			if err == nil {
				n.log.Info("module pre-initialised at an earlier start", "module", path)
				return mod, h, nil, nil
			}
			if ctx.Err() != nil {
				return nil, hooks{}, nil, err
			}
			n.log.Warn("a kept pre-initialised module is not usable; making it again", "module", path, "err", err)
			os.Remove(kept)
		}
	}
	asIs := func(why error) (runtime.Module, hooks, *preinit.Module, error) {
		n.log.Warn("module not pre-initialised", "module", path, "why", why)
		mod, h, err := n.compileModule(ctx, wasm, path)
		return mod, h, nil, err
	}
	m, err := preinit.Parse(wasm)
	if err != nil {
		return asIs(err)
	}
	// The instrumented module behaves as wasm does (it has one export
	// more): the class serves it until the snapshot replaces it, or for
	// good if that fails.
	mod, h, err := n.compileModule(ctx, m.Instrumented(), path)
	if err != nil {
		return asIs(err)
	}
	return mod, h, m, nil
}

// removeStaleSnapshots removes, at start, the kept snapshots no start has
// used for cacheprune.Unused (a start that uses one marks it), and by the
// same rule the files a write cut short: a deploy leaves one per class of
// each build it replaces, but a cache may be shared, or a node started on
// older builds again.
func (n *Node) removeStaleSnapshots() {
	if n.opts.CacheDir != "" {
		cacheprune.RemoveStale(filepath.Dir(n.preinitPath("")), time.Now())
	}
}

// preinitialise makes c's pre-initialised module in the background, if
// loadCode left it to do, and gives it to the code's new instances (of
// every version that serves it).
func (n *Node) preinitialise(c *code) {
	path := c.path
	m := c.preinit
	if m == nil {
		return
	}
	c.preinit = nil // the wasm it holds goes once it is done
	n.background.Add(1)
	go func() {
		defer n.background.Done()
		// One at a time: a compile holds hundreds of MB, and the cores are
		// the requests' meanwhile.
		n.preinitMu.Lock()
		defer n.preinitMu.Unlock()
		if n.ctx.Err() != nil { // the node stopped while this one waited
			return
		}
		start := time.Now()
		snap, err := n.snapshot(n.ctx, c.current(), m)
		var mod runtime.Module
		if err == nil {
			mod, _, err = n.compileModule(context.Background(), snap, path)
		}
		if err != nil {
			if n.ctx.Err() == nil { // else the node stopped it
				n.log.Warn("module not pre-initialised", "module", path, "why", err)
			}
			return
		}
		if kept := n.preinitPath(c.version); n.opts.CacheDir != "" {
			os.MkdirAll(filepath.Dir(kept), 0o700) // else the write says why
			if err := atomicfile.Write(kept, snap); err != nil {
				n.log.Warn("keeping the pre-initialised module failed: it is made again at the next start", "module", path, "err", err)
			}
		}
		c.replace(mod) // closed at once if the node stopped meanwhile
		// Logged last: once it is, the snapshot serves and is kept.
		n.log.Info("module pre-initialised", "module", path, "bytes", len(snap), "took", time.Since(start).Round(time.Millisecond))
	}()
}

// snapshot runs the start of an instance of mod (m instrumented) and
// returns the module as the start left it. The start has an event's wall
// clock and its whole CPU cap (its budget and the host's, since it runs
// once for every instance to come, maybe on a fast tier).
func (n *Node) snapshot(ctx context.Context, mod runtime.Module, m *preinit.Module) ([]byte, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, n.opts.WallClock, errWallClock)
	defer cancel()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	goruntime.LockOSThread() // the CPU watch reads this thread's clock
	defer goruntime.UnlockOSThread()
	watch := cputime.Start(n.opts.CPUBudget+n.opts.HostCPUBudget, func() { stop(errCPUBudget) })
	defer watch.Stop()
	var out capped
	inst, err := mod.Instantiate(ctx, runtime.InstanceConfig{Stdout: &out, Stderr: &out})
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			err = fmt.Errorf("%w: %w", err, cause)
		}
		if out.Len() > 0 {
			return nil, fmt.Errorf("its start failed: %w (it printed %q)", err, out.String())
		}
		return nil, fmt.Errorf("its start failed: %w", err)
	}
	defer inst.Close(ctx)
	globals := make([]uint64, m.Globals())
	if err := inst.Function(preinit.GlobalsExport).Call(ctx, globals); err != nil {
		return nil, fmt.Errorf("reading its globals: %w", err)
	}
	mem := inst.Memory()
	if mem.Size() > preinit.MaxMemory {
		return nil, fmt.Errorf("its start left %d MiB of memory, more than the %d MiB a snapshot may hold", mem.Size()>>20, preinit.MaxMemory>>20)
	}
	b, ok := mem.Read(0, mem.Size())
	if !ok {
		return nil, fmt.Errorf("reading its memory of %d bytes failed", mem.Size())
	}
	return m.Snapshot(b, globals)
}

// capped keeps the first 4 KiB written to it: what a failing start printed,
// for the log.
type capped struct{ bytes.Buffer }

func (c *capped) Write(b []byte) (int, error) {
	if room := 4096 - c.Len(); room > 0 {
		c.Buffer.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}
