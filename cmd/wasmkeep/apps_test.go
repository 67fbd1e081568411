package main

import (
	"bufio"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/callsign"
)

// Two apps of one tenant on one bucket prefix keep their actors apart
// (ADR 1045): counter/x counted twice on acme/a is a fresh actor on acme/b,
// each app's keys land under its own state root, in the bucket and on
// disk, and a node of acme/b that believes signed calls on its public port
// (--cluster-plaintext accept) refuses one signed for acme/a before
// reading its body; a's public port, where signed calls are not believed,
// takes such a request as a client's. The control, a second node of
// acme/a, reaches acme/a's actor: the same requests on one app do share
// it.
func TestTwoAppsOneBucket(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	bucketDir := memDir(t)
	bucketURL := "file://" + bucketDir
	node := func(id, app string, flags ...string) *bucketNode {
		n := newBucketNode(t, bucketURL, nil)
		n.args = append([]string{"--actor", "counter=" + counter(t), "--bucket", bucketURL, "--node-id", id, "--app", app}, flags...)
		n.start()
		return n
	}
	a, b := node("a", "acme/a"), node("b", "acme/b", "--cluster-plaintext", "accept")
	post := func(n *bucketNode) reply { return ask(t, "POST", n.url+"/actor/counter/x") }
	for i, want := range []struct {
		n          *bucketNode
		body, node string
	}{{a, "1", "a"}, {a, "2", "a"}, {b, "1", "b"}} {
		if r := post(want.n); r.code != 200 || r.body != want.body || r.node != want.node {
			t.Fatalf("POST %d: %+v, want %s from node %s\na:\n%s\nb:\n%s", i+1, r, want.body, want.node, a.logs, b.logs)
		}
	}
	// An event's writes are shipped after its answer: wait for them.
	for _, p := range []string{
		"state/acme/a/owners/acme/counter/x", "state/acme/b/owners/acme/counter/x",
		"state/acme/a/actors/acme/counter/x/wal", "state/acme/b/actors/acme/counter/x/wal",
	} {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			_, err := os.Stat(filepath.Join(bucketDir, p))
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("bucket: %v", err)
				break
			}
		}
	}
	for _, p := range []string{filepath.Join(a.data, "state/acme/a/actors/acme/counter/x.db"), filepath.Join(b.data, "state/acme/b/actors/acme/counter/x.db")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("disk: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(bucketDir, "state/default")); !os.IsNotExist(err) {
		t.Errorf("state/default in the bucket: %v, want none", err)
	}

	// A call signed for acme/a, sent to acme/b's node with a body that
	// never comes: refused at once, before the body.
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second)) // a guard, not an assertion: a node waiting for the body would block here
	if _, err := conn.Write([]byte("POST /actor/counter/x HTTP/1.1\r\nHost: b\r\nContent-Length: 1000000\r\n" +
		callsign.SignatureHeader + ": v1 t=1 n=x to=b mac=x\r\n" + callsign.AppHeader + ": acme/a\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("a call of another app: no answer before its body: %v", err)
	}
	body := make([]byte, 64)
	k, _ := resp.Body.Read(body)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || strings.TrimSpace(string(body[:k])) != "not this app's node" {
		t.Errorf("a call of another app: %d Retry-After %q %q, want 503, 1, not this app's node", resp.StatusCode, resp.Header.Get("Retry-After"), body[:k])
	}

	// On a's public port (--cluster-plaintext refuse) a signature is not
	// believed, so neither is its app: with another app's or none, the
	// request is a client's, answered by the actor.
	for _, app := range []string{"acme/b", ""} {
		req, _ := http.NewRequest("GET", a.url+"/actor/counter/x", nil)
		req.Header.Set(callsign.SignatureHeader, "v1 t=1 n=x to=a mac=x")
		if app != "" {
			req.Header.Set(callsign.AppHeader, app)
		}
		if r := send(t, req, nil); r.code != 200 || r.body != "2" {
			t.Errorf("a client's request with a signature header and app %q on a's public port: %+v, want 2 from the actor\na:\n%s", app, r, a.logs)
		}
	}

	// The control: a second node of acme/a reaches acme/a's actor, held
	// by a.
	c := node("c", "acme/a")
	if r := post(c); r.code != 200 || r.body != "3" || r.node != "a" {
		t.Fatalf("POST through c, of acme/a: %+v, want 3 from node a\nc:\n%s", r, c.logs)
	}
	for _, n := range []*bucketNode{a, b, c} {
		n.stop()
	}

	// bucket ls and verify list each app's actors apart.
	bucketCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(a.bin, append(append([]string{"bucket"}, args...), "--bucket", bucketURL)...)
		cmd.Env = withoutWasmkeepVars()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bucket %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	ls := regexp.MustCompile(`(?m)^(acme/[ab]) +acme/counter/x +(\d+) `)
	var rows []string
	for _, m := range ls.FindAllStringSubmatch(bucketCmd("ls"), -1) {
		rows = append(rows, m[1]+" head "+m[2])
	}
	if got := strings.Join(rows, ", "); got != "acme/a head 3, acme/b head 1" {
		t.Errorf("bucket ls: %s, want acme/a head 3, acme/b head 1", got)
	}
	if out := bucketCmd("ls", "--app", "acme/b"); strings.Contains(out, "acme/a") || !strings.Contains(out, "acme/b") {
		t.Errorf("bucket ls --app acme/b:\n%s", out)
	}
	if out := bucketCmd("verify"); !strings.Contains(out, "ok      acme/a acme/counter/x: head 3") || !strings.Contains(out, "2 actors: 2 ok, 0 broken") {
		t.Errorf("bucket verify:\n%s", out)
	}
}
