package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/secrets"
	fsbucket "github.com/wasmkeep/wasmkeep/plugins/bucket-fs"
)

// secretsCLI runs wasmkeep secrets on one file bucket and keeps every
// output, for the check that no value ever reaches one.
type secretsCLI struct {
	t        *testing.T
	bin, dir string
	mu       sync.Mutex
	outputs  []string
}

func newSecretsCLI(t *testing.T) *secretsCLI {
	return &secretsCLI{t: t, bin: wasmkeepBinary(t), dir: t.TempDir()}
}

// run runs `wasmkeep secrets SUB --bucket ... ARGS` with stdin, returning
// stdout and stderr together and whether it succeeded.
func (s *secretsCLI) run(stdin string, sub string, args ...string) (string, bool) {
	all := []string{"secrets", sub}
	if sub != "new-key" {
		all = append(all, "--bucket", "file://"+s.dir)
	}
	cmd := exec.Command(s.bin, append(all, args...)...)
	cmd.Env = withoutWasmkeepVars()
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	s.mu.Lock()
	s.outputs = append(s.outputs, string(out))
	s.mu.Unlock()
	return string(out), err == nil
}

func (s *secretsCLI) must(stdin string, sub string, args ...string) string {
	s.t.Helper()
	out, ok := s.run(stdin, sub, args...)
	if !ok {
		s.t.Fatalf("secrets %s %s failed:\n%s", sub, strings.Join(args, " "), out)
	}
	return out
}

func (s *secretsCLI) fails(want string, stdin string, sub string, args ...string) {
	s.t.Helper()
	out, ok := s.run(stdin, sub, args...)
	if ok || !strings.Contains(out, want) {
		s.t.Errorf("secrets %s %s: ok %v, want a failure saying %q:\n%s", sub, strings.Join(args, " "), ok, want, out)
	}
}

func (s *secretsCLI) newKey(name string) string {
	s.t.Helper()
	path := filepath.Join(s.t.TempDir(), name)
	s.must("", "new-key", "--out", path)
	return path
}

// The values the tests set; grepped for in every output.
var secretValues = []string{"sk_live_FIRST_VALUE", "PEM_LINE_VALUE", "cert-body-VALUE", "reset-VALUE", "refused-VALUE"}

func (s *secretsCLI) noValueInOutputs() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, out := range s.outputs {
		for _, v := range secretValues {
			if strings.Contains(out, v) {
				s.t.Errorf("an output holds the value %q:\n%s", v, out)
			}
		}
	}
}

