package main

import (
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A bucket that does not answer at start (an S3 endpoint on a loopback
// port nothing listens on) makes serve exit non-zero after
// --bucket-wait-secs with one error naming the setting, the long error
// logged in full once, not at every probe (issue 29: retried for ever,
// each retry a 1.3 KB warning).
func TestBucketThatDoesNotAnswerAtStart(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + l.Addr().String()
	l.Close() // nothing listens there now: each connection is refused
	cmd := exec.Command(wasmkeepBinary(t), "serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--actor", "counter="+counter(t),
		"--bucket", "s3://nobody-home", "--node-id", "a", "--cluster-plaintext", "accept", "--bucket-wait-secs", "3")
	cmd.Env = append(withoutWasmkeepVars(), "AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s", "AWS_REGION=us-east-1",
		"AWS_ENDPOINT="+endpoint, "AWS_ALLOW_HTTP=true")
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute): // a hang, not a slow machine
		cmd.Process.Kill()
		<-done
		t.Fatalf("serve still waiting for the bucket 3 minutes on, with --bucket-wait-secs 3:\n%s", out)
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 0 {
		t.Fatalf("serve: %v, want a non-zero exit\n%s", err, out)
	}
	if !strings.Contains(string(out), "the bucket did not answer: no answer to") || !strings.Contains(string(out), "(cluster.bucket_wait_secs)") {
		t.Errorf("want one error naming the setting:\n%s", out)
	}
	if n := strings.Count(string(out), "still does not answer"); n > 3 {
		t.Errorf("%d retries logged in 3 s of waiting", n)
	}
	if n := strings.Count(string(out), "operation error S3: PutObject"); n > 2 {
		t.Errorf("the S3 error printed %d times, want once as it is first seen and once in the exit's error:\n%s", n, out)
	}
}
