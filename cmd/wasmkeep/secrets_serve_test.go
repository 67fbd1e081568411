package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/secrets"
	fsbucket "github.com/wasmkeep/wasmkeep/plugins/bucket-fs"
)

// serve --app reading the app's secrets from the bucket (issue 27, items 3
// to 5; ADR 1050): real nodes on one file bucket, the app deployed and its
// secrets set with the CLIs, actors of the schema guest answering the
// GREETING they read (env.get).

var shopApp = app.Name{Tenant: "acme", App: "shop"}

// secretsCluster is app acme/shop on one file bucket, its nodes and the
// CLIs; every output of either is kept for the grep for values.
type secretsCluster struct {
	t     *testing.T
	cli   *secretsCLI
	d     deployer
	nodes []*bucketNode
}

func newSecretsCluster(t *testing.T) *secretsCluster {
	cli := newSecretsCLI(t)
	return &secretsCluster{t: t, cli: cli, d: deployer{t: t, bin: cli.bin, dir: cli.dir}}
}

func (c *secretsCluster) bucketURL() string { return "file://" + c.cli.dir }

// deploy runs wasmkeep deploy, its output kept with the CLI's.
func (c *secretsCluster) deploy(args ...string) {
	c.t.Helper()
	out := c.d.must(args...)
	c.cli.mu.Lock()
	c.cli.outputs = append(c.cli.outputs, out)
	c.cli.mu.Unlock()
}

// secretsLease is steadyLease with a heartbeat, and so a read of the
// app's secrets and a taking pass, every 500 ms rather than ttl/3: each
// wait for one costs less, a lease write still has its second.
var secretsLease = append(slices.Clip(steadyLease), "WASMKEEP_CLUSTER__HEARTBEAT_PERIOD=500ms")

// node is a node of the app, not started, with args after its own.
func (c *secretsCluster) node(id string, args ...string) *bucketNode {
	n := newBucketNode(c.t, c.bucketURL(), secretsLease)
	n.args = append(append([]string{"--app", "acme/shop", "--bucket", c.bucketURL()}, args...), "--node-id", id) // id last: bucketNode.id
	c.nodes = append(c.nodes, n)
	return n
}

// startAll starts the nodes at once.
func (c *secretsCluster) startAll() {
	c.t.Helper()
	startNodes(c.t, c.nodes...)
}

// logs are every node's output.
func (c *secretsCluster) logs() string {
	var s strings.Builder
	for _, n := range c.nodes {
		fmt.Fprintf(&s, "--- node %s\n%s", n.id(), n.logs)
	}
	return s.String()
}

