package fsbucket

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// The cross-process tests run the test binary again as child processes
// (os/exec's own tests do the same): with childEnv set, TestMain serves
// commands from stdin on the bucket in childDirEnv instead of testing.
const (
	childEnv    = "FSBUCKET_TEST_CHILD"
	childDirEnv = "FSBUCKET_TEST_DIR"
)

func TestMain(m *testing.M) {
	if id := os.Getenv(childEnv); id != "" {
		os.Exit(serveChild(id, os.Getenv(childDirEnv)))
	}
	os.Exit(m.Run())
}

// serveChild answers one line per command line:
//
//	create KEY         -> won | lost          (Put IfAbsent, body "child ID")
//	replace KEY VER    -> won VER2 | lost     (Put IfVersion VER, body "child ID")
//	delete KEY VER     -> won | lost          (Delete IfVersion VER; lost also if already gone)
//	rewrite KEY N SIZE -> N lines "VER ID"    (N unconditional Puts of SIZE bytes of one letter each)
//	hang KEY SIZE      -> never answers       (a Put whose body stops after half of SIZE)
//	freeze COMMAND     -> holding, then COMMAND's answer (COMMAND, but the process
//	                      stops itself with SIGSTOP once its condition held under the lock)
//
// Anything else, or an error other than ErrPrecondition, is "error ...".
func serveChild(id, dir string) int {
	b, err := Open(dir)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ctx := context.Background()
	out := bufio.NewWriter(os.Stdout)
	in := bufio.NewScanner(os.Stdin)
	body := "child " + id
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) > 0 && f[0] == "freeze" {
			f = f[1:]
			testHookChecked = func() {
				testHookChecked = nil
				fmt.Fprintln(out, "holding")
				out.Flush()
				// To this thread: the process stops before the thread
				// goes on (a signal to the process may stop it later).
				runtime.LockOSThread()
				unix.Tgkill(os.Getpid(), unix.Gettid(), unix.SIGSTOP)
				runtime.UnlockOSThread()
			}
		}
		var err error
		switch {
		case len(f) == 2 && f[0] == "create":
			_, err = b.Put(ctx, f[1], strings.NewReader(body), int64(len(body)), bucket.Condition{IfAbsent: true})
			if err == nil {
				fmt.Fprintln(out, "won")
			}
		case len(f) == 3 && f[0] == "replace":
			var v bucket.Version
			v, err = b.Put(ctx, f[1], strings.NewReader(body), int64(len(body)), bucket.Condition{IfVersion: bucket.Version(f[2])})
			if err == nil {
				fmt.Fprintln(out, "won", v)
			}
		case len(f) == 3 && f[0] == "delete":
			err = b.Delete(ctx, f[1], bucket.Condition{IfVersion: bucket.Version(f[2])})
			if errors.Is(err, bucket.ErrNotFound) {
				err = bucket.ErrPrecondition
			}
			if err == nil {
				fmt.Fprintln(out, "won")
			}
		case len(f) == 4 && f[0] == "rewrite":
			n, _ := strconv.Atoi(f[2])
			size, _ := strconv.Atoi(f[3])
			for i := range n {
				letter := string(rune('a' + i%26))
				var v bucket.Version
				if v, err = b.Put(ctx, f[1], strings.NewReader(strings.Repeat(letter, size)), int64(size), bucket.Condition{}); err != nil {
					break
				}
				fmt.Fprintln(out, v, letter)
			}
		case len(f) == 3 && f[0] == "hang":
			size, _ := strconv.Atoi(f[2])
			half := bytes.NewReader(bytes.Repeat([]byte("n"), size/2))
			_, err = b.Put(ctx, f[1], io.MultiReader(half, blockForever{}), int64(size), bucket.Condition{})
		default:
			err = fmt.Errorf("unknown command %q", in.Text())
		}
		switch {
		case errors.Is(err, bucket.ErrPrecondition):
			fmt.Fprintln(out, "lost")
		case err != nil:
			fmt.Fprintln(out, "error", err)
		}
		out.Flush()
	}
	return 0
}

