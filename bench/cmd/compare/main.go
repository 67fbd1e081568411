//go:build linux

// Command compare measures the counter on WasmKeep and on workerd in one
// run, with the same client and harness (package measure): workerd serving
// the counter as a Durable Object with SQLite storage (bench/workerd), and
// wasmkeep serve on each engine with each counter guest given (the Go and
// the C counter). It starts one server at a time, repeats the whole round
// -runs times, servers interleaved, and reports the median of the runs with
// each server's ratio to the first (workerd), then the issues' targets met
// or missed. With -before, every guest and engine runs on an older build
// too, so that each row shows before and after in the same run. It writes
// each run's rows and the medians as CSV files in -out. bench/README.md
// defines each row.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/wasmkeep/wasmkeep/bench/measure"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

// workerdBinary is where npm ci in bench/workerd puts workerd's own binary;
// node_modules/.bin/workerd may be a Node.js launcher, whose process would
// be measured instead.
const workerdBinary = "node_modules/@cloudflare/workerd-linux-64/bin/workerd"

type flags struct {
	wasmkeep, before, workerd, out string
	engines, durable               string
	guests                         []guest
	serveArgs                      []string
	runs                           int
	quick                          bool
}

// server is one server of a round, and the engine it must say it served
// with.
type server struct {
	opts   measure.Options
	engine string
}

// guest is a counter module: its language, as in go-counter, and its file.
type guest struct{ lang, file string }

// run parses args, measures every target -runs times and writes the CSVs.
func run(args []string, stdout io.Writer) error {
	var f flags
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.StringVar(&f.wasmkeep, "wasmkeep", "", "the wasmkeep binary (required with -guest)")
	fs.StringVar(&f.before, "before", "", "an older wasmkeep binary to run every guest and engine on as well, labelled before/ENGINE/LANG (empty: none)")
	fs.Func("guest", "a counter guest, LANG=FILE.wasm such as go=counter.wasm or c=c-counter.wasm (repeatable)", func(v string) error {
		lang, file, ok := strings.Cut(v, "=")
		if !ok || lang == "" || file == "" {
			return fmt.Errorf("%q: want LANG=FILE.wasm", v)
		}
		f.guests = append(f.guests, guest{lang, file})
		return nil
	})
	fs.StringVar(&f.engines, "engines", "wazero,wasmtime", "the runtime plugins to run each guest on, each ENGINE or ENGINE/TIERING (wazero/off: runtime.wazero.tiering)")
	fs.StringVar(&f.durable, "durable", "go,c", "the guests (LANGs) whose counter answers POST /actor/counter/<name>/durable with exec-durable; the others get no durable write rows")
	fs.StringVar(&f.workerd, "workerd", "", "the bench/workerd directory, after npm ci in it; empty leaves workerd out")
	fs.IntVar(&f.runs, "runs", 3, "rounds of every server; each row reports their median")
	fs.BoolVar(&f.quick, "quick", false, "small counts, to check the harness rather than to measure")
	fs.StringVar(&f.out, "out", "bench/results", "directory for the CSVs")
	fs.Func("serve-arg", "extra argument for `wasmkeep serve`, such as --config=plugins.yaml (repeatable)", func(v string) error {
		f.serveArgs = append(f.serveArgs, v)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	targets, err := f.targets()
	if err != nil {
		return err
	}
	commit, err := measure.CheckoutCommit()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "compare: %d servers, %d runs, at %s\n", len(targets), f.runs, commit)

	runs := make([][]measure.Result, len(targets)) // by target, then run
	for r := range f.runs {
		var round []measure.Result
		// One server at a time: two would share the cores and measure each
		// other.
		for i, t := range targets {
			fmt.Fprintf(stdout, "run %d/%d, %s:\n", r+1, f.runs, t.opts.Label)
			t.opts.Progress = stdout
			res, err := measure.Run(t.opts)
			if err != nil {
				return fmt.Errorf("%s: %w", t.opts.Label, err)
			}
			if res.Engine != t.engine {
				return fmt.Errorf("%s: the server served with %s", t.opts.Label, res.Engine)
			}
			// The CSV's engine column tells the older build's rows apart.
			if strings.HasPrefix(t.opts.Label, beforeLabel) {
				res.Engine = beforeLabel + res.Engine
			}
			runs[i] = append(runs[i], res)
			round = append(round, res)
		}
		path, err := measure.WriteCSV(f.out, commit, "-workerd-run"+strconv.Itoa(r+1), round...)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, "wrote", path)
	}
	medians := make([]measure.Result, len(targets))
	for i, rs := range runs {
		if medians[i], err = measure.Median(rs); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "\nmedians of %d runs, with each server's ratio to the first:\n", f.runs)
	measure.PrintTable(stdout, medians...)
	if medians[0].Engine == "workerd" {
		fmt.Fprintln(stdout, "\ntargets, as ratios to workerd:")
		printTargets(stdout, medians[0], medians[1:])
	}
	if f.before != "" {
		fmt.Fprintln(stdout, "\nnothing resident slower (issue 16), after as a ratio to before:")
		printRegressions(stdout, medians)
	}
	path, err := measure.WriteCSV(f.out, commit, "-workerd-median", medians...)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "wrote", path)
	return nil
}

