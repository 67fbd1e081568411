package processbucket

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// testHostEnv makes the test binary a host that starts the fake provider,
// prints its pid and waits to be killed.
const testHostEnv = "PROCESSBUCKET_TEST_HOST"

func TestMain(m *testing.M) {
	if mode := os.Getenv(testProviderEnv); mode != "" {
		serveTestProvider(mode)
		os.Exit(0)
	}
	if os.Getenv(testHostEnv) != "" {
		b, err := Open(Config{Path: os.Args[0], Env: map[string]string{testProviderEnv: "v1"}}, slog.New(slog.DiscardHandler))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(b.pc.ID())
		select {}
	}
	os.Exit(m.Run())
}

// syncBuffer is a log destination tests read while the provider writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// openFake starts the test binary as the fake provider.
func openFake(t *testing.T, mode string, settings map[string]any) (*Bucket, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	b, err := Open(Config{
		Path:         os.Args[0],
		Env:          map[string]string{testProviderEnv: mode},
		Settings:     settings,
		StartTimeout: 30 * time.Second,
	}, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b, logs
}

func pid(t *testing.T, b *Bucket) int {
	t.Helper()
	p, err := strconv.Atoi(b.pc.ID())
	if err != nil {
		t.Fatalf("provider pid %q: %v", b.pc.ID(), err)
	}
	return p
}

func read(t *testing.T, b *Bucket, key string, opts bucket.GetOptions) (string, *bucket.Object) {
	t.Helper()
	obj, err := b.Get(context.Background(), key, opts)
	if err != nil {
		t.Fatalf("Get %q: %v", key, err)
	}
	defer obj.Body.Close()
	data, err := io.ReadAll(obj.Body)
	if err != nil {
		t.Fatalf("reading %q: %v", key, err)
	}
	return string(data), obj
}

// The shared suite, quick, through the boundary (cmd/wasmkeep-bucket-fs
// runs it whole on a real provider).
func TestConformance(t *testing.T) {
	buckettest.RunWith(t, func(t *testing.T) bucket.Bucket {
		b, _ := openFake(t, "v1", nil)
		return b
	}, buckettest.Options{Quick: true})
}

func TestRoundTrip(t *testing.T) {
	b, logs := openFake(t, "v1", map[string]any{"greeting": "hello from the provider"})
	ctx := context.Background()
	put := func(key, body string, cond bucket.Condition) (bucket.Version, error) {
		return b.Put(ctx, key, strings.NewReader(body), int64(len(body)), cond)
	}

	v1, err := put("a/1", "first", bucket.Condition{IfAbsent: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := put("a/1", "again", bucket.Condition{IfAbsent: true}); !errors.Is(err, bucket.ErrPrecondition) {
		t.Fatalf("second create: %v, want ErrPrecondition", err)
	}
	v2, err := put("a/1", "second", bucket.Condition{IfVersion: v1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := put("a/1", "stale", bucket.Condition{IfVersion: v1}); !errors.Is(err, bucket.ErrPrecondition) {
		t.Fatalf("stale replace: %v, want ErrPrecondition", err)
	}
	data, obj := read(t, b, "a/1", bucket.GetOptions{})
	if data != "second" || obj.Version != v2 || obj.Size != 6 || obj.ModTime.IsZero() {
		t.Fatalf("Get = %q %+v, want \"second\" at %s, size 6, with a time", data, obj, v2)
	}
	if page, err := b.List(ctx, "a/", bucket.ListOptions{}); err != nil || len(page.Entries) != 1 || !page.Entries[0].ModTime.Equal(obj.ModTime) {
		t.Fatalf("List = %+v, %v: want a/1 at the time Get gave, %s", page, err, obj.ModTime)
	}
	if data, obj := read(t, b, "a/1", bucket.GetOptions{Offset: 1, Length: 3}); data != "eco" || obj.Size != 6 {
		t.Fatalf("ranged Get = %q (size %d), want \"eco\" (size 6)", data, obj.Size)
	}
	if _, err := put("b/2", "", bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
	if data, _ := read(t, b, "b/2", bucket.GetOptions{}); data != "" {
		t.Fatalf("empty object read as %q", data)
	}

	// 2,345 keys: a page of 2,000 crosses several List messages.
	for i := range 2345 {
		if _, err := put("l/"+strconv.Itoa(10000+i), "x", bucket.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	page, err := b.List(ctx, "l/", bucket.ListOptions{Limit: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Entries) != 2000 || page.Entries[0].Key != "l/10000" || page.Entries[1999].Key != "l/11999" || page.Next != "l/11999" {
		t.Fatalf("first page: %d entries, next %q", len(page.Entries), page.Next)
	}
	page, err = b.List(ctx, "l/", bucket.ListOptions{StartAfter: page.Next, Limit: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Entries) != 345 || page.Next != "" || page.Entries[0].Size != 1 || page.Entries[0].Version == "" {
		t.Fatalf("last page: %d entries, next %q, first %+v", len(page.Entries), page.Next, page.Entries[0])
	}

	if err := b.Delete(ctx, "a/1", bucket.Condition{IfVersion: v1}); !errors.Is(err, bucket.ErrPrecondition) {
		t.Fatalf("stale delete: %v, want ErrPrecondition", err)
	}
	if err := b.Delete(ctx, "a/1", bucket.Condition{IfVersion: v2}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "a/1", bucket.GetOptions{}); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("Get after delete: %v, want ErrNotFound", err)
	}

	if !strings.Contains(logs.String(), "hello from the provider") {
		t.Errorf("the provider's stderr is not in the node's log:\n%s", logs)
	}
}

// Every contract error the provider returns matches the same sentinel on
// the host, and no other; any other error crosses as its message.
func TestErrorKinds(t *testing.T) {
	b, _ := openFake(t, "v1", nil)
	for name := range errorKeys {
		_, err := b.Get(context.Background(), "err/"+name, bucket.GetOptions{})
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		for other, sentinel := range errorKeys {
			if other == "other" {
				continue
			}
			if got := errors.Is(err, sentinel); got != (other == name) {
				t.Errorf("%s: errors.Is(%v, %s) = %v", name, err, other, got)
			}
		}
		if !strings.Contains(err.Error(), `fake get "err/`+name+`"`) || !strings.Contains(err.Error(), "bucket provider ") {
			t.Errorf("%s: %q lacks the provider's message or the provider's name", name, err)
		}
	}
}

func TestVersionMismatch(t *testing.T) {
	_, err := Open(Config{Path: os.Args[0], Env: map[string]string{testProviderEnv: "v2"}, StartTimeout: 30 * time.Second}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "protocol version 2") || !strings.Contains(err.Error(), "speaks version 1") {
		t.Fatalf("Open of a version 2 provider: %v, want an error naming both versions", err)
	}
}

// A provider speaking the protocol's version but serving another version
// of the bucket contract is refused by the host, and a provider binary
// holding a plugin made for another contract than its own kernel's refuses
// to serve it; both messages name the versions and what to do.
func TestContractMismatch(t *testing.T) {
	for mode, want := range map[string]string{
		"contract": `serves bucket/v0 plugin "fake", but this kernel requires ` + bucket.API +
			": use a build of the provider made for " + bucket.API,
		"stale": "did not start",
	} {
		_, err := Open(Config{Path: os.Args[0], Env: map[string]string{testProviderEnv: mode}, StartTimeout: 30 * time.Second}, slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Open of a %s provider: %v, want an error containing %q", mode, err, want)
		}
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), testProviderEnv+"=stale", Handshake.MagicCookieKey+"="+Handshake.MagicCookieValue)
	out, err := cmd.CombinedOutput()
	want := "plugin bucket.fake implements bucket/v0, but this kernel requires " + bucket.API +
		": build with a version of the plugin brought up to " + bucket.API
	if exitCode := cmd.ProcessState.ExitCode(); err == nil || exitCode != 1 || !strings.Contains(string(out), want) {
		t.Errorf("a provider binary with a bucket/v0 plugin: exit code %d (%v)\n%s\nwant 1 and %q", exitCode, err, out, want)
	}
}

func TestBadSettings(t *testing.T) {
	_, err := Open(Config{
		Path: os.Args[0], Env: map[string]string{testProviderEnv: "v1"},
		Settings: map[string]any{"greting": "typo"}, StartTimeout: 30 * time.Second,
	}, slog.New(slog.DiscardHandler))
	// The provider decodes as plugins.yaml is decoded (config.DecodeStrict):
	// the same message, naming the key and the valid ones.
	if want := "unknown key bucket.process.settings.greting (valid: greeting)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open with an unknown setting: %v, want an error containing %q", err, want)
	}
}

func TestMissingBinary(t *testing.T) {
	_, err := Open(Config{Path: t.TempDir() + "/nope"}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "/nope") {
		t.Fatalf("Open of a missing binary: %v, want an error naming it", err)
	}
}

func TestChecksum(t *testing.T) {
	_, err := Open(Config{
		Path: os.Args[0], Env: map[string]string{testProviderEnv: "v1"},
		SHA256: strings.Repeat("ab", 32), StartTimeout: 30 * time.Second,
	}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("Open with a wrong sha256: %v, want a checksum error", err)
	}
}

// Run by hand (no magic cookie), a provider explains itself and exits.
func TestByHand(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), testProviderEnv+"=v1")
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); err == nil || code != 1 {
		t.Fatalf("exit code %d (%v), want 1", code, err)
	}
	for _, want := range []string{"WasmKeep bucket provider", "not run by hand", "use: process", "path: " + os.Args[0]} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// The caller's deadline and cancellation reach the provider's call.
func TestContextPropagates(t *testing.T) {
	b, _ := openFake(t, "v1", nil)
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
		seen string // what the provider saw
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Second)
		}, context.DeadlineExceeded, "deadline true, "},
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(200*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled, "deadline false, context canceled"},
	} {
		ctx, cancel := tc.ctx()
		_, err := b.Get(ctx, "block-get", bucket.GetOptions{})
		cancel()
		if !errors.Is(err, tc.want) {
			t.Fatalf("%s: Get = %v, want %v", tc.name, err, tc.want)
		}
		// The provider's call ends as the host gives up, or on its own
		// deadline, whichever it notices first.
		deadline := time.Now().Add(10 * time.Second)
		for {
			seen, _ := read(t, b, "blocked", bucket.GetOptions{})
			if strings.HasPrefix(seen, tc.seen) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the provider's call ended with %q, want %q...", tc.name, seen, tc.seen)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// A body that fails mid-put writes nothing.
func TestPutBodyFails(t *testing.T) {
	b, _ := openFake(t, "v1", nil)
	body := io.MultiReader(bytes.NewReader(make([]byte, 3*chunkSize)), failingReader{})
	_, err := b.Put(context.Background(), "k", body, 4*chunkSize, bucket.Condition{})
	if err == nil || !strings.Contains(err.Error(), "reading the body") {
		t.Fatalf("Put with a failing body: %v", err)
	}
	if _, err := b.Get(context.Background(), "k", bucket.GetOptions{}); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("Get after the failed put: %v, want ErrNotFound", err)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("disk read error") }

// A provider that dies mid-call fails the call promptly, and every later
// call at once, with ErrExited.
func TestProviderCrash(t *testing.T) {
	b, _ := openFake(t, "v1", nil)
	obj, err := b.Get(context.Background(), "block", bucket.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Body.Close()
	if _, err := io.ReadFull(obj.Body, make([]byte, chunkSize)); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid(t, b), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(obj.Body)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrExited) || errors.Is(err, bucket.ErrTransient) {
			t.Fatalf("read from a killed provider: %v, want ErrExited", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("read from a killed provider still blocked after 10s")
	}
	_, err = b.Put(context.Background(), "k", strings.NewReader("x"), 1, bucket.Condition{})
	if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "pid ") {
		t.Fatalf("Put after the crash: %v, want ErrExited naming the provider", err)
	}
}

// Close stops the provider, which closes its bucket: nothing is left
// running.
func TestCloseStopsProvider(t *testing.T) {
	b, logs := openFake(t, "v1", nil)
	p := pid(t, b)
	if err := syscall.Kill(p, 0); err != nil {
		t.Fatalf("provider %d not running before Close: %v", p, err)
	}
	b.Close()
	if err := syscall.Kill(p, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("provider %d after Close: signal 0 gives %v, want ESRCH", p, err)
	}
	if !strings.Contains(logs.String(), "fake bucket closed") {
		t.Errorf("the provider did not close its bucket:\n%s", logs)
	}
	if _, err := b.Get(context.Background(), "k", bucket.GetOptions{}); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Get after Close: %v", err)
	}
}

// A node killed before it closes the bucket leaves no provider behind.
func TestProviderExitsWithHost(t *testing.T) {
	host := exec.Command(os.Args[0])
	host.Env = append(os.Environ(), testHostEnv+"=1")
	host.Stderr = os.Stderr
	out, err := host.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		host.Process.Kill()
		t.Fatalf("the host printed no provider pid: %v", err)
	}
	p, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	host.Process.Kill()
	host.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for running(p) {
		if time.Now().After(deadline) {
			syscall.Kill(p, syscall.SIGKILL)
			t.Fatalf("provider %d still runs 10s after its host was killed", p)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// running reports whether pid is a live process (not gone, not a zombie
// nobody reaped).
func running(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name's closing parenthesis.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}
