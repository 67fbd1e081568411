package command

import (
	"fmt"
	"runtime/debug"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

// build is what the Go toolchain recorded of this binary
// (debug.ReadBuildInfo).
type build struct {
	version  string            // the main module's version; "(devel)" for a build in a checkout
	commit   string            // vcs.revision; "" when built outside a checkout (go install, go test) or with -buildvcs=false
	time     string            // vcs.time, the commit's
	dirty    bool              // vcs.modified: uncommitted changes, untracked files too
	goVer    string            // go1.26.8
	platform string            // linux/amd64
	cgo      bool              // CGO_ENABLED=1
	tags     string            // -tags, comma-separated
	deps     map[string]string // module path to version ("v1.12.0 => ./third_party/wazero" if replaced), every module linked in
}

func readBuild() build {
	b := build{version: "unknown", goVer: "unknown", deps: map[string]string{}}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.version, b.goVer = bi.Main.Version, bi.GoVersion
	var goos, goarch string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.commit = s.Value
		case "vcs.time":
			b.time = s.Value
		case "vcs.modified":
			b.dirty = s.Value == "true"
		case "CGO_ENABLED":
			b.cgo = s.Value == "1"
		case "-tags":
			b.tags = s.Value
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	b.platform = goos + "/" + goarch
	for _, d := range bi.Deps {
		// A replaced module keeps its path; its version says what replaces
		// it, as go list -m does (the build's wazero is this repository's
		// patched copy: ADR 1065).
		v := d.Version
		if r := d.Replace; r != nil {
			v += " => " + r.Path
			if r.Version != "" && r.Version != "(devel)" {
				v += " " + r.Version
			}
		}
		b.deps[d.Path] = v
	}
	return b
}

// label names the build in a file name: its commit as go build records it
// in a checkout, with -dirty for uncommitted changes, else its module
// version.
func (b build) label() string {
	if b.commit == "" {
		// "(devel)" for a build outside a checkout; parentheses make poor
		// file names.
		return strings.Trim(b.version, "()")
	}
	label := b.commit[:min(len(b.commit), 7)]
	if b.dirty {
		label += "-dirty"
	}
	return label
}

// library is the Go module that does the work of an engine or a SQLite
// driver: `wasmkeep version` names the one linked in and its version.
type library struct {
	what, name string // "engine", "wazero"
	module     string // module path, or its prefix when it ends in "/" (one module per major version)
}

var libraries = []library{
	{"engine", "wazero", "github.com/tetratelabs/wazero"},
	{"engine", "wasmtime", "github.com/bytecodealliance/wasmtime-go/"},
	{"SQLite driver", "modernc", "modernc.org/sqlite"},
	{"SQLite driver", "mattn", "github.com/mattn/go-sqlite3"},
}

// linked returns the module path and version of lib if this build links it.
func (b build) linked(lib library) (path, version string, ok bool) {
	for p, v := range b.deps {
		if p == lib.module || strings.HasSuffix(lib.module, "/") && strings.HasPrefix(p, lib.module) {
			return p, v, true
		}
	}
	return "", "", false
}

func versionCommand(reg *plugin.Registry) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, Go version, and the engines and SQLite drivers in this build",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return printVersion(cmd, reg, readBuild())
		},
	}
}

func printVersion(cmd *cobra.Command, reg *plugin.Registry, b build) error {
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "version\t%s\n", b.version)
	switch {
	case b.commit == "":
		fmt.Fprintf(tw, "commit\tnot recorded (built outside a checkout, or with -buildvcs=false)\n")
	case b.dirty:
		fmt.Fprintf(tw, "commit\t%s (dirty: built with uncommitted changes) %s\n", b.commit, b.time)
	default:
		fmt.Fprintf(tw, "commit\t%s %s\n", b.commit, b.time)
	}
	cgo := "cgo"
	if !b.cgo {
		cgo = "CGO_ENABLED=0"
	}
	goLine := fmt.Sprintf("%s %s, %s", b.goVer, b.platform, cgo)
	if b.tags != "" {
		goLine += ", tags " + b.tags
	}
	fmt.Fprintf(tw, "go\t%s\n", goLine)
	// The engines are the build's runtime plugins; the SQLite drivers are
	// the sqlite storage plugin's bindings linked in.
	for _, in := range reg.List() {
		if in.Kind != plugin.Runtime {
			continue
		}
		fmt.Fprintf(tw, "engine\t%s\n", describeEngine(b, in))
	}
	if _, ok := reg.Get(plugin.Storage, "sqlite"); ok {
		for _, lib := range libraries {
			if lib.what == "SQLite driver" {
				fmt.Fprintf(tw, "SQLite driver\t%s\n", b.describe(lib, ": not in this build"))
			}
		}
	}
	var others []string
	for _, in := range reg.List() {
		if in.Kind != plugin.Runtime && in.Unavailable == "" {
			others = append(others, in.ID())
		}
	}
	fmt.Fprintf(tw, "plugins\t%s (wasmkeep plugins lists them all)\n", strings.Join(others, ", "))
	return tw.Flush()
}

// describeEngine is a runtime plugin's name, its library and the
// library's version when it is a known one, or why the build lacks it.
func describeEngine(b build, in plugin.Info) string {
	if in.Unavailable != "" {
		return in.Name + ": not in this build (" + in.Unavailable + ")"
	}
	for _, lib := range libraries {
		if lib.what == "engine" && lib.name == in.Name {
			return b.describe(lib, "")
		}
	}
	return in.Name
}

// describe is lib's name with its module path and version if the build
// links it, else its name followed by missing.
func (b build) describe(lib library, missing string) string {
	if path, v, ok := b.linked(lib); ok {
		return fmt.Sprintf("%s (%s %s)", lib.name, path, v)
	}
	return lib.name + missing
}
