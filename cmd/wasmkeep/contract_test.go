package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// A build holding a plugin built against another version of its contract
// (testdata/stalebuild: a bucket plugin on bucket/v0) does not start: every
// command exits with status 2 before doing anything, the message naming the
// plugin, both versions and what to do (issue 13, item 4; ADR 1002).
func TestBuildWithStalePluginIsRefused(t *testing.T) {
	engineNeutral(t)
	bin := filepath.Join(t.TempDir(), "wasmkeep-stale")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/stalebuild").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	want := "wasmkeep: plugin bucket.stale implements bucket/v0, but this kernel requires " + bucket.API +
		": build with a version of the plugin brought up to " + bucket.API + ", or leave it out of the build (ADR 1002)\n"
	for _, args := range [][]string{
		// Without the refusal, serve would fail later (exit status 1) on
		// the missing guest rather than serve.
		{"serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--actor", "probe=" + filepath.Join(t.TempDir(), "probe.wasm")},
		{"plugins"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Env = withoutWasmkeepVars()
		out, err := cmd.CombinedOutput()
		if exitCode(err) != 2 || string(out) != want {
			t.Errorf("%s %s: %v\n%s\nwant exit status 2 and %q", bin, strings.Join(args, " "), err, out, want)
		}
	}
}

// Every plugin in plugins/ states its contract version as its own string
// constant (API: contract, const contract = "<kind>/vN"), never as the
// kernel's constant (API: bucket.API), which would follow the kernel to a
// new version the plugin does not implement (ADR 1002). The check itself
// is seen failing on a plugin that declares the kernel's constant.
func TestPluginsStateTheirOwnContract(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(repoRoot(t), "plugins", "*"))
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, dir := range dirs {
		infos, problems := contractLiterals(t, dir)
		found += infos
		for _, p := range problems {
			t.Error(p)
		}
	}
	if found < 7 {
		t.Errorf("found %d plugin.Info literals in plugins/, want at least 7", found)
	}

	bad := t.TempDir()
	src := "package bad\n\nimport (\n\t\"github.com/wasmkeep/wasmkeep/kernel/bucket\"\n\t\"github.com/wasmkeep/wasmkeep/kernel/plugin\"\n)\n\n" +
		"func Info() plugin.Info { return plugin.Info{Kind: plugin.Bucket, Name: \"bad\", API: bucket.API} }\n"
	if err := os.WriteFile(filepath.Join(bad, "plugin.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if infos, problems := contractLiterals(t, bad); infos != 1 || len(problems) != 1 || !strings.Contains(problems[0], "bucket.API") {
		t.Errorf("a plugin declaring the kernel's constant: %d infos, %q", infos, problems)
	}
}

// contractLiterals finds the plugin.Info literals of the package in dir
// (all its non-test files, whatever their build tags) and says which do not
// set API from a string constant the package declares.
func contractLiterals(t *testing.T, dir string) (infos int, problems []string) {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	consts := map[string]string{} // name: its string value
	for _, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							consts[name.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
		}
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			cl, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			if sel, ok := cl.Type.(*ast.SelectorExpr); !ok || sel.Sel.Name != "Info" {
				return true
			}
			for _, e := range cl.Elts {
				kv, ok := e.(*ast.KeyValueExpr)
				if !ok || kv.Key.(*ast.Ident).Name != "API" {
					continue
				}
				infos++
				pos := fset.Position(kv.Pos())
				id, ok := kv.Value.(*ast.Ident)
				if !ok {
					problems = append(problems, pos.String()+": API is "+types.ExprString(kv.Value)+", not the plugin's own constant")
				} else if v, ok := consts[id.Name]; !ok || !regexp.MustCompile(`^[a-z]+/v[0-9]+$`).MatchString(v) {
					problems = append(problems, pos.String()+": API is "+id.Name+", not a string constant \"<kind>/vN\" of the plugin")
				}
			}
			return true
		})
	}
	return infos, problems
}
