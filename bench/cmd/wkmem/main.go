//go:build linux

// Command wkmem measures where the memory of resident actors goes. Unlike
// wasmkeep bench, which reads a server's RSS from outside, it runs a node in
// its own process (real engine, real SQLite, requests through the node's
// handler without sockets) and splits what each actor costs:
//
//   - the guest's linear memory: the pages present in the process's page
//     tables (/proc/self/pagemap), private (written) or shared (read from a
//     copy-on-write image), by region: data segments, the rest of the
//     initial memory, and what the guest grew;
//   - the host's Go heap (runtime/metrics: mapped and not released);
//   - the rest: the engine's own per-instance structures, SQLite's memory,
//     thread stacks.
//
// Each engine runs in a child process of its own, one after the other.
//
//	wkmem -guest counter.wasm [-engines wazero,wasmtime] [-actors 200] [-posts 0]
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/wasmkeep/wasmkeep/internal/linearmem"
	"github.com/wasmkeep/wasmkeep/internal/preinit"
	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
	wkruntime "github.com/wasmkeep/wasmkeep/kernel/runtime"
	wasmtimeruntime "github.com/wasmkeep/wasmkeep/plugins/runtime-wasmtime"
	wazeroruntime "github.com/wasmkeep/wasmkeep/plugins/runtime-wazero"
	sqlitestorage "github.com/wasmkeep/wasmkeep/plugins/storage-sqlite"
)

// baseActors are woken before the first reading, so that compiling the
// guest and the node's first allocations are not counted.
const baseActors = 10

type options struct {
	guest   string
	engine  string // set in a child: the one engine it measures
	engines string
	actors  int
	posts   int
	pageMap bool
	verbose bool
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "wkmem:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	var o options
	fs := flag.NewFlagSet("wkmem", flag.ContinueOnError)
	fs.StringVar(&o.guest, "guest", "", "the actor's .wasm file, served as class counter (required)")
	fs.StringVar(&o.engines, "engines", "wazero,wasmtime", "the runtime plugins to measure, one after the other")
	fs.StringVar(&o.engine, "engine", "", "measure this engine in this process (what each child runs)")
	fs.IntVar(&o.actors, "actors", 200, "actors to wake after the first "+strconv.Itoa(baseActors))
	fs.BoolVar(&o.pageMap, "map", false, "also print the pages of the first new actor's linear memory: . absent, p private, s shared, one character a page")
	fs.BoolVar(&o.verbose, "v", false, "print the node's log (with what guests print) on stderr")
	fs.IntVar(&o.posts, "posts", 0, "POSTs each actor gets after the GET that wakes it (the steady state of a busier actor)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.guest == "":
		return errors.New("-guest is required")
	case o.actors < 1:
		return fmt.Errorf("-actors is %d, want at least 1", o.actors)
	case o.posts < 0:
		return fmt.Errorf("-posts is %d, want 0 or more", o.posts)
	}
	if o.engine != "" {
		r, err := measure(o)
		if err != nil {
			return err
		}
		r.print(stdout)
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	for _, e := range strings.Split(o.engines, ",") {
		cmd := exec.Command(exe, "-engine", e, "-guest", o.guest,
			"-actors", strconv.Itoa(o.actors), "-posts", strconv.Itoa(o.posts), "-map="+strconv.FormatBool(o.pageMap), "-v="+strconv.FormatBool(o.verbose))
		cmd.Stdout, cmd.Stderr = stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("engine %s: %w", e, err)
		}
	}
	return nil
}

// runtimes are the engines wkmem can measure, by plugin name.
var runtimes = map[string]func() plugin.Info{"wazero": wazeroruntime.Info, "wasmtime": wasmtimeruntime.Info}

