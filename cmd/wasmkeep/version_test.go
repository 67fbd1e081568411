package main

import (
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// `wasmkeep version` names the commit the binary was built from (dirty when
// the checkout has changes), the Go that built it, and each engine and
// SQLite driver in the build with its library's version, as go.mod pins it.
func TestVersion(t *testing.T) {
	engineNeutral(t)
	// -buildvcs=true: a GOFLAGS of -buildvcs=false would leave the commit out.
	bin := t.TempDir() + "/wasmkeep"
	if out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("wasmkeep version: %v\n%s", err, out)
	}
	git := func(args ...string) string {
		b, err := exec.Command("git", args...).Output()
		if err != nil {
			t.Fatalf("git %s: %v", args, err)
		}
		return strings.TrimSpace(string(b))
	}
	head := git("rev-parse", "HEAD")
	commit, version := `commit +`+head, `version +v\S+-`+head[:12]
	if git("status", "--porcelain") != "" {
		commit, version = commit+` \(dirty`, version+`\+dirty`
	}
	mod := func(path string) string {
		// "path version", and " => replacement" for a replaced module.
		b, err := exec.Command("go", "list", "-m", path).Output()
		if err != nil {
			t.Fatalf("go list -m %s: %v", path, err)
		}
		return regexp.QuoteMeta(strings.TrimSpace(string(b)))
	}
	short, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !regexp.MustCompile(`^wasmkeep `+strings.Replace(version, "version +", "version ", 1)+"\n$").Match(short) {
		t.Errorf("wasmkeep --version: %v: %q", err, short)
	}
	for _, want := range []string{
		`(?m)^` + version + `$`, // a pseudo-version from the commit
		`(?m)^` + commit,
		`(?m)^go +` + regexp.QuoteMeta(runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH),
		`(?m)^engine +wazero \(` + mod("github.com/tetratelabs/wazero") + `\)$`,
		`(?m)^engine +wasmtime \(` + mod("github.com/bytecodealliance/wasmtime-go/v39") + `\)$`,
		`(?m)^SQLite driver +modernc \(` + mod("modernc.org/sqlite") + `\)$`,
		`(?m)^SQLite driver +mattn \(` + mod("github.com/mattn/go-sqlite3") + `\)$`,
	} {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("wasmkeep version lacks %s:\n%s", want, out)
		}
	}
}

// A CGO_ENABLED=0 build says it lacks wasmtime and mattn.
func TestVersionWithoutCgo(t *testing.T) {
	engineNeutral(t)
	out, err := exec.Command(pureGoBinary(t), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("wasmkeep version: %v\n%s", err, out)
	}
	for _, want := range []string{
		`(?m)^go +.*, CGO_ENABLED=0`,
		`(?m)^engine +wasmtime: not in this build`,
		`(?m)^engine +wazero \(github.com/tetratelabs/wazero v`,
		`(?m)^SQLite driver +mattn: not in this build$`,
		`(?m)^SQLite driver +modernc \(modernc.org/sqlite v`,
	} {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("wasmkeep version (CGO_ENABLED=0) lacks %s:\n%s", want, out)
		}
	}
}
