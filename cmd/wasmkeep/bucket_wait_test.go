package main

import (
	"encoding/json"
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
// each retry a 1.3 KB warning). With --log-format json every line is a
// JSON object naming the node, the error that ends serve included (it was
// plain text), and a duration is a number of seconds (it was
// nanoseconds).
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
		"--bucket", "s3://nobody-home", "--node-id", "a", "--cluster-plaintext", "accept", "--bucket-wait-secs", "3", "--log-format", "json")
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
	var records []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a line that is not JSON: %v\n%s", err, line)
		}
		if rec["node_id"] != "a" {
			t.Errorf("a line without node_id a: %s", line)
		}
		records = append(records, rec)
	}
	last := records[len(records)-1]
	if msg, _ := last["err"].(string); last["level"] != "ERROR" || !strings.HasPrefix(msg, "the bucket did not answer: no answer to") || !strings.Contains(msg, "(cluster.bucket_wait_secs)") {
		t.Errorf("the last line %v, want the error naming the setting at ERROR", last)
	}
	if in, ok := records[0]["in"].(float64); !ok || in != 1 {
		t.Errorf("the first retry's wait %v (%T), want 1 (seconds)", records[0]["in"], records[0]["in"])
	}
	if n := strings.Count(string(out), "still does not answer"); n > 3 {
		t.Errorf("%d retries logged in 3 s of waiting", n)
	}
	if n := strings.Count(string(out), "operation error S3: PutObject"); n > 2 {
		t.Errorf("the S3 error printed %d times, want once as it is first seen and once in the exit's error:\n%s", n, out)
	}
}