func newDriver(name string) (wkruntime.Driver, error) {
	info, ok := runtimes[name]
	if !ok {
		return nil, fmt.Errorf("unknown engine %q (want wazero or wasmtime)", name)
	}
	i := info()
	if i.Unavailable != "" {
		return nil, fmt.Errorf("engine %s: %s", name, i.Unavailable)
	}
	d, err := i.New(i.NewConfig())
	if err != nil {
		return nil, err
	}
	return d.(wkruntime.Driver), nil
}

// measure wakes the actors on one engine and splits their memory.
func measure(o options) (*report, error) {
	wasm, err := os.ReadFile(o.guest)
	if err != nil {
		return nil, err
	}
	layout, err := readLayout(wasm)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.guest, err)
	}
	dir, err := os.MkdirTemp("", "wkmem-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	logTo := io.Discard
	if o.verbose {
		logTo = os.Stderr
	}
	if preinit.Asks(wasm) {
		// As a node that has run before: its instances start from the
		// kept snapshot, and its making is not measured.
		if err := preinitialise(o, dir, logTo); err != nil {
			return nil, err
		}
	}
	rec, n, err := newNode(o, dir, slog.New(slog.NewTextHandler(logTo, nil)))
	if err != nil {
		return nil, err
	}
	defer n.Close()

	start := time.Now()
	if _, err := wake(n, 0, baseActors, o.posts); err != nil {
		return nil, err
	}
	runtime.GC()
	before, err := readSnapshot()
	if err != nil {
		return nil, err
	}
	mark := rec.count()
	use0 := readUsage()
	firsts, err := wake(n, baseActors, baseActors+o.actors, o.posts)
	if err != nil {
		return nil, err
	}
	use := readUsage().since(use0)
	after, err := readSnapshot()
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	runtime.GC()
	debug.FreeOSMemory()
	collected, err := readSnapshot()
	if err != nil {
		return nil, err
	}
	lin, err := rec.scan(mark, layout)
	if err != nil {
		return nil, err
	}
	return &report{o: o, layout: layout, before: before, after: after, collected: collected, linear: lin, elapsed: elapsed, use: use, firstP50: median(firsts)}, nil
}

// newNode starts a node on dir serving o.guest as class counter, on a
// recorder of o.engine.
func newNode(o options, dir string, log *slog.Logger) (*recorder, *node.Node, error) {
	rt, err := newDriver(o.engine)
	if err != nil {
		return nil, nil, err
	}
	st, err := sqlitestorage.New(sqlitestorage.NewConfig())
	if err != nil {
		return nil, nil, err
	}
	rec := &recorder{Driver: rt}
	n, err := node.New(context.Background(), node.Options{
		DataDir:      dir,
		Classes:      map[string]string{"counter": o.guest},
		MaxInstances: baseActors + o.actors + 1,
		IdleTimeout:  time.Hour,
		// Memory is measured, not the budget: a Go actor's first events
		// fault in its memory image's pages, charged to the guest, past the
		// default 50 ms on a loaded machine at times (issue 30).
		CPUBudget: time.Second,
		Logger:    log,
	}, rec, st)
	return rec, n, err
}

// preinitialise runs a node on dir until it has kept the guest's
// pre-initialised snapshot, which it makes in the background after the
// first answer.
func preinitialise(o options, dir string, logTo io.Writer) error {
	done := make(chan string, 1)
	_, n, err := newNode(o, dir, slog.New(logSignal{Handler: slog.NewTextHandler(logTo, nil), done: done}))
	if err != nil {
		return err
	}
	defer n.Close()
	if _, err := wake(n, baseActors+o.actors, baseActors+o.actors+1, 0); err != nil {
		return err
	}
	select {
	case msg := <-done:
		if msg != preinitialised {
			return fmt.Errorf("the node logged %q", msg)
		}
		return nil
	case <-time.After(5 * time.Minute):
		return errors.New("no snapshot after 5 minutes")
	}
}

// The node's log lines that end a pre-initialisation (kernel/node/preinit.go).
const (
	preinitialised    = "module pre-initialised"
	notPreinitialised = "module not pre-initialised"
)

