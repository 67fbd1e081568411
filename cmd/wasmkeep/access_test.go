package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/node/access"
)

func mustAccess(t *testing.T, mode string) access.Access {
	t.Helper()
	a, err := access.Parse(mode)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// files lists what the counter class has on disk: databases, their sidecars,
// and nothing for a refused name.
func files(t *testing.T, data string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(data, "state", "default", "default", "actors", "default", "counter"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func noFileFor(t *testing.T, data string, encoded ...string) {
	t.Helper()
	for _, f := range files(t, data) {
		for _, e := range encoded {
			if strings.HasPrefix(f, e+".db") {
				t.Errorf("refused name %s left %s on disk", e, f)
			}
		}
	}
}

func TestAccessOpenIsTheDefault(t *testing.T) {
	engineNeutral(t)
	data := t.TempDir()
	n := startNode(t, node.Options{DataDir: data, Classes: map[string]string{"counter": counter(t)},
		Access: map[string]access.Access{"counter": mustAccess(t, "open")}})
	n.expect("POST", "/actor/counter/alice", "", 200, "1\n")
	n.stop()
	n = startNode(t, node.Options{DataDir: data, Classes: map[string]string{"counter": counter(t)}})
	n.expect("POST", "/actor/counter/bob", "", 200, "1\n")
}

// Under existing, a name created earlier under open stays reachable, and a
// new one answers 404 and creates nothing.
func TestAccessExisting(t *testing.T) {
	engineNeutral(t)
	data := t.TempDir()
	classes := map[string]string{"counter": counter(t)}
	n := startNode(t, node.Options{DataDir: data, Classes: classes})
	n.expect("POST", "/actor/counter/alice", "", 200, "1\n")
	n.stop()

	n = startNode(t, node.Options{DataDir: data, Classes: classes,
		Access: map[string]access.Access{"counter": mustAccess(t, "existing")}})
	n.expect("GET", "/actor/counter/alice", "", 200, "1\n")
	n.expect("POST", "/actor/counter/alice", "", 200, "2\n")
	n.expect("POST", "/actor/counter/bob", "", 404, "unknown actor \"bob\"\n")
	n.expect("GET", "/actor/counter/room%201/x", "", 404, "unknown actor \"room 1\"\n")
	noFileFor(t, data, "bob", "room%201")

	// Nothing at all for a class whose first request is refused.
	fresh := t.TempDir()
	n = startNode(t, node.Options{DataDir: fresh, Classes: classes,
		Access: map[string]access.Access{"counter": mustAccess(t, "existing")}})
	n.expect("POST", "/actor/counter/alice", "", 404, "unknown actor \"alice\"\n")
	if _, err := os.Stat(filepath.Join(fresh, "actors")); !os.IsNotExist(err) {
		t.Errorf("a refused request made %s/actors: %v", fresh, err)
	}
}

// existing:NAME,... lets outside requests create exactly those names.
func TestAccessExistingNames(t *testing.T) {
	data := t.TempDir()
	n := startNode(t, node.Options{DataDir: data, Classes: map[string]string{"counter": counter(t)},
		Access: map[string]access.Access{"counter": mustAccess(t, "existing:main,room 1")}})
	n.expect("POST", "/actor/counter/main", "", 200, "1\n")
	n.expect("POST", "/actor/counter/room%201", "", 200, "1\n")
	n.expect("POST", "/actor/counter/main", "", 200, "2\n")
	for _, name := range []string{"mai", "main2", "room", "Main"} {
		n.expect("POST", "/actor/counter/"+name, "", 404, "unknown actor \""+name+"\"\n")
	}
	noFileFor(t, data, "mai", "main2", "room", "Main")
	if got := files(t, data); len(got) < 2 || !strings.HasPrefix(got[0], "main.db") {
		t.Errorf("files: %v, want main's and room 1's databases", got)
	}
}

// internal refuses every outside request, to a new name or an existing one;
// other classes keep their own rules.
func TestAccessInternal(t *testing.T) {
	engineNeutral(t)
	data := t.TempDir()
	classes := map[string]string{"counter": counter(t), "probe": probe(t)}
	n := startNode(t, node.Options{DataDir: data, Classes: classes})
	n.expect("POST", "/actor/counter/alice", "", 200, "1\n")
	n.stop()

	n = startNode(t, node.Options{DataDir: data, Classes: classes,
		Access: map[string]access.Access{"counter": mustAccess(t, "internal")}})
	const refused = "class \"counter\" is internal: outside requests are refused\n"
	n.expect("GET", "/actor/counter/alice", "", 403, refused)
	n.expect("POST", "/actor/counter/bob", "", 403, refused)
	noFileFor(t, data, "bob")
	n.expect("GET", "/actor/probe/a/echo", "", 200, "GET /echo? 0")
}

func TestAccessForAClassNotServedIsRefused(t *testing.T) {
	rt, st := standardPlugins(t, "")
	_, err := node.New(t.Context(), node.Options{DataDir: t.TempDir(), Classes: map[string]string{"counter": counter(t)},
		Access: map[string]access.Access{"countr": mustAccess(t, "existing")}}, rt, st)
	if err == nil || err.Error() != `access rule for class "countr", which is not served (served: counter)` {
		t.Fatalf("got %v, want a refusal naming countr", err)
	}
}

// The binary refuses bad rules from --access and node.access, and a flag
// overrides the file for its class (the class's rule is logged as it loads).
func TestAccessConfiguration(t *testing.T) {
	engineNeutral(t)
	bin := wasmkeepBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "plugins.yaml")
	busy, err := net.Listen("tcp", "127.0.0.1:0") // serve fails to listen for metrics, after loading the classes
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	run := func(yaml string, args ...string) string {
		t.Helper()
		os.WriteFile(cfg, []byte(yaml), 0o600)
		args = append([]string{"serve", "--config", cfg, "--data-dir", dir, "--listen", "127.0.0.1:0", "--metrics-listen", busy.Addr().String(), "--actor", "probe=" + probe(t)}, args...)
		cmd := exec.Command(bin, args...)
		cmd.Env = withoutWasmkeepVars()
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("serve %v: no error\n%s", args, out)
		}
		return string(out)
	}
	for _, c := range []struct {
		yaml string
		args []string
		want string
	}{
		{"", []string{"--access", "probe=closed"}, `--access "probe=closed": unknown access mode "closed" (valid: open, existing, existing:NAME,... or internal)`},
		{"", []string{"--access", "probe"}, `--access "probe": want CLASS=MODE`},
		{"", []string{"--access", "probe=existing:a,,b"}, `--access "probe=existing:a,,b": access mode "existing:a,,b": actor name is empty`},
		{"", []string{"--access", "prob=existing"}, `access rule for class "prob", which is not served (served: probe)`},
		{"node:\n  access:\n    probe: bogus\n", nil, `node.access.probe: unknown access mode "bogus"`},
		{"node:\n  access:\n    prob: internal\n", nil, `access rule for class "prob", which is not served`},
		{"node:\n  access:\n    probe: internal\n", nil, "access=internal"},
		{"node:\n  access:\n    probe: bogus\n", []string{"--access", "probe=existing:main"}, "access=existing:main"},
	} {
		if out := run(c.yaml, c.args...); !strings.Contains(out, c.want) {
			t.Errorf("config %q, flags %q: want %q in\n%s", c.yaml, c.args, c.want, out)
		}
	}
}
