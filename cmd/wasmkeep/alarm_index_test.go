package main

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// The alarm index (ADR 1018): <data-dir>/state/<tenant>/<app>/alarm-index/<tenant>, read at start
// instead of every database.

func alarmIndexFile(dataDir string) string {
	return filepath.Join(dataDir, "state", "default", "default", "alarm-index", "default")
}

// setAlarms starts a node on dataDir, sets an alarm in ms on each actor,
// and stops it.
func setAlarms(t *testing.T, opts node.Options, in int, names ...string) {
	t.Helper()
	n := startNode(t, opts)
	for _, name := range names {
		n.expect("GET", "/actor/probe/"+name+"/alarm-set?in="+strconv.Itoa(in), "", 200, "set")
	}
	n.stop()
}

// waitAttempts waits until on-alarm has run once on each actor.
func waitAttempts(t *testing.T, n *testNode, names ...string) {
	t.Helper()
	for _, name := range names {
		waitFor(t, 10*time.Second, name+"'s alarm", func() bool { return attempts(n, name) == 1 })
	}
}

// A start with the index missing rebuilds it from every database, and the
// alarms fire; the next start reads the rebuilt index. One actor's name is
// too long for its file name (a hash): the rebuild finds it in the name
// row set-alarm wrote, though the actor had run an event before it.
func TestAlarmIndexMissingIsRebuilt(t *testing.T) {
	opts := node.Options{DataDir: t.TempDir(), Classes: map[string]string{"probe": probe(t)}}
	long := strings.Repeat("long-", 50) // 250 bytes: more than a file name holds (200)
	n := startNode(t, opts)
	n.expect("GET", "/actor/probe/"+long+"/alarm-get", "", 200, "none")
	n.stop()
	setAlarms(t, opts, 500, "a", "b", long)
	if _, err := os.Stat(alarmIndexFile(opts.DataDir)); err != nil {
		t.Fatalf("no index after alarms were set: %v", err)
	}
	if err := os.Remove(alarmIndexFile(opts.DataDir)); err != nil {
		t.Fatal(err)
	}
	n = startNode(t, opts)
	if got := n.metric("wasmkeep_alarm_index_rebuilds_total"); got != 1 {
		t.Errorf("rebuilds: %v, want 1", got)
	}
	waitAttempts(t, n, "a", "b", long)
	n.expect("GET", "/actor/probe/c/alarm-set?in=3600000", "", 200, "set")
	n.stop()

	n = startNode(t, opts)
	if got := n.metric("wasmkeep_alarm_index_rebuilds_total"); got != 0 {
		t.Errorf("rebuilds at the second start: %v, want 0", got)
	}
	data, _ := os.ReadFile(alarmIndexFile(opts.DataDir))
	for _, re := range []string{`(?m)^\w{8} C \d+ probe "a"$`, `(?m)^\w{8} C \d+ probe "b"$`, `(?m)^\w{8} S \d+ probe "c"\n\z`} {
		if !regexp.MustCompile(re).Match(data) {
			t.Errorf("index after a and b fired and c was set: no %s in\n%s", re, data)
		}
	}
}

// A damaged index (a record whose checksum fails) is rebuilt; a last line
// cut short by a crash is not damage: it is dropped.
func TestAlarmIndexDamagedIsRebuilt(t *testing.T) {
	opts := node.Options{DataDir: t.TempDir(), Classes: map[string]string{"probe": probe(t)}}
	setAlarms(t, opts, 1000, "a", "b")
	path := alarmIndexFile(opts.DataDir)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	// Torn tail: no rebuild, and what is appended next does not join it.
	os.WriteFile(path, append(append([]byte{}, data...), "0badc0de S 17"...), 0o600)
	n := startNode(t, opts)
	if got := n.metric("wasmkeep_alarm_index_rebuilds_total"); got != 0 {
		t.Errorf("rebuilds after a torn last line: %v, want 0", got)
	}
	n.expect("GET", "/actor/probe/c/alarm-set?in=3600000", "", 200, "set")
	n.stop()
	n = startNode(t, opts)
	if got := n.metric("wasmkeep_alarm_index_rebuilds_total"); got != 0 {
		t.Errorf("rebuilds after a record was appended to a torn file: %v, want 0", got)
	}
	n.stop()

	// A changed byte inside the first record: rebuilt, and the alarms fire.
	data, _ = os.ReadFile(path)
	lines := strings.SplitAfter(string(data), "\n")
	lines[1] = strings.Replace(lines[1], `"`, `'`, 1)
	os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600)
	n = startNode(t, opts)
	if got := n.metric("wasmkeep_alarm_index_rebuilds_total"); got != 1 {
		t.Errorf("rebuilds after a damaged record: %v, want 1", got)
	}
	if !strings.Contains(n.log.String(), "rebuilding the alarm index") {
		t.Errorf("the rebuild is not logged:\n%s", n.log.String())
	}
	waitAttempts(t, n, "a", "b")
}