// until polls each node's answer for path until want holds of it, for at
// most within, and returns the first answer that held, by node.
func (c *secretsCluster) until(within time.Duration, path string, want func(reply) bool) []reply {
	c.t.Helper()
	got := make([]reply, len(c.nodes))
	for i, n := range c.nodes {
		deadline := time.Now().Add(within)
		for {
			r := ask(c.t, "GET", n.url+strings.ReplaceAll(path, "{i}", strconv.Itoa(i)))
			if want(r) {
				got[i] = r
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("node %s, %s: %+v after %v\n%s", n.id(), path, r, within, c.logs())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return got
}

var servingSeq2 = regexp.MustCompile(`msg="serving version" deployed=\S+ seq=2 `)

func says(greeting string) func(reply) bool {
	return func(r reply) bool { return r.code == 200 && strings.HasSuffix(r.body, "greeting="+greeting) }
}

// in makes t the test of the cluster's helpers, for a subtest on its
// nodes.
func (c *secretsCluster) in(t *testing.T) {
	c.t, c.cli.t, c.d.t = t, t, t
	for _, n := range c.nodes {
		n.t = t
	}
}

// Three nodes of acme/shop (classes s and counter) on one file bucket,
// shared by the subtests in turn: a and b hold keys k1 and k2, c only k1
// (and stops after its subtest); none holds k3. Every value a subtest sets
// is in values, and every output of a node stopped is in outputs, for the
// last one's grep (issue 27, item 5).
func TestSecretsOnThreeNodes(t *testing.T) {
	engineNeutral(t)
	c := newSecretsCluster(t)
	k1, k2, k3 := c.cli.newKey("k1"), c.cli.newKey("k2"), c.cli.newKey("k3")
	v1, count := schemaV1(t), counter(t)
	c.deploy("--actor", "s="+v1, "--actor", "counter="+count)
	metrics := []string{"--metrics-listen", "127.0.0.1:0"}
	c.node("a", append(metrics, "--secrets-key", k1, "--secrets-key", k2)...)
	c.node("b", append(metrics, "--secrets-key", k1, "--secrets-key", k2)...)
	c.node("c", append(metrics, "--secrets-key", k1)...)
	c.startAll()
	var outputs []string
	var values []string
	set := func(value, key string) {
		c.t.Helper()
		values = append(values, value)
		c.cli.must(value, "set", "--app", "acme/shop", "--key", key, "--class", "s", "GREETING")
	}
	reset := func(value, key string) {
		c.t.Helper()
		values = append(values, value)
		c.cli.must("", "reset", "--app", "acme/shop", "--new-key", key, "--from", greetingFile(c.t, value), "--nodes-have-new-key")
	}

	// A secret set with wasmkeep secrets set reaches an actor on each
	// node within 4 s (the bound, the poll's deadline), a resident
	// actor at its next event (a new instance: on-init does not run
	// again), and a deploy after the set keeps it over the version's
	// configuration.
	t.Run("a set reaches every node", func(t *testing.T) {
		c.in(t)
		c.until(5*time.Second, "/actor/s/r{i}", says("")) // resident, no secret yet
		// No --force: every node says in its heartbeat that it reads secrets.
		set("hello-SERVE_VALUE_1", k1)
		for i, r := range c.until(4*time.Second, "/actor/s/r{i}", says("hello-SERVE_VALUE_1")) {
			if !strings.HasPrefix(r.body, "version=1 inits=1 hits=1 ") {
				t.Errorf("node %d: the resident actor's first answer with the secret: %q, want a new instance (hits=1), on-init not rerun (inits=1)", i, r.body)
			}
		}
		// The same code, so no node compiles: the version's configuration
		// only.
		config := writeFile(t, "s.conf", "GREETING=from-the-config\n")
		c.deploy("--actor", "s="+v1, "--actor", "counter="+count, "--config", "s="+config)
		for _, n := range c.nodes {
			for deadline := time.Now().Add(20 * time.Second); !servingSeq2.MatchString(n.logs.String()); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("node %s does not serve the new version\n%s", n.id(), c.logs())
				}
			}
		}
		c.until(time.Second, "/actor/s/r{i}", says("hello-SERVE_VALUE_1"))
	})

	// The fail-closed test, its hand-over: a reset under k2, which
	// c does not hold, while a and b open it. c is not ready and hands the
	// actors it held to a or b, their acknowledged writes there; a new
	// actor asked for through c is created on a or b; status shows c
	// drained (heartbeat line 12). Once a reset under k1 lets it open the
	// set again it takes actors again. Then c stops, its outputs kept.
	t.Run("a node that cannot open them hands over", func(t *testing.T) {
		c.in(t)
		a, cn := c.nodes[0], c.nodes[2]
		env := append(withoutWasmkeepVars(), secretsLease...)
		for i := range 4 {
			for j := 1; j <= 2; j++ {
				if r := ask(t, "POST", fmt.Sprintf("%s/actor/counter/held%d", cn.url, i)); r.code != 200 || r.body != strconv.Itoa(j) || r.node != "c" {
					t.Fatalf("counter/held%d through c: %+v, want %d from c", i, r, j)
				}
			}
		}
		reset("under-k2-LEAK_VALUE", k2)
		waitFor(t, 10*time.Second, "c not ready", func() bool { return ask(t, "GET", cn.url+"/_wasmkeep/ready").code == 503 })
		seen := waitState(t, env, c.bucketURL(), "c", "drained(secrets)")
		t.Logf("c's states as it handed over: %q", seen)
		for i := range 4 {
			if r := ask(t, "GET", fmt.Sprintf("%s/actor/counter/held%d", cn.url, i)); r.code != 200 || r.body != "2" || r.node == "c" || r.node == "" {
				t.Errorf("counter/held%d through c, which cannot open the secrets: %+v, want 2 from a or b", i, r)
			}
		}
		if r := ask(t, "POST", cn.url+"/actor/counter/fresh"); r.code != 200 || r.body != "1" || r.node == "c" || r.node == "" {
			t.Errorf("a new actor through c: %+v, want it created on a or b", r)
		}
		if r := ask(t, "GET", cn.url+"/actor/s/fresh"); !says("under-k2-LEAK_VALUE")(r) || r.node == "c" {
			t.Errorf("class s through c: %+v, want the secret under k2 from a or b", r)
		}
		if r := ask(t, "GET", a.url+"/_wasmkeep/ready"); r.code != 200 {
			t.Errorf("a, which opens the set: ready %d", r.code)
		}

		reset("under-k1-LEAK_VALUE", k1)
		waitState(t, env, c.bucketURL(), "c", "serving")
		if r := ask(t, "GET", cn.url+"/_wasmkeep/ready"); r.code != 200 {
			t.Errorf("c after the reset it opens: ready %d", r.code)
		}
		if r := ask(t, "POST", cn.url+"/actor/counter/after"); r.code != 200 || r.body != "1" || r.node != "c" {
			t.Errorf("a new actor through c after the reset it opens: %+v, want it taken by c", r)
		}
		outputs = append(outputs, ask(t, "GET", "http://"+metricsAddr(t, cn.logs)+"/metrics").body)
		cn.stop()
		outputs = append(outputs, c.logs())
		c.nodes = c.nodes[:2]
	})

	// On a and b: a set, a rotation under load (no 503 at any point), then three sets
	// the nodes cannot open (an object tampered with, one sealed for
	// another app, one under a key they do not hold), each refused 503
	// with Retry-After, the node not ready with reason "secrets", until a
	// reset they can open.
	var control reply // an actor's answer holding a value: the grep's control
	t.Run("a rotation, and sets no node can open", func(t *testing.T) {
		c.in(t)
		set("first-LEAK_VALUE", k1)
		control = c.until(4*time.Second, "/actor/s/x{i}", says("first-LEAK_VALUE"))[0]

		// The rotation under a small load: every answer 200.
		var (
			mu     sync.Mutex
			failed []string
			done   = make(chan struct{})
			wg     sync.WaitGroup
		)
		for i, n := range c.nodes {
			wg.Go(func() {
				for j := 0; ; j++ {
					select {
					case <-done:
						return
					default:
					}
					r := ask(t, "GET", fmt.Sprintf("%s/actor/s/load-%d-%d", n.url, i, j%4))
					if r.code != 200 {
						mu.Lock()
						failed = append(failed, fmt.Sprintf("node %s: %d %s", n.id(), r.code, r.body))
						mu.Unlock()
					}
					time.Sleep(10 * time.Millisecond)
				}
			})
		}
		c.cli.must("", "rotate-key", "--app", "acme/shop", "--key", k1, "--new-key", k2, "--nodes-have-new-key")
		set("second-LEAK_VALUE", k2)
		c.until(4*time.Second, "/actor/s/x{i}", says("second-LEAK_VALUE"))
		close(done)
		wg.Wait()
		for _, f := range failed {
			t.Errorf("during the rotation: %s", f)
		}

		for _, bad := range []struct {
			name string
			make func()
		}{
			{"an object tampered with", func() {
				values = append(values, "tampered-LEAK_VALUE")
				obj, data := sealAhead(t, c.cli.dir, shopApp, k2, "tampered-LEAK_VALUE")
				data[len(data)-3] ^= 1 // a hex digit of the tag
				putAhead(t, c.cli.dir, obj, data)
			}},
			{"an object sealed for another app", func() {
				values = append(values, "copied-LEAK_VALUE")
				obj, data := sealAhead(t, c.cli.dir, app.Name{Tenant: "acme", App: "blog"}, k2, "copied-LEAK_VALUE")
				putAhead(t, c.cli.dir, strings.Replace(obj, "/blog/", "/shop/", 1), data)
			}},
			{"a key the nodes do not hold", func() { reset("otherkey-LEAK_VALUE", k3) }},
		} {
			bad.make()
			// Every node blocked first: an actor's request through one node
			// is forwarded to the node holding it, which may not have read
			// the bad set yet.
			for _, n := range c.nodes {
				waitFor(t, 4*time.Second, bad.name+": node "+n.id()+" not ready", func() bool {
					return ask(t, "GET", n.url+"/_wasmkeep/ready").code == 503
				})
			}
			for _, n := range c.nodes {
				metrics := "http://" + metricsAddr(t, n.logs) + "/metrics"
				req, _ := http.NewRequest("GET", n.url+"/actor/s/x0", nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
					t.Errorf("%s: node %s answers %d (Retry-After %q), want 503 with Retry-After", bad.name, n.id(), resp.StatusCode, resp.Header.Get("Retry-After"))
				}
				if v := metricValue(ask(t, "GET", metrics).body, `wasmkeep_not_ready{reason="secrets"}`); v != 1 {
					t.Errorf(`%s: node %s: wasmkeep_not_ready{reason="secrets"} = %v, want 1`, bad.name, n.id(), v)
				}
			}
			reset("reset-LEAK_VALUE", k2)
			// Ready first: an answer alone could come from a peer, the node
			// forwarding while it takes no actor.
			c.until(20*time.Second, "/_wasmkeep/ready", func(r reply) bool { return r.code == 200 }) // a failed read backs off up to 15 s
			c.until(4*time.Second, "/actor/s/x{i}", says("reset-LEAK_VALUE"))
		}
	})

	// No value reaches any node's output, any CLI output, the metrics page
	// or cluster status; the control: an actor's answer holds one.
	t.Run("no value in any output", func(t *testing.T) {
		c.in(t)
		outputs = append(outputs, c.logs())
		for _, n := range c.nodes {
			outputs = append(outputs, ask(t, "GET", "http://"+metricsAddr(t, n.logs)+"/metrics").body)
		}
		for _, args := range [][]string{{"status"}, {"status", "--json"}} {
			out, _ := clusterCmd(t, c.cli.bin, withoutWasmkeepVars(), c.bucketURL(), args...)
			outputs = append(outputs, out)
		}
		for _, n := range c.nodes {
			n.stop() // its last lines too
		}
		outputs = append(outputs, c.logs())
		c.cli.mu.Lock()
		outputs = append(outputs, c.cli.outputs...)
		c.cli.mu.Unlock()
		for _, v := range values {
			for _, out := range outputs {
				if strings.Contains(out, v) {
					t.Errorf("an output holds the value %q:\n%s", v, out)
				}
			}
		}
		if !strings.Contains(control.body, "first-LEAK_VALUE") {
			t.Errorf("the control: an actor's answer %q does not hold the value: the grep could not find one", control.body)
		}
	})
}

// greetingFile is a file for secrets reset --from setting class s's
// GREETING to value.
func greetingFile(t *testing.T, value string) string {
	return writeFile(t, "set", fmt.Sprintf("s GREETING %d\n%s\n", len(value), value))
}

// sealAhead seals value for class s's GREETING, for app a, under the key
// file, at the seq after acme/shop's current, as a writer holding the key
// would: its object's key and bytes, not yet in the bucket.
func sealAhead(t *testing.T, dir string, a app.Name, keyFile string, value string) (string, []byte) {
	t.Helper()
	key, err := secrets.LoadKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	seq := currentSeq(t, dir) + 1
	scratch := buckettest.NewMemory(buckettest.Flaws{})
	putKey(t, scratch, a.SecretsRoot()+"current", []byte(fmt.Sprintf("%016x\n", seq-1)))
	if _, err := secrets.Write(t.Context(), scratch, secrets.Place{App: a}, secrets.Change{Seal: key, Reset: true, NodesHaveKey: true,
		Apply: func(s *secrets.Set) error { return s.Put("s", "GREETING", value) }}); err != nil {
		t.Fatal(err)
	}
	obj := fmt.Sprintf("%s%016x", a.SecretsRoot(), seq)
	return obj, getKey(t, scratch, obj)
}

// putAhead puts a sealed object into the bucket and makes current name it.
func putAhead(t *testing.T, dir, obj string, data []byte) {
	t.Helper()
	b, err := fsbucket.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	putKey(t, b, obj, data)
	putKey(t, b, shopApp.SecretsRoot()+"current", []byte(obj[len(obj)-16:]+"\n"))
}

func currentSeq(t *testing.T, dir string) uint64 {
	t.Helper()
	b, err := fsbucket.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	seq, err := strconv.ParseUint(strings.TrimSpace(string(getKey(t, b, shopApp.SecretsRoot()+"current"))), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

func putKey(t *testing.T, b bucket.Bucket, key string, data []byte) {
	t.Helper()
	if _, err := b.Put(t.Context(), key, strings.NewReader(string(data)), int64(len(data)), bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
}

func getKey(t *testing.T, b bucket.Bucket, key string) []byte {
	t.Helper()
	o, err := b.Get(t.Context(), key, bucket.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Body.Close()
	data, err := io.ReadAll(o.Body)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// A node given neither --secrets-key nor --no-secrets refuses to start
// once the app has secrets, naming both flags; with --no-secrets it starts
// and serves --env alone; one with the key serves the three layers by
// name: the configuration, then the secrets, then --env. A class that
// requires a name answers 503 until a secret sets it.
func TestSecretsKeylessRequiresAndLayers(t *testing.T) {
	engineNeutral(t)
	c := newSecretsCluster(t)
	key := c.cli.newKey("secrets.key")
	config := writeFile(t, "s.conf", "GREETING=from-the-config\n")
	c.deploy("--actor", "s="+schemaV1(t), "--config", "s="+config, "--requires", "s=GREETING")
	c.cli.must("from-the-secrets", "set", "--app", "acme/shop", "--key", key, "--class", "t", "OTHER", "--force")

	keyless := c.node("keyless")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a node that starts would serve on
	defer cancel()
	cmd := exec.CommandContext(ctx, keyless.bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", keyless.data}, keyless.args...)...)
	cmd.Env = append(os.Environ(), shortLease...) // its start check is shorter than steadyLease's
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--secrets-key") || !strings.Contains(string(out), "--no-secrets") {
		t.Fatalf("a node without a key once the app has secrets: %v, want a refusal naming both flags:\n%s", err, out)
	}
	c.nodes = nil

	env := writeFile(t, "s.env", "GREETING=from-the-env\n")
	c.node("a", "--no-secrets", "--env", "s="+env)
	c.node("b", "--secrets-key", key)
	c.startAll()
	c.until(5*time.Second, "/actor/s/p{i}", func(r reply) bool { return r.code == 200 })
	got := []string{ask(t, "GET", c.nodes[0].url+"/actor/s/p0").body, ask(t, "GET", c.nodes[1].url+"/actor/s/p1").body}
	if !strings.HasSuffix(got[0], "greeting=from-the-env") || !strings.HasSuffix(got[1], "greeting=from-the-config") {
		t.Fatalf("before the secret: --no-secrets with --env %q, with the key %q", got[0], got[1])
	}
	c.cli.must("from-the-secrets", "set", "--app", "acme/shop", "--key", key, "--class", "s", "GREETING", "--force")
	b := c.nodes[1]
	deadline := time.Now().Add(4 * time.Second)
	for r := ask(t, "GET", b.url+"/actor/s/p1"); !says("from-the-secrets")(r); r = ask(t, "GET", b.url+"/actor/s/p1") {
		if time.Now().After(deadline) {
			t.Fatalf("the secret over the configuration: %+v\n%s", r, c.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := ask(t, "GET", c.nodes[0].url+"/actor/s/p0"); !says("from-the-env")(r) {
		t.Errorf("--env over the secret: %+v", r)
	}

	// Required: unset GREETING everywhere but --env, and the class refuses.
	c.deploy("--actor", "s="+schemaV1(t), "--config", "s=")
	c.cli.must("", "unset", "--app", "acme/shop", "--key", key, "--class", "s", "GREETING", "--force")
	deadline = time.Now().Add(20 * time.Second)
	for r := ask(t, "GET", b.url+"/actor/s/p1"); r.code != 503; r = ask(t, "GET", b.url+"/actor/s/p1") {
		if time.Now().After(deadline) {
			t.Fatalf("a required name unset: %+v, want 503\n%s", r, c.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.cli.must("back-again", "set", "--app", "acme/shop", "--key", key, "--class", "s", "GREETING", "--force")
	deadline = time.Now().Add(4 * time.Second)
	for r := ask(t, "GET", b.url+"/actor/s/p1"); !says("back-again")(r); r = ask(t, "GET", b.url+"/actor/s/p1") {
		if time.Now().After(deadline) {
			t.Fatalf("the required name set again: %+v\n%s", r, c.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
