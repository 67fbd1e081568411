package main

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	fsbucket "github.com/wasmkeep/wasmkeep/plugins/bucket-fs"
)

// deployer runs wasmkeep deploy --app acme/shop on one file bucket.
type deployer struct {
	t        *testing.T
	bin, dir string
}

func newDeployer(t *testing.T) deployer {
	return deployer{t: t, bin: wasmkeepBinary(t), dir: t.TempDir()}
}

// run returns stdout and stderr together, and whether the command
// succeeded.
func (d deployer) run(args ...string) (string, bool) {
	cmd := exec.Command(d.bin, append([]string{"deploy", "--app", "acme/shop", "--bucket", "file://" + d.dir}, args...)...)
	cmd.Env = withoutWasmkeepVars()
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

func (d deployer) must(args ...string) string {
	d.t.Helper()
	out, ok := d.run(args...)
	if !ok {
		d.t.Fatalf("deploy %s failed:\n%s", strings.Join(args, " "), out)
	}
	return out
}

func (d deployer) keys(prefix string) []string {
	d.t.Helper()
	b, err := fsbucket.Open(d.dir)
	if err != nil {
		d.t.Fatal(err)
	}
	defer b.Close()
	all, err := bucket.ListAll(d.t.Context(), b, prefix)
	if err != nil {
		d.t.Fatal(err)
	}
	var keys []string
	for _, e := range all {
		keys = append(keys, e.Key)
	}
	return keys
}

func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A module that does not compile, or that the host would not load, is
// refused naming the class and the reason, before anything is uploaded;
// so is a rule for a class the version does not have.
func TestDeployRefusesBeforeUpload(t *testing.T) {
	engineNeutral(t)
	d := newDeployer(t)
	good := counter(t)
	for file, want := range map[string]string{
		writeFile(t, "garbage.wasm", "not wasm"):              "class chat refused (runtime ",
		writeFile(t, "empty.wasm", "\x00asm\x01\x00\x00\x00"): "module declares no WasmKeep ABI version",
	} {
		out, ok := d.run("--actor", "counter="+good, "--actor", "chat="+file)
		if ok || !strings.Contains(out, want) || !strings.Contains(out, "nothing was uploaded") {
			t.Errorf("deploy of %s: ok %v, want an error with %q:\n%s", filepath.Base(file), ok, want, out)
		}
	}
	out, ok := d.run("--actor", "counter="+good, "--access", "countr=existing")
	if ok || !strings.Contains(out, `class "countr", which the new version does not have`) {
		t.Errorf("a rule for a missing class: ok %v:\n%s", ok, out)
	}
	for flag, value := range map[string]string{"--access": "counter=existing", "--requires": "counter=A"} {
		out, ok := d.run("--actor", "counter="+good, flag, value, flag, value)
		if want := flag + ": class counter given twice"; ok || !strings.Contains(out, want) {
			t.Errorf("%s twice: ok %v, want %q:\n%s", flag, ok, want, out)
		}
	}
	if keys := d.keys("apps/"); len(keys) != 0 {
		t.Errorf("refused deploys left %q in the bucket", keys)
	}
}

// A deploy prints what it changes and the new version and seq; the same
// again deploys nothing; a rollback that reopens a class needs
// --allow-reopen; --list shows the versions and cluster status the
// current one; configuration values never reach the output, and secret-looking ones are warned about by name.
func TestDeployRollbackList(t *testing.T) {
	engineNeutral(t)
	d := newDeployer(t)
	good := counter(t)
	env := writeFile(t, "hub.env", "# comment\nURL=https://example.com\nAPI_TOKEN=hunter2-secret\n")
	out := d.must("--actor", "counter="+good, "--actor", "hub="+good, "--config", "hub="+env)
	for _, want := range []string{"class counter: added", "class hub: added", "config hub: added API_TOKEN, URL",
		"warning: --config hub: API_TOKEN: its name looks like a secret's", "seq 1 (was the first deploy)"} {
		if !strings.Contains(out, want) {
			t.Errorf("first deploy: no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "hunter2") || strings.Contains(out, "example.com") {
		t.Errorf("a configuration value reached the output:\n%s", out)
	}
	if out := d.must("--actor", "counter="+good, "--actor", "hub="+good, "--config", "hub="+env); !strings.Contains(out, "is current already: nothing deployed") {
		t.Errorf("the same deploy again:\n%s", out)
	}
	out = d.must("--access", "hub=internal")
	if !strings.Contains(out, "access hub: open -> internal") || !strings.Contains(out, "seq 2") {
		t.Errorf("hardening deploy:\n%s", out)
	}
	out, ok := d.run("--rollback")
	if ok || !strings.Contains(out, "hub: internal -> open") || !strings.Contains(out, "--allow-reopen") {
		t.Fatalf("a reopening rollback: ok %v:\n%s", ok, out)
	}
	out = d.must("--rollback", "--allow-reopen")
	if !strings.Contains(out, "access hub: internal -> open") || !strings.Contains(out, "seq 3") {
		t.Errorf("allowed rollback:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(d.must("--list")), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "VERSION ") ||
		!strings.Contains(lines[1], "current (seq 3)") || !strings.Contains(lines[1], "counter,hub") ||
		!strings.Contains(lines[2], "not in current's line") {
		t.Errorf("--list:\n%s", strings.Join(lines, "\n"))
	}
	// cluster status shows the app's current, with no node running.
	cur := strings.Fields(lines[1])[0]
	wantCluster(t, d.bin, withoutWasmkeepVars(), "file://"+d.dir, 1, []string{`(?m)^APP +DEPLOYED VERSION +SEQ\nacme/shop +` + cur + ` +3$`, `0 of 0 nodes live`}, "status")
	var st struct {
		Apps []struct {
			App, Version string
			Seq          uint64
		}
	}
	out = wantCluster(t, d.bin, withoutWasmkeepVars(), "file://"+d.dir, 1, nil, "status", "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Apps) != 1 || st.Apps[0].App != "acme/shop" || st.Apps[0].Version != cur || st.Apps[0].Seq != 3 {
		t.Errorf("status --json has no app acme/shop at %s, seq 3:\n%s", cur, out)
	}
}

// Deploys racing from the same current: each one either lands or fails
// as a conflict, and the seq counts exactly those that landed. The
// deterministic race is kernel/cluster/deploys' TestPublishConflict; here
// the processes race for real until one conflict shows.
func TestDeployConcurrentConflict(t *testing.T) {
	engineNeutral(t)
	d := newDeployer(t)
	d.must("--actor", "counter="+counter(t))
	landed, conflicts := 1, 0
	for round := 0; round < 20 && conflicts == 0; round++ {
		var wg sync.WaitGroup
		outs := make([]string, 4)
		oks := make([]bool, 4)
		for i, mode := range []string{"existing", "internal", "existing:a", "existing:b"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				outs[i], oks[i] = d.run("--access", "counter="+mode)
			}()
		}
		wg.Wait()
		for i, out := range outs {
			switch {
			case oks[i] && strings.Contains(out, "nothing deployed"):
			case oks[i]:
				landed++
			case strings.Contains(out, "wasmkeep: conflict: apps/acme/shop/current: another deploy or rollback changed current meanwhile"):
				conflicts++
			default:
				t.Fatalf("a racing deploy failed otherwise:\n%s", out)
			}
		}
	}
	if conflicts == 0 {
		t.Skip("no two deploys overlapped in 20 rounds")
	}
	if cur := d.must("--list"); !strings.Contains(cur, "current (seq "+strconv.Itoa(landed)+")") {
		t.Errorf("%d deploys landed, but\n%s", landed, cur)
	}
}

// deleteKey deletes key from the deployer's bucket, as a lifecycle rule or
// a hand would.
func (d deployer) deleteKey(key string) {
	d.t.Helper()
	b, err := fsbucket.Open(d.dir)
	if err != nil {
		d.t.Fatal(err)
	}
	defer b.Close()
	if err := b.Delete(d.t.Context(), key, bucket.Condition{}); err != nil {
		d.t.Fatal(err)
	}
}

// current is the deployer's current: version and seq.
func (d deployer) current() []string {
	d.t.Helper()
	b, err := fsbucket.Open(d.dir)
	if err != nil {
		d.t.Fatal(err)
	}
	defer b.Close()
	o, err := b.Get(d.t.Context(), "apps/acme/shop/current", bucket.GetOptions{})
	if err != nil {
		d.t.Fatal(err)
	}
	defer o.Body.Close()
	data, err := io.ReadAll(o.Body)
	if err != nil {
		d.t.Fatal(err)
	}
	return strings.Fields(string(data))
}

// A current naming a missing version: a deploy keeping its classes and a
// rollback refuse, saying to deploy the classes again; --actor repairs
// it, with a warning naming the missing version.
func TestDeployOverMissingVersion(t *testing.T) {
	engineNeutral(t)
	d := newDeployer(t)
	good := counter(t)
	d.must("--actor", "counter="+good)
	d.must("--access", "counter=internal")
	v := d.current()[0]
	d.deleteKey("apps/acme/shop/" + v + "/manifest")
	if out, ok := d.run("--access", "counter=existing"); ok || !strings.Contains(out, "--actor for each class") {
		t.Errorf("a deploy keeping the classes: ok %v:\n%s", ok, out)
	}
	if out, ok := d.run("--rollback"); ok || !strings.Contains(out, "deploy the app's classes again") {
		t.Errorf("a rollback: ok %v:\n%s", ok, out)
	}
	out := d.must("--actor", "counter="+good)
	if !strings.Contains(out, "warning: current named version "+v+", which is not in the bucket") || !strings.Contains(out, "seq 3") {
		t.Errorf("the repair:\n%s", out)
	}
}

// A first deploy over the versions of an app whose current is gone is
// refused, naming --seq-floor; with it the seq is the floor.
func TestDeploySeqFloor(t *testing.T) {
	engineNeutral(t)
	d := newDeployer(t)
	good := counter(t)
	d.must("--actor", "counter="+good)
	d.must("--access", "counter=internal")
	d.deleteKey("apps/acme/shop/current")
	out, ok := d.run("--actor", "counter="+good)
	if ok || !strings.Contains(out, "restored from an older backup") || !strings.Contains(out, "--seq-floor") {
		t.Fatalf("a first deploy over versions: ok %v:\n%s", ok, out)
	}
	if out, ok := d.run("--rollback", "--seq-floor", "9"); ok || !strings.Contains(out, "--seq-floor is for a deploy") {
		t.Errorf("--seq-floor with --rollback: ok %v:\n%s", ok, out)
	}
	if out := d.must("--actor", "counter="+good, "--seq-floor", "9"); !strings.Contains(out, "seq 9 (was the first deploy)") || d.current()[1] != "9" {
		t.Errorf("with --seq-floor 9:\n%s", out)
	}
}

// deployedRE is what a deploy prints of the version it made current.
var deployedRE = regexp.MustCompile(`version ([0-9a-f]{16}) is current, seq (\d+)`)

// A node of a deployed app (serve --app) serves current, and cluster
// status shows it and the app's current; after another deploy the node
// follows within a few heartbeats; a current deleted by hand is warned
// about while the node still serves its version.
func TestDeployFollowedInStatus(t *testing.T) {
	engineNeutral(t)
	d := newDeployer(t)
	bucketURL := "file://" + d.dir
	env := append(withoutWasmkeepVars(), shortLease...)
	deployed := func(out string) string {
		t.Helper()
		m := deployedRE.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("deploy printed no version:\n%s", out)
		}
		return m[1]
	}
	v1 := deployed(d.must("--actor", "counter="+counter(t), "--config", "counter="+writeFile(t, "1.env", "ROUND=1\n")))
	serveBinary(t, d.bin, env, "--data-dir", t.TempDir(), "--bucket", bucketURL, "--node-id", "a", "--app", "acme/shop")
	wantCluster(t, d.bin, env, bucketURL, 0, []string{`(?m)^a +yes +\S+ +serving +\d+ +\S+ +acme/shop +` + v1 + ` \(seq 1\) `,
		`(?m)^acme/shop +` + v1 + ` +1$`}, "status")

	v2 := deployed(d.must("--config", "counter="+writeFile(t, "2.env", "ROUND=2\n")))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, _ := clusterCmd(t, d.bin, env, bucketURL, "status")
		if regexp.MustCompile(`(?m)^a +yes .* ` + v2 + ` \(seq 2\) `).MatchString(out) {
			if !strings.Contains(out, "acme/shop  "+v2+"  2") || strings.Contains(out, "warning") {
				t.Errorf("status once the node follows:\n%s", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node did not follow to %s within 30 s:\n%s", v2, out)
		}
	}

	b, err := fsbucket.Open(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Delete(t.Context(), "apps/acme/shop/current", bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
	wantCluster(t, d.bin, env, bucketURL, 0, []string{`warning: node a serves version ` + v2 + ` \(seq 2\) of app acme/shop, but apps/acme/shop/current does not exist`}, "status")
}