// blockForever is a body that stops sending: its Read returns only when the
// parent kills the process.
type blockForever struct{}

func (blockForever) Read([]byte) (int, error) {
	time.Sleep(time.Hour)
	return 0, io.EOF
}

// child is a running child process.
type child struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startChildren(t *testing.T, dir string, n int) []*child {
	t.Helper()
	kids := make([]*child, n)
	for i := range kids {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+strconv.Itoa(i), childDirEnv+"="+dir)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		kids[i] = &child{cmd: cmd, in: in, out: bufio.NewScanner(out)}
		t.Cleanup(func() {
			in.Close()
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
	return kids
}

func (c *child) send(t *testing.T, line string) {
	t.Helper()
	if _, err := fmt.Fprintln(c.in, line); err != nil {
		t.Fatalf("child %d: %v", c.cmd.Process.Pid, err)
	}
}

func (c *child) read(t *testing.T) string {
	t.Helper()
	if !c.out.Scan() {
		t.Fatalf("child %d ended: %v", c.cmd.Process.Pid, c.out.Err())
	}
	return c.out.Text()
}

// TestProcessesRace: processes sharing the directory race, round after
// round, to create one key, to replace one version of another, then to
// delete that key at the winner's version; exactly one wins each race, the
// others see ErrPrecondition (or, for the delete, ErrNotFound), and the
// object is the winner's.
func TestProcessesRace(t *testing.T) {
	const processes, rounds = 8, 40
	dir := t.TempDir()
	b := openT(t, dir)
	kids := startChildren(t, dir, processes)
	ctx := t.Context()

	race := func(key, cmd string) (winner int, line string) {
		for _, k := range kids {
			k.send(t, cmd)
		}
		winner = -1
		for i, k := range kids {
			got := k.read(t)
			switch {
			case got == "lost":
			case strings.HasPrefix(got, "won") && winner < 0:
				winner, line = i, got
			case strings.HasPrefix(got, "won"):
				t.Fatalf("%s: children %d and %d both won", cmd, winner, i)
			default:
				t.Fatalf("%s: child %d: %s", cmd, i, got)
			}
		}
		if winner < 0 {
			t.Fatalf("%s: nobody won", cmd)
		}
		return winner, line
	}
	holds := func(key string, winner int) {
		if got := readAll(t, b, key); got != fmt.Sprintf("child %d", winner) {
			t.Fatalf("%s: child %d won, but the object holds %q", key, winner, got)
		}
	}
	for r := range rounds {
		key := fmt.Sprintf("race/create-%d", r)
		winner, _ := race(key, "create "+key)
		holds(key, winner)

		key = fmt.Sprintf("race/replace-%d", r)
		v, err := b.Put(ctx, key, strings.NewReader("first"), 5, bucket.Condition{IfAbsent: true})
		if err != nil {
			t.Fatal(err)
		}
		winner, line := race(key, fmt.Sprintf("replace %s %s", key, v))
		holds(key, winner)
		obj, err := b.Get(ctx, key, bucket.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		obj.Body.Close()
		won := strings.TrimPrefix(line, "won ")
		if string(obj.Version) != won {
			t.Fatalf("%s: the winner's version is %s, Get's %s", key, won, obj.Version)
		}
		race(key, fmt.Sprintf("delete %s %s", key, won))
		if _, err := b.Get(ctx, key, bucket.GetOptions{}); !errors.Is(err, bucket.ErrNotFound) {
			t.Fatalf("%s after the delete race: %v, want ErrNotFound", key, err)
		}
	}
}

// TestReadsWhileAnotherProcessReplaces: while a child process replaces an
// object again and again, every Get returns a version with exactly the
// bytes of the write that made it (never a mix of two writes), and every
// listed version and size is one the child wrote.
func TestReadsWhileAnotherProcessReplaces(t *testing.T) {
	const writes, size = 150, 256 << 10
	dir := t.TempDir()
	b := openT(t, dir)
	ctx := t.Context()
	const key = "hot/object"
	v0, err := b.Put(ctx, key, strings.NewReader(strings.Repeat("-", size)), size, bucket.Condition{})
	if err != nil {
		t.Fatal(err)
	}
	kid := startChildren(t, dir, 1)[0]
	kid.send(t, fmt.Sprintf("rewrite %s %d %d", key, writes, size))

	written := map[bucket.Version]string{v0: "-"} // version -> letter
	done := make(chan error, 1)
	go func() {
		for range writes {
			if !kid.out.Scan() {
				done <- fmt.Errorf("child ended: %v", kid.out.Err())
				return
			}
			f := strings.Fields(kid.out.Text())
			if len(f) != 2 {
				done <- fmt.Errorf("child: %q", kid.out.Text())
				return
			}
			written[bucket.Version(f[0])] = f[1]
		}
		done <- nil
	}()

	type seen struct {
		v      bucket.Version
		letter string
	}
	var reads []seen
	for finished := false; !finished; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished = true
		default:
		}
		obj, err := b.Get(ctx, key, bucket.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(obj.Body)
		obj.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(data) != size || int64(len(data)) != obj.Size || strings.Trim(string(data), string(data[:1])) != "" {
			t.Fatalf("Get of %s, version %s: %d bytes (Size %d), not %d of one letter", key, obj.Version, len(data), obj.Size, size)
		}
		reads = append(reads, seen{obj.Version, string(data[:1])})
		page, err := b.List(ctx, "hot/", bucket.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Entries) != 1 || page.Entries[0].Size != size {
			t.Fatalf("List: %+v", page.Entries)
		}
		reads = append(reads, seen{page.Entries[0].Version, ""})
	}
	changes := 0
	for i, r := range reads {
		letter, ok := written[r.v]
		switch {
		case !ok:
			t.Fatalf("read %d: version %s, which no write returned", i, r.v)
		case ok && r.letter != "" && r.letter != letter:
			t.Fatalf("read %d: version %s holds %q, but the write that made it wrote %q", i, r.v, r.letter, letter)
		}
		if i > 0 && r.v != reads[i-1].v {
			changes++
		}
	}
	t.Logf("%d reads saw %d changes of version", len(reads), changes)
	if changes < 2 {
		t.Fatalf("the reads saw %d changes of version: they did not overlap the writes", changes)
	}
}

// TestCrashMidWrite: a process killed in the middle of a Put leaves the old
// object and a temporary file; the temporary file of a live writer is never
// removed, and the next Open removes a dead writer's.
func TestCrashMidWrite(t *testing.T) {
	const size = 1 << 20
	dir := t.TempDir()
	b := openT(t, dir)
	ctx := t.Context()
	const key = "crash/object"
	if _, err := b.Put(ctx, key, strings.NewReader("old"), 3, bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
	kid := startChildren(t, dir, 1)[0]
	kid.send(t, fmt.Sprintf("hang %s %d", key, size))

	tmpDir := filepath.Join(dir, metaDir, "tmp")
	var tmp string
	for deadline := time.Now().Add(30 * time.Second); tmp == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the child wrote no temporary file in 30 s")
		}
		des, _ := os.ReadDir(tmpDir)
		for _, de := range des {
			if info, err := de.Info(); err == nil && info.Size() == headerLen+size/2 {
				tmp = filepath.Join(tmpDir, de.Name())
			}
		}
	}
	age := func() {
		old := time.Now().Add(-2 * staleAfter)
		if err := os.Chtimes(tmp, old, old); err != nil {
			t.Fatal(err)
		}
	}
	age()
	openT(t, dir) // cleans temporary files: not this one, whose writer lives
	if _, err := os.Stat(tmp); err != nil {
		t.Fatalf("Open removed the temporary file of a live writer: %v", err)
	}

	kid.cmd.Process.Kill()
	kid.cmd.Wait()
	if got := readAll(t, b, key); got != "old" {
		t.Fatalf("after the crash %s holds %q, want the old object", key, got)
	}
	if keys := listKeys(t, b, ""); len(keys) != 1 || keys[0] != key {
		t.Fatalf("after the crash the bucket lists %q", keys)
	}
	age()
	openT(t, dir)
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open left the temporary file of a dead writer: %v", err)
	}
}