// logSignal sends on done the message of the line that ends a
// pre-initialisation.
type logSignal struct {
	slog.Handler
	done chan string
}

func (h logSignal) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == preinitialised || r.Message == notPreinitialised {
		select {
		case h.done <- r.Message:
		default:
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h logSignal) WithAttrs(a []slog.Attr) slog.Handler {
	return logSignal{Handler: h.Handler.WithAttrs(a), done: h.done}
}

func (h logSignal) WithGroup(name string) slog.Handler {
	return logSignal{Handler: h.Handler.WithGroup(name), done: h.done}
}

// usage is the process's CPU time and minor page faults so far.
type usage struct {
	cpu    time.Duration // user and system
	minflt int64
}

func readUsage() usage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return usage{}
	}
	return usage{cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), minflt: ru.Minflt}
}

func (u usage) since(v usage) usage { return usage{cpu: u.cpu - v.cpu, minflt: u.minflt - v.minflt} }

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// wake sends each actor from..to-1 a GET (which creates and wakes it), then
// posts POSTs, from two goroutines as the machine has few cores. It
// returns how long each GET took.
func wake(n *node.Node, from, to, posts int) ([]time.Duration, error) {
	var next atomic.Int64
	next.Store(int64(from))
	errc := make(chan error, 2)
	var mu sync.Mutex
	firsts := make([]time.Duration, 0, to-from)
	for range 2 {
		go func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= to {
					errc <- nil
					return
				}
				name := "a-" + strconv.Itoa(i)
				for j := range posts + 1 {
					method := http.MethodGet
					if j > 0 {
						method = http.MethodPost
					}
					w := httptest.NewRecorder()
					start := time.Now()
					n.ServeHTTP(w, httptest.NewRequest(method, "/actor/counter/"+name, nil))
					if j == 0 {
						mu.Lock()
						firsts = append(firsts, time.Since(start))
						mu.Unlock()
					}
					if w.Code != http.StatusOK {
						errc <- fmt.Errorf("%s /actor/counter/%s: %d %s", method, name, w.Code, strings.TrimSpace(w.Body.String()))
						return
					}
				}
			}
		}()
	}
	return firsts, errors.Join(<-errc, <-errc)
}

// snapshot is the process's memory at one moment, in bytes.
type snapshot struct {
	rss, pss, pssAnon, pssFile, pssShmem int64
	goMapped                             int64 // the Go runtime's memory, less what it released
}

func readSnapshot() (snapshot, error) {
	var s snapshot
	f, err := os.Open("/proc/self/smaps_rollup")
	if err != nil {
		return s, err
	}
	defer f.Close()
	fields := map[string]*int64{"Rss:": &s.rss, "Pss:": &s.pss, "Pss_Anon:": &s.pssAnon, "Pss_File:": &s.pssFile, "Pss_Shmem:": &s.pssShmem}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		kv := strings.Fields(sc.Text())
		if len(kv) == 3 && fields[kv[0]] != nil {
			kib, err := strconv.ParseInt(kv[1], 10, 64)
			if err != nil {
				return s, fmt.Errorf("smaps_rollup: %q: %w", sc.Text(), err)
			}
			*fields[kv[0]] = kib << 10
		}
	}
	if err := sc.Err(); err != nil {
		return s, err
	}
	if s.rss == 0 {
		return s, errors.New("smaps_rollup has no Rss")
	}
	ms := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(ms)
	s.goMapped = int64(ms[0].Value.Uint64() - ms[1].Value.Uint64())
	return s, nil
}

// recorder wraps the engine to keep every instance the node creates, in
// order, so that their linear memories can be inspected.
type recorder struct {
	wkruntime.Driver
	mu    sync.Mutex
	insts []wkruntime.Instance
}

