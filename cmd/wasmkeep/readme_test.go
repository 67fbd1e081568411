package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeBlock is one shell block of README.md: its commands, the line its
// fence opens on, and what the marker comment on the line before the fence
// asks of the test (readmeMarker says which markers there are).
type readmeBlock struct {
	line    int
	script  string
	skip    string // why the block is not run; "" runs it
	session string // blocks of one session share a directory and a network
	serve   string // the block serves until stopped: ready when this URL answers 2xx
}

// readmeMarker is the comment a block may be preceded by, on the line
// just before its fence: "<!-- readme-test: DIRECTIVE; DIRECTIVE -->", each
// directive one of
//
//	skip: REASON   the block is not run (it installs packages, needs docker,
//	               an S3 store or sudo...), for the reason given; the rest of
//	               the marker is the reason
//	session NAME   the block runs in NAME's directory and network, after
//	               NAME's blocks above it; the session "examples" starts with
//	               the examples served as scripts/serve-examples serves them
//	serve URL      the block starts a server and leaves it in the foreground:
//	               the test runs it in the background and waits until URL
//	               answers 2xx before the session's next block
//
// A block without one runs alone.
var readmeMarker = regexp.MustCompile(`^<!-- readme-test: (.*) -->$`)

// readmeBlocks extracts README's ```sh, ```bash and ```console blocks (of
// a console block, the lines after a "$ " prompt) with their markers. A
// marker that is malformed, or that precedes no shell block, is an error.
func readmeBlocks(readme string) ([]readmeBlock, error) {
	lines := strings.Split(readme, "\n")
	var blocks []readmeBlock
	for i := 0; i < len(lines); i++ {
		lang, fenced := strings.CutPrefix(lines[i], "```")
		if !fenced {
			if strings.HasPrefix(lines[i], "<!-- readme-test:") &&
				(i+1 == len(lines) || !slices.Contains([]string{"```sh", "```bash", "```console"}, lines[i+1])) {
				return nil, fmt.Errorf("README.md:%d: a readme-test marker not on the line before a sh, bash or console block", i+1)
			}
			continue
		}
		end := i + 1
		for end < len(lines) && lines[end] != "```" {
			end++
		}
		if end == len(lines) {
			return nil, fmt.Errorf("README.md:%d: a block that is never closed", i+1)
		}
		body := lines[i+1 : end]
		open := i
		i = end
		if lang != "sh" && lang != "bash" && lang != "console" {
			continue
		}
		b := readmeBlock{line: open + 1, session: "line " + strconv.Itoa(open+1)}
		if lang == "console" {
			var cmds []string
			for _, l := range body {
				if cmd, ok := strings.CutPrefix(l, "$ "); ok {
					cmds = append(cmds, cmd)
				}
			}
			body = cmds
		}
		b.script = strings.Join(body, "\n") + "\n"
		if open > 0 {
			if m := readmeMarker.FindStringSubmatch(lines[open-1]); m != nil {
				directives := strings.Split(m[1], ";")
				if reason, ok := strings.CutPrefix(m[1], "skip: "); ok && strings.TrimSpace(reason) != "" {
					b.skip, directives = reason, nil
				}
				for _, d := range directives {
					d = strings.TrimSpace(d)
					key, arg, _ := strings.Cut(d, " ")
					switch {
					case key == "session" && arg != "":
						b.session = arg
					case key == "serve" && strings.HasPrefix(arg, "http://"):
						b.serve = arg
					default:
						return nil, fmt.Errorf("README.md:%d: readme-test directive %q: want skip: REASON, session NAME or serve URL", open, d)
					}
				}
			} else if strings.HasPrefix(lines[open-1], "<!-- readme-test:") {
				return nil, fmt.Errorf("README.md:%d: malformed readme-test marker %q", open, lines[open-1])
			}
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// TestReadmeBlocks runs README.md's shell blocks as a user pasting them
// into a checkout would (issue 29): in a directory that holds the
// checkout's files, the server as ./wasmkeep and on PATH as wasmkeep (this
// suite's build) and counter.wasm (examples/counter), with HOME a
// directory of its own. Each session runs in a network namespace of its
// own (unshare), whose loopback is the only interface: the blocks' fixed
// ports (8080, 8081...) never meet another test's, and no block reaches
// beyond the machine. Every block not skipped must exit 0 under bash -e,
// its curl failing on an HTTP error unless it asks -f itself; a server
// block must become ready. The suite's CPU budget and steadyLease's lease
// timings are the only settings added.
func TestReadmeBlocks(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	if out, err := exec.Command("unshare", "-rn", "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Skipf("no network namespace to run the README's blocks in (unshare -rn, ip): %v\n%s", err, out)
	}
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := readmeBlocks(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	// The README opens with its two set-up commands and nothing above them
	// (no marker): they install packages with sudo and run this suite.
	if len(blocks) > 0 && blocks[0].skip == "" {
		blocks[0].skip = "the set-up commands: they install packages with sudo, and the second runs this suite"
	}
	var order []string
	sessions := map[string][]readmeBlock{}
	for _, b := range blocks {
		if b.skip != "" {
			t.Logf("README.md:%d: skipped: %s", b.line, b.skip)
			continue
		}
		if sessions[b.session] == nil {
			order = append(order, b.session)
		}
		sessions[b.session] = append(sessions[b.session], b)
	}
	if len(order) == 0 {
		t.Fatal("README.md has no shell block the test runs")
	}
	for _, name := range order {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			blocks := sessions[name]
			if name == "examples" {
				blocks = append([]readmeBlock{servedExamples(t, root)}, blocks...)
			}
			runReadmeSession(t, root, blocks)
		})
	}
}

// servedExamples is a block that serves every Go example as
// scripts/serve-examples does: the classes it names (its class_of), the
// flags of its serve line; the C examples, which need clang, left out.
func servedExamples(t *testing.T, root string) readmeBlock {
	script, err := os.ReadFile(filepath.Join(root, "scripts/serve-examples"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(script), "\\\n", " ")
	serve := regexp.MustCompile(`(?m)^exec build/wasmkeep serve "\$\{actors\[@\]\}" (.*) "\$@"$`).FindStringSubmatch(text)
	if serve == nil {
		t.Fatal(`scripts/serve-examples: no line 'exec build/wasmkeep serve "${actors[@]}" ... "$@"'`)
	}
	renamed := map[string]string{}
	for _, m := range regexp.MustCompile(`([a-z-]+)\) echo ([a-z-]+) ;;`).FindAllStringSubmatch(text, -1) {
		renamed[m[1]] = m[2]
	}
	var pkgs []string
	err = filepath.WalkDir(filepath.Join(root, "examples"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "main.go" {
			pkg, _ := filepath.Rel(root, filepath.Dir(path))
			pkgs = append(pkgs, pkg)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	cmd := "wasmkeep serve"
	for _, pkg := range pkgs {
		class := filepath.Base(pkg)
		if r, ok := renamed[class]; ok {
			class = r
		}
		cmd += " --actor " + class + "=" + buildGuest(t, pkg, "")
	}
	return readmeBlock{line: 0, script: cmd + " " + serve[1] + "\n", serve: "http://127.0.0.1:8080/_wasmkeep/ready"}
}

// runReadmeSession runs blocks in order in one directory and one network
// namespace, then stops everything they started.
func runReadmeSession(t *testing.T, root string, blocks []readmeBlock) {
	dir := t.TempDir()
	bin := filepath.Join(dir, ".bin")
	home := filepath.Join(dir, ".home")
	for _, d := range []string{bin, home} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	linkCheckout(t, root, dir)
	server := wasmkeepBinary(t)
	for _, link := range [][2]string{
		{server, filepath.Join(dir, "wasmkeep")}, {server, filepath.Join(bin, "wasmkeep")},
		{counter(t), filepath.Join(dir, "counter.wasm")},
	} {
		if err := os.Symlink(link[0], link[1]); err != nil {
			t.Fatal(err)
		}
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal(err)
	}
	// A pasted curl that gets an HTTP error shows it; here it fails the block.
	wrapper := "#!/bin/sh\nfor a; do case $a in --fail*|-[!-]*f*) exec " + curl + " \"$@\";; esac; done\nexec " +
		curl + " -sS --fail-with-body \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "curl"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}

	// The driver: each block in a file of its own, its output and exit
	// status beside it; a server block in the background until it is ready.
	driver := "ip link set lo up || exit 1\n"
	for i, b := range blocks {
		name := filepath.Join(dir, ".block"+strconv.Itoa(i))
		driver += fmt.Sprintf("echo \"$SECONDS s: block %d (README.md:%d)\"\n", i, b.line)
		if err := os.WriteFile(name+".sh", []byte(b.script), 0o644); err != nil {
			t.Fatal(err)
		}
		if b.serve == "" {
			driver += fmt.Sprintf("bash -e %[1]s.sh >%[1]s.out 2>&1; s=$?; echo $s >%[1]s.status; [ $s = 0 ] || exit 0\n", name)
			continue
		}
		driver += fmt.Sprintf("bash -e %[1]s.sh >%[1]s.out 2>&1 &\n"+
			"until %[2]s -sf -o /dev/null %[3]q; do kill -0 $! 2>/dev/null || { echo exited >%[1]s.status; exit 0; }; sleep 0.2; done\n"+
			"echo 0 >%[1]s.status\n", name, curl, b.serve)
	}

	driver += "echo \"$SECONDS s: done\"\n"

	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(name, "WASMKEEP_") && !slices.Contains([]string{"HOME", "PATH", "PWD", "OLDPWD"}, name) {
			env = append(env, kv)
		}
	}
	// XDG_CACHE_HOME stays: the servers' compile cache is the suite's, where
	// the tests before this one compiled what its blocks serve (the
	// examples, eleven classes, took two minutes to compile beside the
	// suite's load).
	env = append(env, "HOME="+home, "PATH="+bin+":"+os.Getenv("PATH"),
		"WASMKEEP_NODE__CPU_BUDGET_MS="+strconv.Itoa(int(suiteCPUBudget.Milliseconds())))
	env = append(env, steadyLease...)

	// A bound for a block that hangs: eleven classes compiled without the
	// cache took two minutes beside the suite's load on 2 cores.
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	log, err := os.Create(filepath.Join(dir, ".driver.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.CommandContext(ctx, "unshare", "-rn", "bash", "-c", driver)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The whole group: the servers the blocks left running too.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopGroup(cmd.Process.Pid) })
	waitErr := cmd.Wait()
	drv, _ := os.ReadFile(log.Name())
	t.Logf("driver: %v\n%s", waitErr, drv)

	for i, b := range blocks {
		name := filepath.Join(dir, ".block"+strconv.Itoa(i))
		where := fmt.Sprintf("README.md:%d", b.line)
		if b.line == 0 {
			where = "the examples served as scripts/serve-examples serves them"
		}
		status, _ := os.ReadFile(name + ".status")
		out, _ := os.ReadFile(name + ".out")
		switch s := strings.TrimSpace(string(status)); {
		case s == "0":
			continue
		case s == "" && b.serve != "":
			t.Errorf("%s: not ready at %s (driver: %v)\n%s", where, b.serve, waitErr, out)
		case s == "":
			t.Errorf("%s: did not finish (driver: %v)\n%s", where, waitErr, out)
		case s == "exited":
			t.Errorf("%s: the server exited before it was ready\n%s", where, out)
		default:
			t.Errorf("%s: exit status %s\n%s", where, s, out)
		}
		return
	}
}

// linkCheckout makes dir look like the checkout: a link to each of the
// root's entries but those .gitignore keeps out of it at the top (what
// the README's blocks leave in a checkout: built files, buckets, data).
func linkCheckout(t *testing.T, root, dir string) {
	ignore, err := os.ReadFile(filepath.Join(root, ".gitignore"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		ignored := e.Name() == ".git"
		for _, pattern := range strings.Split(string(ignore), "\n") {
			pattern, anchored := strings.CutPrefix(strings.TrimSpace(pattern), "/")
			if m, _ := filepath.Match(strings.TrimSuffix(pattern, "/"), e.Name()); anchored && m {
				ignored = true
			}
		}
		if !ignored {
			if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// stopGroup kills process group pgid and waits until none of it is left,
// so that its files can be removed.
func stopGroup(pgid int) {
	syscall.Kill(-pgid, syscall.SIGKILL)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
	}
}

// The extraction: which blocks run, what a console block runs, and the
// markers refused.
func TestReadmeBlocksExtraction(t *testing.T) {
	blocks, err := readmeBlocks("text\n```yaml\nnode: {}\n```\n" +
		"<!-- readme-test: skip: needs sudo; and docker -->\n```sh\nsudo true\n```\n" +
		"<!-- readme-test: session s; serve http://127.0.0.1:8080/ -->\n```bash\nwasmkeep serve\n```\n" +
		"```console\n$ curl localhost:8080\nan answer\n$ echo two\ntwo\n```\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []readmeBlock{
		{line: 6, script: "sudo true\n", skip: "needs sudo; and docker", session: "line 6"},
		{line: 10, script: "wasmkeep serve\n", session: "s", serve: "http://127.0.0.1:8080/"},
		{line: 13, script: "curl localhost:8080\necho two\n", session: "line 13"},
	}
	if !slices.Equal(blocks, want) {
		t.Errorf("got %+v\nwant %+v", blocks, want)
	}
	for _, bad := range []string{
		"<!-- readme-test: skip: x -->\n```yaml\na: b\n```\n",            // not a shell block
		"<!-- readme-test: skip: x -->\n\n```sh\ntrue\n```\n",            // not the line before
		"<!-- readme-test: sesion s -->\n```sh\ntrue\n```\n",             // unknown directive
		"<!-- readme-test: serve localhost:8080 -->\n```sh\ntrue\n```\n", // not a URL
		"<!-- readme-test: skip: -->\n```sh\ntrue\n```\n",                // no reason
		"```sh\ntrue\n", // never closed
	} {
		if _, err := readmeBlocks(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
