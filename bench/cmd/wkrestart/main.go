//go:build linux

// wkrestart measures a restart with many actors on disk (issue 13, item 2;
// the book's "Restarting a node"): for each population N, a data directory
// holds N actors of the probe guest (cmd/wasmkeep/testdata/guests/probe),
// each created by a request that set an alarm an hour out, and one more
// actor, "due", whose alarm falls due while the node is down. Each run
// starts the server on the directory and times, from the spawn:
//
//   - serving: the first answer from an actor (a-0's alarm-get);
//   - first overdue alarm: until due's on-alarm has run (its attempts
//     table, polled every millisecond, counts one more).
//
// then sets due's alarm a second out again and kills the server (SIGKILL, as
// a crash stops it) and waits for that second. A first, unmeasured start
// per population primes the module cache and whatever the server builds
// once (an alarm index missing from a directory an older build wrote).
// Populations are built once and reused (-data, on tmpfs: TMPDIR=/dev/shm).
// It prints a table and writes <out>/<date>-<commit>-restart.csv.
//
//	wkrestart -wasmkeep BIN -guest probe.wasm [-commit LABEL] [-actors 1000,10000,100000] [-runs 5] [-data DIR]
//
// Between builds of which only one keeps the alarm index (ADR 1018), delete
// <data>/<N>/alarm-index/ first: the other build does not keep it.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmkeep/wasmkeep/bench/measure"
)

func main() {
	bin := flag.String("wasmkeep", "", "the wasmkeep binary (required)")
	guest := flag.String("guest", "", "the probe guest, cmd/wasmkeep/testdata/guests/probe built for wasip1 (required)")
	commit := flag.String("commit", "", "names the measured build in the CSV (default: this checkout's commit, as bench/run.sh builds it)")
	actors := flag.String("actors", "1000,10000,100000", "populations, comma-separated")
	runs := flag.Int("runs", 5, "measured starts per population")
	data := flag.String("data", filepath.Join(os.TempDir(), "wkrestart"), "where populations are built once and kept")
	out := flag.String("out", "bench/results", "where the CSV goes")
	flag.Parse()
	if *bin == "" || *guest == "" {
		flag.Usage()
		os.Exit(2)
	}
	if *commit == "" {
		c, err := measure.CheckoutCommit()
		if err != nil {
			log.Fatal(err)
		}
		*commit = c
	}
	srv := measure.Wasmkeep{Binary: *bin, Class: "probe", Guest: *guest}
	var rows []measure.Row
	fmt.Printf("%-10s %14s %14s   (medians of %d starts; min-max)\n", "actors", "serving ms", "first alarm ms", *runs)
	for _, s := range strings.Split(*actors, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			log.Fatalf("-actors: %q is not a population", s)
		}
		dir := filepath.Join(*data, strconv.Itoa(n))
		if err := populate(srv, dir, n); err != nil {
			log.Fatal(err)
		}
		serving, alarm, err := measurePopulation(srv, dir, *runs)
		if err != nil {
			log.Fatalf("%d actors: %v", n, err)
		}
		fmt.Printf("%-10d %14.1f %14.1f   (%.1f-%.1f; %.1f-%.1f)\n", n, median(serving), median(alarm),
			measure.Ms(slices.Min(serving)), measure.Ms(slices.Max(serving)), measure.Ms(slices.Min(alarm)), measure.Ms(slices.Max(alarm)))
		rows = append(rows,
			measure.Row{Metric: fmt.Sprintf("restart_to_serving_%d", n), Value: median(serving), Unit: "ms"},
			measure.Row{Metric: fmt.Sprintf("restart_to_first_overdue_alarm_%d", n), Value: median(alarm), Unit: "ms"})
	}
	path, err := measure.WriteCSV(*out, *commit, "-restart", measure.Result{
		Engine: "wazero", Guest: "probe", DataFS: measure.DataFS(*data), Rows: rows,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(path)
}

// proc is one server process.
type proc struct {
	cmd  *exec.Cmd
	base string
	log  string
}

func start(srv measure.Wasmkeep, dir string) (*proc, time.Time, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, time.Time{}, err
	}
	addr := l.Addr().String()
	l.Close()
	logPath := dir + ".log"
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer f.Close()
	cmd := srv.Command(addr, dir)
	cmd.Stdout, cmd.Stderr = f, f
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, time.Time{}, err
	}
	return &proc{cmd: cmd, base: "http://" + addr, log: logPath}, t0, nil
}

