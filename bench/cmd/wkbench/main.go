//go:build linux

// Command wkbench measures a single WasmKeep node serving the counter
// example with package measure: it starts `wasmkeep serve` as a child
// process, prints a table and writes one CSV row per metric to
// <out>/<date>-<commit>.csv. bench/README.md defines each row.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/wasmkeep/wasmkeep/bench/measure"
)

func main() {
	path, err := run(os.Args[1:], os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wkbench:", err)
		os.Exit(1)
	}
	fmt.Println("wrote", path)
}

// run parses args, measures and returns the path of the CSV it wrote.
func run(args []string, stdout io.Writer) (string, error) {
	srv := measure.Wasmkeep{Class: "counter"}
	opts := measure.Options{Class: srv.Class, Counter: true, Progress: stdout}
	var out string
	fs := flag.NewFlagSet("wkbench", flag.ContinueOnError)
	fs.StringVar(&srv.Binary, "wasmkeep", "", "the wasmkeep binary to measure (required)")
	fs.StringVar(&srv.Guest, "guest", "", "the counter guest, a .wasm file (required)")
	fs.StringVar(&out, "out", "bench/results", "directory for the CSV")
	fs.StringVar(&opts.Engine, "engine", "", "engine label for the CSV (default: the runtime the server logs at start)")
	fs.StringVar(&opts.Guest, "guest-label", "go-counter", "guest label for the CSV")
	fs.BoolVar(&opts.Quick, "quick", false, "small counts, to check the harness rather than to measure")
	fs.Func("serve-arg", "extra argument for `wasmkeep serve`, such as --config=plugins.yaml (repeatable)", func(v string) error {
		srv.ServeArgs = append(srv.ServeArgs, v)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if fs.NArg() > 0 {
		return "", fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if srv.Binary == "" || srv.Guest == "" {
		return "", errors.New("-wasmkeep and -guest are required")
	}
	for _, p := range []*string{&srv.Binary, &srv.Guest} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", err
		}
		*p = abs
	}
	commit, err := measure.CheckoutCommit()
	if err != nil {
		return "", err
	}
	fmt.Fprintf(stdout, "wkbench: %s at %s\n", srv.Binary, commit)
	opts.Server = srv
	res, err := measure.Run(opts)
	if err != nil {
		return "", err
	}
	measure.PrintTable(stdout, res)
	return measure.WriteCSV(out, commit, "", res)
}