func (r *recorder) NewEngine(ctx context.Context, cfg wkruntime.Config) (wkruntime.Engine, error) {
	e, err := r.Driver.NewEngine(ctx, cfg)
	return recEngine{Engine: e, r: r}, err
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.insts)
}

type recEngine struct {
	wkruntime.Engine
	r *recorder
}

func (e recEngine) Compile(ctx context.Context, wasm []byte) (wkruntime.Module, error) {
	m, err := e.Engine.Compile(ctx, wasm)
	return recModule{Module: m, r: e.r}, err
}

type recModule struct {
	wkruntime.Module
	r *recorder
}

func (m recModule) Instantiate(ctx context.Context, cfg wkruntime.InstanceConfig) (wkruntime.Instance, error) {
	in, err := m.Module.Instantiate(ctx, cfg)
	if err == nil {
		m.r.mu.Lock()
		m.r.insts = append(m.r.insts, in)
		m.r.mu.Unlock()
	}
	return in, err
}

// linear is what the pages of the new instances' linear memories cost, in
// bytes summed over the instances.
type linear struct {
	instances int
	size      int64
	// private and shared pages present, by region: data segments, the
	// rest of the initial memory, grown.
	private, shared [3]int64
	// pageMap is the first instance's pages: '.' absent, 'p' private,
	// 's' shared.
	pageMap []byte
}

// scan reads, for every instance created from mark on, which pages of its
// linear memory the process has in its page tables.
func (r *recorder) scan(mark int, l layout) (linear, error) {
	r.mu.Lock()
	insts := r.insts[mark:]
	r.mu.Unlock()
	pm, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return linear{}, err
	}
	defer pm.Close()
	page := int64(os.Getpagesize())
	var out linear
	var buf []byte
	for _, in := range insts {
		mem := in.Memory()
		if mem == nil {
			continue
		}
		size := int64(mem.Size())
		view, ok := mem.Read(0, uint32(size))
		if !ok || size == 0 {
			continue
		}
		out.instances++
		out.size += size
		base := int64(uintptr(unsafe.Pointer(&view[0])))
		if base%page != 0 {
			return out, fmt.Errorf("linear memory at %#x is not page-aligned", base)
		}
		pages := size / page
		buf = slices.Grow(buf[:0], int(pages*8))[:pages*8]
		if _, err := pm.ReadAt(buf, base/page*8); err != nil {
			return out, fmt.Errorf("pagemap: %w", err)
		}
		first := out.instances == 1
		for i := range pages {
			e := binary.LittleEndian.Uint64(buf[i*8:])
			// Not present, or the zero page a read of an untouched
			// anonymous page maps (neither a file page nor exclusive),
			// which RSS does not count.
			if e&(1<<63) == 0 || e&(1<<61|1<<56) == 0 {
				if first {
					out.pageMap = append(out.pageMap, '.')
				}
				continue
			}
			region := 2
			switch off := i * page; {
			case off < l.dataEnd:
				region = 0
			case off < l.initial:
				region = 1
			}
			c := byte('p')
			if e&(1<<61) != 0 { // a file page or shared: the module's image
				out.shared[region] += page
				c = 's'
			} else {
				out.private[region] += page
			}
			if first {
				out.pageMap = append(out.pageMap, c)
			}
		}
	}
	return out, nil
}

// layout is where a module's data lies in its linear memory.
type layout struct {
	initial int64 // the memory's minimum, in bytes
	dataEnd int64 // the end of the last active data segment
	data    int64 // the bytes of the active data segments
}

// readLayout reads the memory and data sections of a module.
func readLayout(wasm []byte) (layout, error) {
	l, err := linearmem.ReadLayout(wasm)
	return layout{initial: int64(l.MinBytes), dataEnd: int64(l.End), data: int64(l.Data)}, err
}