// targets lists the servers of a round: workerd first, the baseline of the
// ratios, then each guest on each engine.
func (f flags) targets() ([]server, error) {
	if f.runs < 1 {
		return nil, fmt.Errorf("-runs %d: want at least 1", f.runs)
	}
	// workerd's counter ignores the /durable and writes as always, waiting
	// for the disk. A guest without the route would answer it with a plain
	// write, which no answer tells apart: only the guests -durable names
	// are sent it.
	durableWrite := measure.Request{Method: "POST", Path: "/actor/counter/{name}/durable"}
	durable := strings.Split(f.durable, ",")
	counter := func(label, engine, guest string, srv measure.Server) server {
		return server{engine: engine, opts: measure.Options{
			Server: srv, Class: "counter", Counter: true, DurableWrite: durableWrite,
			Engine: engine, Guest: guest, Label: label,
			Quick: f.quick,
		}}
	}
	var out []server
	if f.workerd != "" {
		dir, err := filepath.Abs(f.workerd)
		if err != nil {
			return nil, err
		}
		srv := measure.Workerd{Binary: filepath.Join(dir, workerdBinary), Config: filepath.Join(dir, "config.capnp")}
		if _, err := os.Stat(srv.Binary); err != nil {
			return nil, fmt.Errorf("-workerd: %w (install it: npm ci --prefix %s)", err, f.workerd)
		}
		if _, err := os.Stat(srv.Config); err != nil {
			return nil, fmt.Errorf("-workerd: %w", err)
		}
		out = append(out, counter("workerd", "workerd", "js-counter", srv))
	}
	if len(f.guests) > 0 {
		bin, err := absFile("-wasmkeep", f.wasmkeep)
		if err != nil {
			return nil, err
		}
		builds := []struct{ label, bin string }{{"", bin}}
		if f.before != "" {
			before, err := absFile("-before", f.before)
			if err != nil {
				return nil, err
			}
			builds = append(builds, struct{ label, bin string }{beforeLabel, before})
		}
		engines := strings.Split(f.engines, ",")
		for _, b := range builds {
			for _, g := range f.guests {
				file, err := absFile("-guest "+g.lang, g.file)
				if err != nil {
					return nil, err
				}
				for _, spec := range engines {
					// ENGINE/TIERING sets the engine's tiering (ADR 1034).
					e, tiering, ok := strings.Cut(spec, "/")
					env := []string{"WASMKEEP_RUNTIME__USE=" + e}
					if ok {
						env = append(env, "WASMKEEP_RUNTIME__"+strings.ToUpper(e)+"__TIERING="+tiering)
					}
					srv := measure.Wasmkeep{
						Binary: b.bin, Class: "counter", Guest: file, ServeArgs: f.serveArgs, Env: env,
					}
					t := counter(b.label+spec+"/"+g.lang, e, g.lang+"-counter", srv)
					if !slices.Contains(durable, g.lang) {
						t.opts.DurableWrite = measure.Request{}
					}
					// Left to the server's log, which names the engine it
					// served with: run checks that the environment took.
					t.opts.Engine = ""
					out = append(out, t)
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("nothing to measure: give -workerd, or -wasmkeep and -guest")
	}
	return out, nil
}

func absFile(flag, path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("%s is required", flag)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	return abs, nil
}

// goal is one of an issue's targets: for guests in lang (every guest when
// empty), metric at most max times workerd's baseline metric. note, if any,
// says how to read it.
type goal struct {
	issue, lang, metric, baseline string
	max                           float64
	note                          string
}

var goals = []goal{
	{"6", "c", "server_cpu_per_request", "server_cpu_per_request", 0.4, ""},
	{"6", "c", "read_resident_p50", "read_resident_p50", 0.3, ""},
	// The memory target on both readings (ADR 1010): RSS, the book's row,
	// counts the pages of the guest's data image that every actor maps
	// once per actor; PSS divides them among the actors.
	{"6", "c", "memory_per_resident_actor", "memory_per_resident_actor", 0.8, "RSS, shared pages counted per actor"},
	{"6", "c", "memory_per_resident_actor_pss", "memory_per_resident_actor_pss", 0.8, "PSS, shared pages divided"},
	{"6", "c", "first_request_new_actor_p50", "first_request_new_actor_p50", 0.5, ""},
	// workerd waits for the disk on every write: our durable write against
	// its only kind.
	{"6", "c", "write_durable_resident_p50", "write_resident_p50", 1, "workerd's write_resident_p50"},
	{"6", "go", "server_cpu_per_request", "server_cpu_per_request", 0.6, ""},

	{"16", "go", "startup_to_first_response", "startup_to_first_response", 2, "fresh data directory"},
	{"16", "go", "startup_to_first_response_restart", "startup_to_first_response_restart", 1, ""},
	{"16", "c", "startup_to_first_response", "startup_to_first_response", 0.8, "fresh data directory"},
	{"16", "c", "startup_to_first_response_restart", "startup_to_first_response_restart", 0.8, ""},
	{"16", "go", "first_request_new_actor_p50", "first_request_new_actor_p50", 1, ""},
	{"16", "", "new_actor_activation_p50", "new_actor_activation_p50", 1, ""},
	{"16", "", "read_resident_p99", "read_resident_p99", 0.7, ""},
	{"16", "", "write_resident_p99", "write_resident_p99", 0.7, ""},
	// Both readings, as for issue 6: a pre-initialised module's image holds
	// the Go runtime's start too, which RSS counts once per actor (ADR 1040).
	{"16", "go", "memory_per_resident_actor", "memory_per_resident_actor", 2, "RSS, shared pages counted per actor"},
	{"16", "go", "memory_per_resident_actor_pss", "memory_per_resident_actor_pss", 2, "PSS, shared pages divided"},
	{"16", "c", "memory_per_resident_actor", "memory_per_resident_actor", 0.75, "RSS, shared pages counted per actor"},
	{"16", "c", "memory_per_resident_actor_pss", "memory_per_resident_actor_pss", 0.75, "PSS, shared pages divided"},

	// A new node on a machine that ran one: the goal of issue 30 ("on a
	// fresh data directory"), against workerd's fresh start (ADR 1058).
	{"30", "go", "startup_to_first_response_fresh_data", "startup_to_first_response", 2, "workerd's fresh start"},
	{"30", "c", "startup_to_first_response_fresh_data", "startup_to_first_response", 0.8, "workerd's fresh start"},
}

// printTargets prints, for each goal and each server with its guest, the
// ratio to workerd and whether it meets the goal.
func printTargets(w io.Writer, workerd measure.Result, others []measure.Result) {
	issue := ""
	for _, g := range goals {
		base, ok := workerd.Value(g.baseline)
		if !ok {
			continue
		}
		if g.issue != issue {
			issue = g.issue
			fmt.Fprintf(w, " issue %s:\n", issue)
		}
		for _, r := range others {
			v, ok := r.Value(g.metric)
			if !ok || (g.lang != "" && r.Guest != g.lang+"-counter") {
				continue
			}
			verdict := "missed"
			if base > 0 && v/base <= g.max {
				verdict = "met"
			}
			note := ""
			if g.note != "" {
				note = " (" + g.note + ")"
			}
			fmt.Fprintf(w, "  %-12s %-29s %6.2fx workerd%s, target <= %gx: %s\n",
				r.Label, g.metric, v/base, note, g.max, verdict)
		}
	}
}

// beforeLabel prefixes the labels of the servers -before runs.
const beforeLabel = "before/"

// resident are the rows issue 16 requires no worse after than before, and
// whether more is better.
var resident = []struct {
	metric       string
	higherBetter bool
}{
	{"read_resident_p50", false},
	{"server_cpu_per_request", false},
	{"throughput", true},
}

// printRegressions prints, for each server with a before/ twin among
// results, each resident row after as a ratio to before, and whether it
// got worse. One run on a shared machine moves by a few percent: "worse"
// is past 10%.
func printRegressions(w io.Writer, results []measure.Result) {
	byLabel := map[string]measure.Result{}
	for _, r := range results {
		byLabel[r.Label] = r
	}
	for _, r := range results {
		before, ok := byLabel[beforeLabel+r.Label]
		if !ok {
			continue
		}
		for _, m := range resident {
			a, okA := r.Value(m.metric)
			b, okB := before.Value(m.metric)
			if !okA || !okB || b == 0 {
				continue
			}
			ratio := a / b
			verdict := "no worse"
			if (m.higherBetter && ratio < 0.9) || (!m.higherBetter && ratio > 1.1) {
				verdict = "worse"
			}
			fmt.Fprintf(w, "  %-16s %-24s %6.2fx before: %s\n", r.Label, m.metric, ratio, verdict)
		}
	}
}