var client = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64}, Timeout: time.Minute}

// do sends one request and returns the status and body ("" and an error if
// the server does not answer).
func (p *proc) do(method, path, body string) (int, string, error) {
	req, err := http.NewRequest(method, p.base+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// until polls f every millisecond until it holds, for at most 10 minutes.
func (p *proc) until(what string, f func() bool) error {
	for deadline := time.Now().Add(10 * time.Minute); !f(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within 10 minutes (log: %s)", what, p.log)
		}
	}
	return nil
}

func (p *proc) serving() bool {
	code, _, err := p.do("GET", "/actor/probe/a-0/alarm-get", "")
	return err == nil && code == 200
}

// attempts is how many times due's on-alarm has run.
func (p *proc) attempts() int {
	_, body, err := p.do("POST", "/actor/probe/due/query", "SELECT count(*) FROM alarm_attempts")
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimPrefix(body, "ok "))
	if err != nil {
		return 0 // not run yet: no table
	}
	return n
}

// crash sets due's alarm a second out, kills the server and waits until
// the alarm is due.
func (p *proc) crash() error {
	if code, body, err := p.do("GET", "/actor/probe/due/alarm-set?in=1000", ""); err != nil || code != 200 {
		return fmt.Errorf("setting due's alarm: %d %s %v", code, body, err)
	}
	due := time.Now().Add(time.Second)
	p.cmd.Process.Kill()
	p.cmd.Wait()
	time.Sleep(time.Until(due) + 100*time.Millisecond)
	return nil
}

// populate builds dir once: n actors with an alarm an hour out. An
// interrupted population resumes (setting an alarm again changes nothing
// that is measured); a refused request (a full node: 503) is tried again.
func populate(srv measure.Wasmkeep, dir string, n int) error {
	done := dir + ".populated"
	if _, err := os.Stat(done); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	p, _, err := start(srv, dir)
	if err != nil {
		return err
	}
	defer p.cmd.Process.Kill()
	if err := p.until("the server's first answer", p.serving); err != nil {
		return err
	}
	t0 := time.Now()
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				for try := 0; ; try++ {
					code, _, err := p.do("GET", fmt.Sprintf("/actor/probe/a-%d/alarm-set?in=3600000", i), "")
					if err == nil && code == 200 {
						break
					}
					if try == 5 {
						failed.Add(1)
						break
					}
					time.Sleep(100 * time.Millisecond << try)
				}
				if i%10000 == 9999 {
					fmt.Fprintf(os.Stderr, "  %d actors, %s\n", i+1, time.Since(t0).Round(time.Second))
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		return fmt.Errorf("populating %s: %d requests failed", dir, failed.Load())
	}
	fmt.Fprintf(os.Stderr, "populated %s with %d actors in %s\n", dir, n, time.Since(t0).Round(time.Second))
	p.cmd.Process.Signal(os.Interrupt)
	p.cmd.Wait()
	return os.WriteFile(done, nil, 0o644)
}

// measurePopulation primes dir with one start, then measures runs starts.
func measurePopulation(srv measure.Wasmkeep, dir string, runs int) (serving, alarm []time.Duration, err error) {
	p, _, err := start(srv, dir)
	if err != nil {
		return nil, nil, err
	}
	if err := p.until("the priming start's first answer", p.serving); err != nil {
		p.cmd.Process.Kill()
		return nil, nil, err
	}
	before := 0
	if err := p.until("due's count", func() bool { before = p.attempts(); return before >= 0 }); err != nil {
		return nil, nil, err
	}
	if err := p.crash(); err != nil {
		return nil, nil, err
	}
	for range runs {
		p, t0, err := start(srv, dir)
		if err != nil {
			return nil, nil, err
		}
		if err := p.until("serving", p.serving); err != nil {
			p.cmd.Process.Kill()
			return nil, nil, err
		}
		serving = append(serving, time.Since(t0))
		if err := p.until("due's alarm", func() bool { return p.attempts() > before }); err != nil {
			p.cmd.Process.Kill()
			return nil, nil, err
		}
		alarm = append(alarm, time.Since(t0))
		before = p.attempts()
		if err := p.crash(); err != nil {
			return nil, nil, err
		}
	}
	return serving, alarm, nil
}

func median(ds []time.Duration) float64 { return measure.Ms(measure.Percentile(ds, 0.5)) }