// The whole life of an app's secrets through the CLI, on a real bucket:
// keys, set from stdin and from files, list, unset, refusals (a key file
// others can read, another key, an altered object, a value on the command
// line), rotation and reset. No output of any command holds a value.
func TestSecretsCLI(t *testing.T) {
	engineNeutral(t)
	s := newSecretsCLI(t)
	key := s.newKey("secrets.key")
	if info, err := os.Stat(key); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("new-key: %v, %v", info, err)
	}
	s.fails("exists", "", "new-key", "--out", key)
	app := []string{"--app", "acme/shop", "--key", key}
	s.must("sk_live_FIRST_VALUE\n", "set", append(app, "--class", "api", "TOKEN")...)
	pemFile := writeFile(t, "tls.pem", "-----BEGIN-----\nPEM_LINE_VALUE\n-----END-----\n")
	certFile := writeFile(t, "cert", "cert-body-VALUE")
	out := s.must("", "set", append(app, "--class", "api", "--file", "TLS_KEY="+pemFile, "--file", "TLS_CERT="+certFile)...)
	if !strings.Contains(out, "seq 2") || !strings.Contains(out, "api TLS_CERT, api TLS_KEY") {
		t.Errorf("set --file, one change:\n%s", out)
	}
	out = s.must("", "list", app...)
	if !strings.Contains(out, "seq 2") || !strings.Contains(out, "api TLS_CERT\n") || !strings.Contains(out, "api TOKEN\n") {
		t.Errorf("list:\n%s", out)
	}
	s.must("", "unset", append(app, "--class", "api", "TLS_KEY", "TLS_CERT")...)
	if out := s.must("", "list", app...); !strings.Contains(out, "seq 3") || strings.Contains(out, "TLS_") {
		t.Errorf("after unset:\n%s", out)
	}
	s.fails("has no secret named NOPE", "", "unset", append(app, "--class", "api", "NOPE")...)

	// Refusals.
	s.fails("shell history", "", "set", append(app, "--class", "api", "TOKEN=refused-VALUE")...)
	open := writeFile(t, "open.key", strings.TrimSpace(readFile(t, key))+"\n")
	os.Chmod(open, 0o644)
	s.fails("secrets key "+open+": mode 0644 is readable by its group or others", "refused-VALUE", "set", "--app", "acme/shop", "--key", open, "--class", "api", "X")
	other := s.newKey("other.key")
	s.fails("sealed under another key", "", "list", "--app", "acme/shop", "--key", other)
	s.fails("no secrets key was given", "", "list", "--app", "acme/shop")
	s.fails("a name is letters", "refused-VALUE", "set", append(app, "--class", "api", "refused-VALUE!")...)

	// Rotation: refused without the flag, then every node holding both
	// keys reads it; the new key alone too.
	s.fails("--nodes-have-new-key", "", "rotate-key", "--app", "acme/shop", "--key", key, "--new-key", other)
	s.must("", "rotate-key", "--app", "acme/shop", "--key", key, "--new-key", other, "--nodes-have-new-key")
	for _, keys := range [][]string{{"--key", other}, {"--key", key, "--key", other}} {
		if out := s.must("", "list", append([]string{"--app", "acme/shop"}, keys...)...); !strings.Contains(out, "seq 4") || !strings.Contains(out, "api TOKEN") {
			t.Errorf("after rotation, %v:\n%s", keys, out)
		}
	}
	s.fails("sealed under another key", "", "list", app...)
	// A set sealed with the old key (given first) needs the flag too.
	s.fails("--nodes-have-new-key", "refused-VALUE", "set", "--app", "acme/shop", "--key", key, "--key", other, "--class", "api", "X")

	// An altered object is refused, naming it.
	b, err := fsbucket.Open(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	obj := "apps/acme/shop/secrets/0000000000000004"
	o, err := b.Get(t.Context(), obj, bucket.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, o.Size)
	o.Body.Read(data)
	o.Body.Close()
	i := len(data) - 3
	data[i] = map[bool]byte{true: '1', false: '0'}[data[i] == '0']
	if _, err := b.Put(t.Context(), obj, strings.NewReader(string(data)), int64(len(data)), bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	s.fails(obj+": altered or corrupt", "", "list", "--app", "acme/shop", "--key", other)

	// The key is lost: reset from a file, without opening current.
	lost := s.newKey("third.key")
	from := writeFile(t, "set", fmt.Sprintf("api TOKEN %d\nreset-VALUE\n", len("reset-VALUE")))
	s.fails("--nodes-have-new-key", "", "reset", "--app", "acme/shop", "--new-key", lost, "--from", from)
	s.must("", "reset", "--app", "acme/shop", "--new-key", lost, "--from", from, "--nodes-have-new-key")
	if out := s.must("", "list", "--app", "acme/shop", "--key", lost); !strings.Contains(out, "seq 5") || !strings.Contains(out, "1 names") {
		t.Errorf("after reset:\n%s", out)
	}
	s.noValueInOutputs()
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// Several set commands at once on one bucket: each lands as its own seq,
// the losers retrying on the winners' sets, and no name is lost.
func TestSecretsConcurrentSets(t *testing.T) {
	engineNeutral(t)
	s := newSecretsCLI(t)
	key := s.newKey("secrets.key")
	const n = 4
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if out, ok := s.run("sk_live_FIRST_VALUE", "set", "--app", "acme/shop", "--key", key, "--class", "api", fmt.Sprintf("NAME_%d", i)); !ok {
				t.Errorf("set %d:\n%s", i, out)
			}
		})
	}
	wg.Wait()
	out := s.must("", "list", "--app", "acme/shop", "--key", key)
	for i := range n {
		if !strings.Contains(out, fmt.Sprintf("api NAME_%d\n", i)) {
			t.Errorf("NAME_%d lost:\n%s", i, out)
		}
	}
	s.noValueInOutputs()
}

