//go:build linux

// Command wkcompile measures what compiling a module costs each runtime
// engine: the CPU time of the compile (every thread's: Wasmtime compiles
// functions in parallel), its wall time, and the process's peak RSS, before
// and after. Each compile runs in a child process of its own, so that no
// compile's memory hides another's. The modules are files given as
// arguments (a real guest) or synthetic shapes, by default at the bounds of
// internal/wasmbounds, which every engine checks before compiling:
//
//	nest      one function of MaxBlocks nested blocks
//	seq       one function of MaxBlocks blocks one after the other
//	ifelse    one function of MaxBlocks/2 ifs, each with an else
//	loops     one function of MaxBlocks/LoopWeight nested loops
//	seqloops  one function of as many loops one after the other
//	brif      one function of MaxBlocks blocks, each leaving by a br_if and
//	          reading one of MaxBlockVariables/MaxBlocks locals
//	vars      the same with 1,024 blocks and MaxBlockVariables/1,024 locals
//	work      as many brif functions as MaxBlockWork allows
//	workvars  as many vars functions as MaxBlockWork allows
//	adds      one function of MaxFunctionSize bytes of i32.add
//	code      MaxCodeSize bytes of code in functions like adds
//
// -scale multiplies the blocks a function opens and the bytes of the add
// functions (the numbers of functions and locals stay); past 1, wasmbounds
// refuses the module and the line says so.
//
//	go run ./bench/cmd/wkcompile [-engines wazero,wasmtime] [-shapes nest,loops,...] [-scale 1] [file.wasm ...]
//
// An engine is measured with its optimising compiler (tiering: off);
// ENGINE/fast measures its fast tier instead (the interpreter, Cranelift at
// opt level none), the code a module starts on with tiering: auto.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/wasmbounds"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
	wasmtimeruntime "github.com/wasmkeep/wasmkeep/plugins/runtime-wasmtime"
	wazeroruntime "github.com/wasmkeep/wasmkeep/plugins/runtime-wazero"
)

// runtimes are the engines wkcompile can measure, by plugin name.
var runtimes = map[string]func() plugin.Info{"wazero": wazeroruntime.Info, "wasmtime": wasmtimeruntime.Info}

// shapes build the synthetic modules at scale times the bounds.
var shapes = map[string]func(scale float64) []byte{
	"nest": func(s float64) []byte { return module(1, 0, nested(0x02, n(wasmbounds.MaxBlocks, s))) },
	"seq": func(s float64) []byte {
		return module(1, 0, bytes.Repeat([]byte{0x02, 0x40, 0x0b}, n(wasmbounds.MaxBlocks, s)))
	},
	"ifelse": func(s float64) []byte {
		return module(1, 0, bytes.Repeat([]byte{0x41, 0, 0x04, 0x40, 0x05, 0x0b}, n(wasmbounds.MaxBlocks/2, s)))
	},
	"loops": func(s float64) []byte {
		return module(1, 0, nested(0x03, n(wasmbounds.MaxBlocks/wasmbounds.LoopWeight, s)))
	},
	"seqloops": func(s float64) []byte {
		return module(1, 0, bytes.Repeat([]byte{0x03, 0x40, 0x0b}, n(wasmbounds.MaxBlocks/wasmbounds.LoopWeight, s)))
	},
	"brif":     func(s float64) []byte { return reads(false, wasmbounds.MaxBlocks, s) },
	"vars":     func(s float64) []byte { return reads(false, 1024, s) },
	"work":     func(s float64) []byte { return reads(true, wasmbounds.MaxBlocks, s) },
	"workvars": func(s float64) []byte { return reads(true, 1024, s) },
	"adds":     func(s float64) []byte { return module(1, 0, adds(n(wasmbounds.MaxFunctionSize, s))) },
	// A function's size takes at most 4 bytes, the section's count 1.
	"code": func(s float64) []byte {
		k := wasmbounds.MaxCodeSize / wasmbounds.MaxFunctionSize
		return module(k, 0, adds(n((wasmbounds.MaxCodeSize-1)/k-4, s)))
	},
}

func n(bound int, scale float64) int { return int(float64(bound) * scale) }

// nested is n nested blocks (op 0x02) or loops (0x03).
func nested(op byte, n int) []byte {
	return append(bytes.Repeat([]byte{op, 0x40}, n), bytes.Repeat([]byte{0x0b}, n)...)
}

// reads is a module of one function (many: as many as MaxBlockWork
// allows) of blocks blocks one after the other and MaxBlockVariables/blocks
// locals, at scale; each block leaves by a br_if and reads the next local.
func reads(many bool, blocks int, scale float64) []byte {
	vars, k := wasmbounds.MaxBlockVariables/blocks, 1
	if many {
		k = wasmbounds.MaxBlockWork / (blocks*blocks + wasmbounds.VariableWeight*blocks*vars)
	}
	var b []byte
	for i := range n(blocks, scale) {
		b = append(append(append(b, 0x02, 0x40, 0x41, 0, 0x0d, 0, 0x20), uleb(i%vars)...), 0x1a, 0x0b)
	}
	return module(k, vars, b)
}