// report prints the split, per actor.
type report struct {
	o                        options
	layout                   layout
	before, after, collected snapshot
	linear                   linear
	elapsed                  time.Duration // of waking the measured actors
	use                      usage         // of waking the measured actors
	firstP50                 time.Duration // of the GET that woke each, two at a time
}

func (r *report) print(w io.Writer) {
	n := float64(r.o.actors)
	kib := func(b int64) string { return fmt.Sprintf("%8.0f", float64(b)/1024/n) }
	d := func(f func(s snapshot) int64) int64 { return f(r.after) - f(r.before) }
	lin := r.linear
	priv, shared := lin.private[0]+lin.private[1]+lin.private[2], lin.shared[0]+lin.shared[1]+lin.shared[2]
	rss := d(func(s snapshot) int64 { return s.rss })
	goHeap := d(func(s snapshot) int64 { return s.goMapped })
	fmt.Fprintf(w, "engine %s: %d actors woken (GET + %d POST each) after %d, in %v; guest %s\n",
		r.o.engine, r.o.actors, r.o.posts, baseActors, r.elapsed.Round(time.Millisecond), r.o.guest)
	fmt.Fprintf(w, "  process CPU per request: %.0f µs (the node, SQLite and the guest; %d requests); minor page faults per actor: %.0f\n",
		float64(r.use.cpu.Microseconds())/n/float64(r.o.posts+1), r.o.actors*(r.o.posts+1), float64(r.use.minflt)/n)
	fmt.Fprintf(w, "  first request (the GET that wakes an actor) p50: %d µs, two at a time\n", r.firstP50.Microseconds())
	fmt.Fprintf(w, "  guest layout: data segments %d KiB up to %d KiB, initial memory %d KiB; linear memory now %d KiB on average (%d instances)\n",
		r.layout.data>>10, r.layout.dataEnd>>10, r.layout.initial>>10, lin.size/int64(max(lin.instances, 1))>>10, lin.instances)
	fmt.Fprintf(w, "  KiB per actor                 \n")
	fmt.Fprintf(w, "  RSS (what wasmkeep bench reads) %s\n", kib(rss))
	fmt.Fprintf(w, "  PSS (shared pages divided)      %s   anon %s  file %s  shmem %s\n", kib(d(func(s snapshot) int64 { return s.pss })),
		kib(d(func(s snapshot) int64 { return s.pssAnon })), kib(d(func(s snapshot) int64 { return s.pssFile })), kib(d(func(s snapshot) int64 { return s.pssShmem })))
	fmt.Fprintf(w, "  linear memory present           %s   private %s  shared %s\n", kib(priv+shared), kib(priv), kib(shared))
	fmt.Fprintf(w, "    data segments                 %s   private %s  shared %s\n", kib(lin.private[0]+lin.shared[0]), kib(lin.private[0]), kib(lin.shared[0]))
	fmt.Fprintf(w, "    rest of initial memory        %s   private %s  shared %s\n", kib(lin.private[1]+lin.shared[1]), kib(lin.private[1]), kib(lin.shared[1]))
	fmt.Fprintf(w, "    grown                         %s   private %s  shared %s\n", kib(lin.private[2]+lin.shared[2]), kib(lin.private[2]), kib(lin.shared[2]))
	fmt.Fprintf(w, "  host Go heap                    %s   (%s after a GC)\n", kib(goHeap), kib(r.collected.goMapped-r.before.goMapped))
	fmt.Fprintf(w, "  rest (engine, SQLite, stacks)   %s   RSS - linear - Go heap\n", kib(rss-priv-shared-goHeap))
	if r.o.pageMap {
		page := os.Getpagesize()
		fmt.Fprintf(w, "  pages of the first new actor's linear memory, 64 a line (%d KiB):\n", 64*page>>10)
		for i := 0; i < len(lin.pageMap); i += 64 {
			fmt.Fprintf(w, "  %6d KiB %s\n", i*page>>10, lin.pageMap[i:min(i+64, len(lin.pageMap))])
		}
	}
}
