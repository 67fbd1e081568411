package main

import (
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The book's mixed-version test (ADR 0008): two nodes follow acme/shop on
// one bucket; v1 writes an actor; v2, whose on-init migrates the schema,
// runs it on node a; node b's reads of current are held (a bucket relay),
// so b still serves v1 when a stops and the actor's next request reaches b.
// b must not run v1 on v2's data: it refuses (503, the client retries) and,
// once its reads pass, upgrades and answers from v2. The control, the same
// run with the seq check removed (a faults build), shows b answering from
// v1 on the migrated data: the test can fail.
func TestMixedVersionsNeverRunOldCode(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	r := mixedVersions(t, wasmkeepBinary(t), nil)
	if r.code != http.StatusServiceUnavailable {
		t.Fatalf("b, on v1, answered an actor v2 migrated: %+v; want 503", r)
	}
}

func TestMixedVersionsControl(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	r := mixedVersions(t, buildWasmkeep(t, "wasmkeep_faults"), []string{"WASMKEEPTEST_SKIP_SEQ_CHECK=1"})
	if r.code != http.StatusOK || !strings.HasPrefix(r.body, "version=1 inits=1,2") {
		t.Fatalf("without the seq check b answered %+v; want v1's answer on v2's data (version=1 inits=1,2)", r)
	}
}

// mixedVersions runs the test with bin and, for node b, faults (variables
// of a faults build); it returns b's first answer for the actor v2 wrote,
// and, unless faults are set, checks that b answers from v2 once its
// reads of current pass.
func mixedVersions(t *testing.T, bin string, faults []string) reply {
	srv := startS3(t)
	bucketURL := "s3://" + srv.NewBucket(t)
	relay := startRelay(t, srv.Endpoint)
	deploy := func(args ...string) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"deploy", "--app", "acme/shop", "--bucket", bucketURL}, args...)...)
		cmd.Env = append(withoutWasmkeepVars(), srv.Environ()...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("deploy %v: %v\n%s", args, err, out)
		}
	}
	node := func(id string, env ...string) *bucketNode {
		n := newBucketNode(t, bucketURL, append(srv.Environ(), env...))
		n.bin = bin
		n.args = []string{"--app", "acme/shop", "--bucket", bucketURL, "--node-id", id}
		n.start()
		return n
	}
	deploy("--actor", "notes="+schemaV1(t))
	a := node("a")
	b := node("b", append([]string{"AWS_ENDPOINT=" + relay.URL}, faults...)...)
	if r := ask(t, "POST", a.url+"/actor/notes/x"); r.code != 200 || !strings.HasPrefix(r.body, "version=1 inits=1 ") {
		t.Fatalf("v1's first answer: %+v", r)
	}
	// From here b never reads current: it stays on v1.
	relay.Hold(func(req *http.Request) bool {
		return req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/apps/acme/shop/current")
	})
	deploy("--actor", "notes="+schemaV2(t))
	deadline := time.Now().Add(30 * time.Second)
	for r := ask(t, "POST", a.url+"/actor/notes/x"); !strings.HasPrefix(r.body, "version=2 inits=1,2 "); r = ask(t, "POST", a.url+"/actor/notes/x") {
		if time.Now().After(deadline) {
			t.Fatalf("a never ran v2 on the actor: %+v\n%s", r, a.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.stop() // the actor is released: its next request is b's to take
	first := ask(t, "GET", b.url+"/actor/notes/x")
	if faults == nil {
		relay.Release()
		deadline = time.Now().Add(30 * time.Second)
		for r := ask(t, "GET", b.url+"/actor/notes/x"); !strings.HasPrefix(r.body, "version=2 inits=1,2"); r = ask(t, "GET", b.url+"/actor/notes/x") {
			if r.code == 200 || time.Now().After(deadline) {
				t.Fatalf("b, its reads of current passing again, answered %+v; want v2's answer at once or a 503 until it has v2\n%s", r, b.logs)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return first
}

// A node that cannot build the app's new version keeps serving the one it
// has, whole, reports not ready and says why in its heartbeat; once a
// version it can build is deployed it applies it and is ready again. Here
// the node's memory limit (1 MiB) takes the C counter but not the Go one,
// whose initial memory is larger: wasmkeep deploy, which checks modules at
// the default limit, accepts both.
func TestNodeBehindAVersionItCannotBuild(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	d := newDeployer(t)
	bucketURL := "file://" + d.dir
	cCounter := buildCGuest(t, "examples/c/counter")
	d.must("--actor", "counter="+cCounter)
	n := newBucketNode(t, bucketURL, nil)
	n.args = []string{"--app", "acme/shop", "--bucket", bucketURL, "--node-id", "a", "--memory-limit-mib", "1"}
	n.start()
	ready := func() int { return ask(t, "GET", n.url+"/_wasmkeep/ready").code }
	until := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !ok(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("never %s\n%s", what, n.logs)
			}
		}
	}
	post := func(want string) {
		t.Helper()
		if r := ask(t, "POST", n.url+"/actor/counter/x"); r.code != 200 || r.body != want {
			t.Fatalf("POST: %+v, want %s\n%s", r, want, n.logs)
		}
	}
	post("1")
	d.must("--actor", "counter="+counter(t))
	until("not ready behind a version it cannot build", func() bool { return ready() == http.StatusServiceUnavailable })
	post("2") // the version it has, whole
	// The heartbeat says so at its next write.
	until("behind in its heartbeat", func() bool {
		out, _ := clusterCmd(t, n.bin, n.env, bucketURL, "status")
		return strings.Contains(out, "node a is behind app acme/shop: version")
	})
	wantCluster(t, n.bin, n.env, bucketURL, 0, []string{`(?m)^a .* behind `, `node a is behind app acme/shop: .*class counter: .*above the memory limit`}, "status")
	d.must("--actor", "counter="+cCounter)
	until("ready again on a version it can build", func() bool { return ready() == http.StatusOK })
	post("3")
}

// Once an app has deployed, its version is the only source of its classes,
// rules and front: serve --app refuses the node's own, saying what to run.
func TestServeAppRefusesNodeClassesOnceDeployed(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	d := newDeployer(t)
	d.must("--actor", "counter="+counter(t))
	for _, extra := range [][]string{
		{"--actor", "counter=" + counter(t)},
		{"--access", "counter=existing"},
		{counter(t)}, // a stateless component
	} {
		cmd := exec.Command(d.bin, append([]string{"serve", "--app", "acme/shop", "--bucket", "file://" + d.dir,
			"--node-id", "a", "--data-dir", memDir(t), "--listen", "127.0.0.1:0"}, extra...)...)
		cmd.Env = append(os.Environ(), shortLease...)
		out, err := cmd.CombinedOutput()
		if want := "app acme/shop is deployed (version "; err == nil || !strings.Contains(string(out), want) ||
			!strings.Contains(string(out), "wasmkeep deploy --app acme/shop") {
			t.Errorf("serve --app with %v: %v, want an error with %q:\n%s", extra, err, want, out)
		}
	}
}
