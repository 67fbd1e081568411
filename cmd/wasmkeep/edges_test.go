package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// A request that reaches a node after it began stopping is told so, with
// Retry-After, rather than that the node is at capacity (issue 24, item 13).
func TestStoppingNodeSaysSo(t *testing.T) {
	n := startNode(t, node.Options{Classes: map[string]string{"probe": probe(t)}})
	// A server of the test's own on the node, to see the request's headers
	// read: Shutdown waits for its body, and the event then meets the
	// stopping node.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := n.node.NewServer(l.Addr().String())
	active := make(chan struct{}, 1)
	srv.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateActive {
			active <- struct{}{}
		}
	}
	go srv.Serve(l)
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /actor/probe/a/hits HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n")
	<-active

	nd := n.node
	n.node = nil // stopped here, not at cleanup
	n.srv.Close()
	stopped := make(chan error, 1)
	go func() { stopped <- nd.Shutdown(srv, 30*time.Second) }()
	waitFor(t, 10*time.Second, "the listener to close", func() bool {
		d, err := net.Dial("tcp", l.Addr().String())
		if err == nil {
			d.Close()
		}
		return err != nil
	})
	io.WriteString(c, "hi")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || string(body) != "server is stopping, retry\n" {
		t.Errorf("a request to a stopping node: %d %q, Retry-After %q; want 503 \"server is stopping, retry\", 1",
			resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	c.Close()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}

// An unknown subcommand of a command group fails, naming it; cobra alone
// printed the group's help and exited 0 (issue 24, item 12).
func TestUnknownCommandFails(t *testing.T) {
	bin := wasmkeepBinary(t)
	for _, c := range []struct {
		args    []string
		unknown string
		code    int
	}{
		{[]string{"cluster", "move", "b"}, "move", 2},
		{[]string{"bucket", "lss"}, "lss", 1},
		{[]string{"conformance", "buckets"}, "buckets", 1},
		{[]string{"nosuch"}, "nosuch", 1},
	} {
		out, err := exec.Command(bin, c.args...).CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("unknown command %q", c.unknown); code != c.code || !strings.Contains(string(out), want) {
			t.Errorf("wasmkeep %s: exit status %d, %q; want %d and %s", strings.Join(c.args, " "), code, out, c.code, want)
		}
	}
	// A group alone still lists its commands.
	if out, err := exec.Command(bin, "cluster").CombinedOutput(); err != nil || !strings.Contains(string(out), "fence") {
		t.Errorf("wasmkeep cluster: %v, %q; want its commands, exit status 0", err, out)
	}
}

// A second process on a serving node's data directory is refused at start,
// naming the first, before it touches the directory or a bucket; once the
// first stops, another starts (issue 24, item 14). Before the lock both
// served, and the second's requests for the same actors answered 500.
func TestSecondProcessOnADataDirectoryRefused(t *testing.T) {
	engineNeutral(t)
	bin := wasmkeepBinary(t)
	data, bucketDir := t.TempDir(), t.TempDir()
	args := []string{"--data-dir", data, "--actor", "counter=" + counter(t)}
	first, cmd, logs := serveBinary(t, bin, withoutWasmkeepVars(), args...)
	tn := &testNode{t: t, url: first}
	tn.expect("POST", "/actor/counter/a", "", 200, "1\n")

	want := fmt.Sprintf("data directory %s is in use by another process (pid %d, started ", data, cmd.Process.Pid)
	for _, extra := range [][]string{nil, {"--bucket", "file://" + bucketDir, "--node-id", "b", "--cluster-listen", "127.0.0.1:0"}} {
		// One that is not refused serves until killed.
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		second := exec.CommandContext(ctx, bin, append(append([]string{"serve", "--listen", "127.0.0.1:0"}, args...), extra...)...)
		second.Env = withoutWasmkeepVars()
		out, err := second.CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), want) || !strings.Contains(string(out), "listening on "+strings.TrimPrefix(first, "http://")) {
			t.Errorf("a second process %q: %v, want a refusal naming the first (%s…, listening on %s):\n%s", extra, err, want, first, out)
		}
	}
	if entries, _ := os.ReadDir(bucketDir); len(entries) != 0 {
		t.Errorf("the refused process wrote to the bucket: %v", entries)
	}
	tn.expect("POST", "/actor/counter/a", "", 200, "2\n")

	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the first process's clean stop: %v\n%s", err, logs)
	}
	tn.url, _, _ = serveBinary(t, bin, withoutWasmkeepVars(), args...)
	tn.expect("POST", "/actor/counter/a", "", 200, "3\n")
}

// Slow clients do not hold a node (issue 24, item 8): hundreds that send
// a body's first byte of ten and stop each get 408 once the body's time is
// up, never more than --max-connections of them are open in the server at
// once (the rest wait in the backlog), a client with a connection open is
// served meanwhile, and a new one is served once their time is up. Before,
// a body was read with no time limit and every connection was accepted.
func TestSlowClientsDoNotHoldTheNode(t *testing.T) {
	engineNeutral(t)
	const slow, maxConns = 300, 40
	bin := wasmkeepBinary(t)
	url, cmd, logs := serveBinary(t, bin, withoutWasmkeepVars(), "--data-dir", t.TempDir(), "--actor", "counter="+counter(t),
		"--max-connections", fmt.Sprint(maxConns), "--request-body-timeout", "2s")
	kept := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}, Timeout: 60 * time.Second}
	post := func(c *http.Client, name string) string {
		resp, err := c.Post(url+"/actor/counter/"+name, "", nil)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprint(resp.StatusCode, " ", string(b))
	}
	if got := post(kept, "kept"); got != "200 1\n" {
		t.Fatalf("before the slow clients: %s", got)
	}

	answers := make(chan string, slow)
	for range slow {
		c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "POST /actor/counter/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nx")
		go func() {
			c.SetReadDeadline(time.Now().Add(60 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				answers <- "no answer"
				return
			}
			resp.Body.Close()
			answers <- resp.Status
		}()
	}
	if got := post(kept, "kept"); got != "200 2\n" {
		t.Errorf("a client with a connection open, beside the slow ones: %s", got)
	}
	if open := sockets(t, cmd.Process.Pid); open > maxConns+2 { // the listener and its poller's
		t.Errorf("the server holds %d sockets; --max-connections is %d", open, maxConns)
	}
	if got := post(&http.Client{Timeout: 60 * time.Second}, "new"); got != "200 1\n" {
		t.Errorf("a new client, after the slow ones: %s", got)
	}
	count := map[string]int{}
	for range slow {
		count[<-answers]++
	}
	if count["408 Request Timeout"] != slow {
		t.Errorf("the slow clients' answers: %v, want %d × 408\n%s", count, slow, logs)
	}
}

// sockets counts the sockets process pid holds open.
func sockets(t *testing.T, pid int) int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && strings.HasPrefix(target, "socket:") {
			n++
		}
	}
	return n
}