// rotate-key --all re-seals every app with secrets under the prefix.
func TestSecretsRotateAll(t *testing.T) {
	engineNeutral(t)
	s := newSecretsCLI(t)
	old, nu := s.newKey("old.key"), s.newKey("new.key")
	for _, a := range []string{"acme/shop", "acme/blog", "beta/shop"} {
		s.must("sk_live_FIRST_VALUE", "set", "--app", a, "--key", old, "--class", "api", "TOKEN")
	}
	s.must("", "rotate-key", "--all", "--key", old, "--new-key", nu, "--nodes-have-new-key")
	for _, a := range []string{"acme/shop", "acme/blog", "beta/shop"} {
		if out := s.must("", "list", "--app", a, "--key", nu); !strings.Contains(out, "seq 2") {
			t.Errorf("%s after rotate-key --all:\n%s", a, out)
		}
	}
	if out := s.must("", "rotate-key", "--all", "--key", old, "--new-key", nu, "--nodes-have-new-key"); strings.Count(out, "already") != 3 {
		t.Errorf("a second rotation:\n%s", out)
	}
	s.noValueInOutputs()
}

// set, unset and reset refuse, without --force, while a live node of the
// app does not say in its heartbeat that it reads secrets; a node of
// another app, or one that reads them, does not stop them.
func TestSecretsRefusedWhileNodesDoNotReadThem(t *testing.T) {
	engineNeutral(t)
	s := newSecretsCLI(t)
	key := s.newKey("secrets.key")
	heartbeat := func(app string, reads bool) {
		t.Helper()
		b, err := fsbucket.Open(s.dir)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		data := nodelease.Object{State: nodelease.Live, Instance: "i1", Seq: 1, WrittenAt: time.Now(),
			Info: nodelease.Info{App: app, Secrets: reads}}.Encode()
		if _, err := b.Put(t.Context(), nodelease.Key("n1"), strings.NewReader(string(data)), int64(len(data)), bucket.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	set := []string{"--app", "acme/shop", "--key", key, "--class", "api", "TOKEN"}
	heartbeat("acme/shop", false)
	s.fails("live nodes of acme/shop do not read secrets from the bucket (an older version, or run with --no-secrets): n1", "sk_live_FIRST_VALUE", "set", set...)
	heartbeat("acme/shop", false)
	s.must("sk_live_FIRST_VALUE", "set", append(set, "--force")...)
	heartbeat("acme/shop", false)
	s.fails("n1", "", "unset", "--app", "acme/shop", "--key", key, "--class", "api", "TOKEN")
	heartbeat("acme/blog", false)
	s.must("sk_live_FIRST_VALUE\n", "set", set...)
	heartbeat("acme/shop", true)
	s.must("", "unset", "--app", "acme/shop", "--key", key, "--class", "api", "TOKEN")
	s.noValueInOutputs()
}

// What set stores, read back with the key: exactly one trailing newline
// or CRLF removed from stdin, a --file taken as written, --from's entries
// whole. Sealed for the file bucket's place: no prefix.
func TestSecretsCLIValues(t *testing.T) {
	engineNeutral(t)
	s := newSecretsCLI(t)
	keyFile := s.newKey("secrets.key")
	set := func(stdin, name string) {
		s.must(stdin, "set", "--app", "acme/shop", "--key", keyFile, "--class", "api", name)
	}
	set("one\n", "LF")
	set("two\r\n", "CRLF")
	set("three\n\n", "TWO_LF")
	set("four", "NONE")
	pemText := "-----BEGIN-----\nPEM_LINE_VALUE\n-----END-----\n"
	s.must("", "set", "--app", "acme/shop", "--key", keyFile, "--class", "api", "--file", "PEM="+writeFile(t, "pem", pemText))
	s.must("", "set", "--app", "acme/shop", "--key", keyFile, "--from", writeFile(t, "from", "hub X 3\na\nb\n"))
	key, err := secrets.LoadKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fsbucket.Open(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cur, err := secrets.Read(t.Context(), b, secrets.Place{App: app.Name{Tenant: "acme", App: "shop"}}, []secrets.Key{key})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ class, name, want string }{
		{"api", "LF", "one"}, {"api", "CRLF", "two"}, {"api", "TWO_LF", "three\n"}, {"api", "NONE", "four"},
		{"api", "PEM", pemText}, {"hub", "X", "a\nb"},
	} {
		if v, _ := cur.Set.Value(c.class, c.name); v != c.want {
			t.Errorf("%s %s = %q; want %q", c.class, c.name, v, c.want)
		}
	}
	if cur.Seq != 6 {
		t.Errorf("seq %d; want one per set", cur.Seq)
	}
}