// TestFrozenHolder (issue 24, item 6): a process frozen with SIGSTOP while
// it holds a key's lock shard, its condition checked and its write not yet
// made, blocks nobody: another process's conditional writes to that key
// and to another key of the shard complete (within a bound the test only
// checks loosely: before the fix they waited for ever), and when the
// frozen process resumes, its replace, then in a second round its delete,
// fails its condition instead of overwriting or deleting the newer object.
func TestFrozenHolder(t *testing.T) {
	dir := t.TempDir()
	b := openT(t, dir)
	ctx := t.Context()
	const key = "nodes/frozen"
	other := ""
	for i := 0; other == ""; i++ {
		if k := fmt.Sprintf("nodes/other-%d", i); shardOf(k) == shardOf(key) {
			other = k
		}
	}
	write := func(key, body string, cond bucket.Condition) (bucket.Version, error) {
		return b.Put(ctx, key, strings.NewReader(body), int64(len(body)), cond)
	}
	v, err := write(key, "parent 0", bucket.Condition{IfAbsent: true})
	if err != nil {
		t.Fatal(err)
	}
	kid := startChildren(t, dir, 1)[0]
	pid := kid.cmd.Process.Pid

	freeze := func(cmd string) {
		t.Helper()
		kid.send(t, "freeze "+cmd)
		if got := kid.read(t); got != "holding" {
			t.Fatalf("freeze %s: %s", cmd, got)
		}
		for deadline := time.Now().Add(10 * time.Second); !stopped(t, pid); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("freeze %s: the child did not stop in 10 s", cmd)
			}
		}
	}
	// within runs a write while the child is frozen; a wait for the
	// child would never end.
	within := func(what string, f func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- f() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s while another process is frozen holding its shard: %v", what, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s did not complete in 20 s while another process was frozen holding its shard", what)
		}
	}
	replace := func(n int) {
		t.Helper()
		within(fmt.Sprintf("replace %d", n), func() (err error) {
			v, err = write(key, fmt.Sprintf("parent %d", n), bucket.Condition{IfVersion: v})
			return err
		})
	}
	resume := func() {
		t.Helper()
		if err := kid.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if got := kid.read(t); got != "lost" {
			t.Fatalf("the resumed process's write: %s, want lost (its condition no longer holds)", got)
		}
	}
	holds := func(want string) {
		t.Helper()
		obj, err := b.Get(ctx, key, bucket.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		obj.Body.Close()
		if got := readAll(t, b, key); got != want || obj.Version != v {
			t.Fatalf("%s holds %q at %s, want %q at %s", key, got, obj.Version, want, v)
		}
	}

	freeze(fmt.Sprintf("replace %s %s", key, v))
	replace(1)
	within("a create of another key of the shard", func() error {
		_, err := write(other, "other", bucket.Condition{IfAbsent: true})
		return err
	})
	replace(2)
	resume()
	holds("parent 2")

	freeze(fmt.Sprintf("delete %s %s", key, v))
	replace(3)
	resume()
	holds("parent 3")

	kid.send(t, fmt.Sprintf("replace %s %s", key, v))
	if got := kid.read(t); !strings.HasPrefix(got, "won ") {
		t.Fatalf("the resumed process's next replace: %s", got)
	}
}

// stopped says whether process pid is stopped (state T in /proc/PID/stat).
func stopped(t *testing.T, pid int) bool {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The state follows the command's closing parenthesis.
	s := string(stat)
	return strings.HasPrefix(s[strings.LastIndexByte(s, ')')+1:], " T")
}