// A rebuild that cannot read a database logs it and counts it, and goes on.
func TestAlarmIndexRebuildCountsUnreadableDatabases(t *testing.T) {
	opts := node.Options{DataDir: t.TempDir(), Classes: map[string]string{"probe": probe(t)}}
	setAlarms(t, opts, 500, "a", "b")
	os.Remove(alarmIndexFile(opts.DataDir))
	broken := filepath.Join(opts.DataDir, "state", "default", "default", "actors", "default", "probe", "b.db")
	os.Remove(broken + "-wal")
	if err := os.WriteFile(broken, []byte(strings.Repeat("not a database ", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, opts)
	if got := n.metric("wasmkeep_alarm_index_unreadable_databases_total"); got != 1 {
		t.Errorf("unreadable databases: %v, want 1", got)
	}
	if log := n.log.String(); !strings.Contains(log, "cannot be read") || !strings.Contains(log, broken) {
		t.Errorf("the unreadable database is not logged by its path:\n%s", log)
	}
	waitAttempts(t, n, "a")
}

// A node killed (SIGKILL) after an event committed its alarm, while the
// event still runs (so before the node updates anything after the event),
// loses no alarm: a new alarm and one moved earlier fire after the
// restart; one moved later costs a wake at the old time, where the actor
// finds nothing due, and fires at its own. The event is a real serve
// process's, stopped by the kernel.
func TestAlarmIndexSurvivesAKillAfterTheCommit(t *testing.T) {
	engineNeutral(t)
	bin := wasmkeepBinary(t)
	wasm := probe(t)
	data := t.TempDir()
	cmd := exec.Command(bin, "serve", "--data-dir", data, "--listen", "127.0.0.1:0", "--actor", "probe="+wasm, "--cpu-budget-ms", "60000")
	cmd.Env = withoutWasmkeepVars()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	committed, serving := make(chan struct{}, 3), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if addr := servingAddr(sc.Text()); addr != "" {
				serving <- addr
			}
			if strings.Contains(sc.Text(), "alarm-set-spin: the alarm is committed") {
				committed <- struct{}{}
			}
		}
	}()
	var addr string
	select {
	case addr = <-serving:
	case <-time.After(60 * time.Second):
		t.Fatal("the node did not start serving")
	}
	get := func(path string) string {
		var resp *http.Response
		var err error
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if resp, err = http.Get("http://" + addr + path); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.Status
	}
	get("/actor/probe/earlier/alarm-set?in=3600000") // indexed an hour out
	laterOld := time.Now().Add(5 * time.Second)
	get("/actor/probe/later/alarm-set?in=5000") // indexed soon
	for _, p := range []string{"/actor/probe/new/alarm-set-spin?in=1500", "/actor/probe/earlier/alarm-set-spin?in=1500", "/actor/probe/later/alarm-set-spin?in=3600000"} {
		go http.Get("http://" + addr + p) // never answered
	}
	for range 3 {
		select {
		case <-committed:
		case <-time.After(30 * time.Second):
			t.Fatal("the events did not commit their alarms")
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	// The restarted node runs on a clock that moves past the later actor's
	// old entry (the alarms were set on the wall clock, which it starts at).
	m := clock.NewManual(time.Now())
	n := startNode(t, node.Options{DataDir: data, Classes: map[string]string{"probe": wasm}, Clock: m})
	m.Advance(laterOld.Add(time.Second).Sub(m.Now()))
	waitAttempts(t, n, "new", "earlier")
	if got := attempts(n, "later"); got != 0 {
		t.Errorf("the alarm moved an hour later ran %d times", got)
	}
	_, body := n.do("GET", "/actor/probe/later/alarm-get", "")
	if in, err := strconv.Atoi(strings.TrimPrefix(body, "in ")); err != nil || in < 3_000_000 {
		t.Errorf("the alarm moved later: %q, want about an hour", body)
	}
}