// adds is instructions that make a body of at most size bytes with the
// locals and the end module adds: a chain of i32.const 1, i32.add.
func adds(size int) []byte {
	b := append([]byte{0x41, 1}, bytes.Repeat([]byte{0x41, 1, 0x6a}, (size-7)/3)...)
	return append(b, 0x1a) // drop
}

func uleb(v int) []byte {
	var b []byte
	for ; v >= 0x80; v >>= 7 {
		b = append(b, byte(v)|0x80)
	}
	return append(b, byte(v))
}

// module is a module of k functions of type () -> (), each with vars i32
// locals and the instructions code.
func module(k, vars int, code []byte) []byte {
	body := append(append([]byte{1}, uleb(vars)...), 0x7f)
	body = append(append(body, code...), 0x0b)
	funcs, bodies := uleb(k), uleb(k)
	for range k {
		funcs = append(funcs, 0)
		bodies = append(append(bodies, uleb(len(body))...), body...)
	}
	wasm := []byte{0, 'a', 's', 'm', 1, 0, 0, 0, 1, 4, 1, 0x60, 0, 0}
	wasm = append(append(append(wasm, 3), uleb(len(funcs))...), funcs...)
	return append(append(append(wasm, 10), uleb(len(bodies))...), bodies...)
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "wkcompile:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("wkcompile", flag.ContinueOnError)
	engines := fs.String("engines", "wazero,wasmtime", "the engines to measure, in turn (ENGINE/fast: its fast tier)")
	names := fs.String("shapes", "nest,seq,ifelse,loops,seqloops,brif,vars,work,workvars,adds,code", "the synthetic modules to compile (none: \"\")")
	scale := fs.Float64("scale", 1, "the fraction of the bounds the synthetic modules reach")
	child := fs.String("child", "", "compile one module on this engine in this process (what each child runs)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var modules []string
	if *names != "" {
		modules = strings.Split(*names, ",")
	}
	for _, m := range modules {
		if shapes[m] == nil {
			return fmt.Errorf("unknown shape %q", m)
		}
	}
	modules = append(modules, fs.Args()...)
	if *child != "" {
		if len(modules) != 1 {
			return fmt.Errorf("-child compiles one module, not %d", len(modules))
		}
		return compile(*child, modules[0], *scale)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Printf("%-8s %-24s %10s %9s %9s %8s %8s  %s\n", "engine", "module", "bytes", "cpu", "wall", "rss0 MB", "peak MB", "result")
	for _, e := range strings.Split(*engines, ",") {
		for _, m := range modules {
			cmd := exec.Command(exe, "-child", e, "-scale", strconv.FormatFloat(*scale, 'g', -1, 64), "-shapes", "", m)
			cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("%s on %s: %w", m, e, err)
			}
		}
	}
	return nil
}

// compile compiles module (a shape or a file) on engine and prints a line.
func compile(engine, module string, scale float64) error {
	// ENGINE/fast measures the fast tier (ADR 1034); ENGINE alone, the
	// optimising compiler (tiering off).
	name, tiering, ok := strings.Cut(engine, "/")
	if !ok {
		tiering = "off"
	}
	info, ok := runtimes[name]
	if !ok {
		return fmt.Errorf("unknown engine %q (want wazero or wasmtime, with /fast for the fast tier)", engine)
	}
	i := info()
	if i.Unavailable != "" {
		return fmt.Errorf("engine %s: %s", engine, i.Unavailable)
	}
	cfg := i.NewConfig()
	switch c := cfg.(type) {
	case *wazeroruntime.Config:
		c.Tiering = tiering
	case *wasmtimeruntime.Config:
		c.Tiering = tiering
	}
	d, err := i.New(cfg)
	if err != nil {
		return err
	}
	ctx := context.Background()
	e, err := d.(runtime.Driver).NewEngine(ctx, runtime.Config{MemoryLimitPages: 2048, HostModule: "wasmkeep"})
	if err != nil {
		return err
	}
	var wasm []byte
	if build := shapes[module]; build != nil {
		wasm = build(scale)
		if scale != 1 {
			module += " x" + strconv.FormatFloat(scale, 'g', -1, 64)
		}
	} else if wasm, err = os.ReadFile(module); err != nil {
		return err
	}
	before, start := rusage(), time.Now()
	_, err = e.Compile(ctx, wasm)
	wall, after := time.Since(start), rusage()
	result := "ok"
	if err != nil {
		result = err.Error()
	}
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	fmt.Printf("%-8s %-24s %10d %9v %9v %8d %8d  %s\n", engine, module, len(wasm), cpu.Round(time.Millisecond),
		wall.Round(time.Millisecond), before.Maxrss>>10, after.Maxrss>>10, result)
	return nil
}

func rusage() (ru syscall.Rusage) {
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru
}
