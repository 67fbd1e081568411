//go:build linux

// wkcluster measures a cluster (issue 15's benchmarks): three `wasmkeep
// serve` child processes on one bucket-fs directory, over loopback, the
// probe guest (cmd/wasmkeep/testdata/guests/probe) their actor class:
//
//   - takeover after SIGKILL, at the default lease timings: a node is made
//     the holder of a new actor (a durable write through it), killed with
//     SIGKILL, and the actor written through the two other nodes in turn
//     every 50 ms (a POST is answered 503 at once until the dead node is
//     fenced) until one answers 200; the time from the kill to that answer,
//     over -kills kills, each node in turn (it restarts on its data
//     directory after each). The write before the kill must be there after.
//   - a forwarded request's added latency: GET /echo of one actor, one at a
//     time, straight to its holder and through another node, interleaved;
//     on a cluster whose nodes talk over their mutual-TLS cluster listeners
//     ("tls", the default) and on one in --cluster-plaintext accept mode
//     without listeners ("plain"): the difference of the two added
//     latencies is what TLS adds.
//   - bucket GETs per forwarded request: the GET /echo above, -samples
//     times through the other node, which counts its bucket requests and
//     forwards on its metrics page (owner hints keep it under 0.1).
//   - actors.call across nodes against on one node: an actor's /call (an
//     actors.call of another actor's /echo) where both are on one node and
//     where the caller is on another node, interleaved, in both modes.
//   - a deploy's rollout: on a third cluster (cluster listeners) whose
//     nodes serve an app deployed in the bucket (serve --app), -deploys
//     `wasmkeep deploy`s of the probe, its configuration alternating, one
//     after another; the time from each deploy's return to every node
//     serving the new version (wasmkeep_deploy_seq on each node's metrics
//     page), and the requests that failed meanwhile under a steady load
//     through every node.
//   - secrets reaching every node (secrets.go): on that cluster, its nodes
//     started with --secrets-key, -secrets `wasmkeep secrets set`s of one
//     name, one after another; the time from each set's return to each
//     node's resident actor reading the new value (env.get), and to the
//     last node's.
//   - alarm recovery after the holder's death (alarms.go): on a fourth
//     cluster near a tenth of the default timings, -alarms alarms due at
//     one instant on a node killed just before it: their lateness and the
//     rate at which the two live nodes' sweeps recover them.
//   - relocation when a node is full (relocate.go): on a fifth cluster,
//     -relocate new actors held busy at once through a node with a fifth
//     as many instance slots: the 503s with its peers' room and alone.
//   - draining a node (drain.go): on a sixth cluster, the time from
//     `cluster drain` to drained with -drain-idle idle and -drain-busy busy
//     actors on it, under a load of durable writes through the others.
//   - moving one actor (move.go): on a seventh cluster, -move actors held
//     by one node moved to another one at a time under writes through two
//     nodes: the time from `actor move` to the first answer from the
//     target, the longest gap between answers, the failures and lost
//     writes; with -room, as many rooms with a socket each.
//
// It prints tables and writes <out>/<date>-<commit>-cluster.csv.
//
//	wkcluster -wasmkeep BIN -guest probe.wasm [-kills 20] [-samples 2000] [-deploys 20] [-secrets 20] [-alarms 1000] [-relocate 200] [-drain-idle 1000 -drain-busy 100] [-move 20 -room room.wasm] [-quick]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/bench/measure"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		log.Fatal("wkcluster: ", err)
	}
}

// config is the run's flags.
type config struct {
	bin, guest      string
	kills           int
	samples, warmup int
	deploys         int
	secrets         int
	secretsKey      string // the deploy cluster's nodes' --secrets-key, once made
	alarms          int
	drainIdle       int
	drainBusy       int
	relocate        int           // new actors of the relocation rows' load
	relocateBusy    time.Duration // how long each of them is busy
	moves           int
	roomGuest       string // the room guest of the move rows' rooms; "": no rooms
	shortLease      bool
	tmp, out        string
}

func run(args []string, stdout io.Writer) error {
	fl := flag.NewFlagSet("wkcluster", flag.ContinueOnError)
	var c config
	fl.StringVar(&c.bin, "wasmkeep", "", "the server binary (required)")
	fl.StringVar(&c.guest, "guest", "", "cmd/wasmkeep/testdata/guests/probe built for wasip1 (required)")
	fl.IntVar(&c.kills, "kills", 20, "SIGKILLs of the takeover rows (about 20 s each at the default lease timings); 0: none")
	fl.IntVar(&c.samples, "samples", 2000, "timed requests of each latency row; 0: no latency rows")
	fl.IntVar(&c.deploys, "deploys", 20, "deploys of the rollout rows; 0: none")
	fl.IntVar(&c.secrets, "secrets", 20, "secrets changes of the secrets rows (on the deploy cluster); 0: none")
	fl.IntVar(&c.alarms, "alarms", 1000, "alarms of the alarm recovery rows; 0: none")
	fl.IntVar(&c.drainIdle, "drain-idle", 1000, "idle actors on the drained node of the drain rows")
	fl.IntVar(&c.drainBusy, "drain-busy", 100, "busy actors (a load) on the drained node of the drain rows; with -drain-idle 0: no drain rows")
	fl.IntVar(&c.relocate, "relocate", 200, "new actors asked for at once through a node with a fifth of that many instance slots, in the relocation rows; 0: none")
	fl.IntVar(&c.moves, "move", 20, "actors moved one at a time from one node to another in the move rows (and rooms, with -room); 0: none")
	fl.StringVar(&c.roomGuest, "room", "", "cmd/wasmkeep/testdata/guests/room built for wasip1: the move rows move rooms with a socket too")
	fl.BoolVar(&c.shortLease, "short-lease", false, "a 2 s node lease (WASMKEEP_CLUSTER__*) instead of the defaults: starts and takeovers in seconds, not the book's timings")
	quick := fl.Bool("quick", false, "small counts and -short-lease: checks the harness, measures nothing worth keeping")
	fl.StringVar(&c.out, "out", "bench/results", "where the CSV goes")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if c.bin == "" || c.guest == "" {
		return errors.New("-wasmkeep and -guest are required (bench/README.md, wkcluster)")
	}
	if *quick {
		c.kills, c.samples, c.deploys, c.secrets, c.alarms, c.drainIdle, c.drainBusy, c.relocate, c.moves, c.shortLease = 2, 100, 4, 2, 50, 50, 10, 20, 3, true
	}
	c.relocateBusy = 2 * time.Second
	if *quick {
		c.relocateBusy = time.Second
	}
	c.warmup = max(c.samples/10, 20)
	commit, err := measure.CheckoutCommit()
	if err != nil {
		return err
	}
	if c.tmp, err = os.MkdirTemp("", "wkcluster-"); err != nil {
		return err
	}
	defer os.RemoveAll(c.tmp)
	res := measure.Result{Guest: "probe", DataFS: measure.DataFS(c.tmp)}
	fmt.Fprintf(stdout, "wkcluster: %s at %s, data on %s, load %s\n", c.bin, commit, res.DataFS, measure.LoadAverage())

	lat := map[string]latencies{}
	nothing := map[string]bool{"tls": c.samples == 0 && c.kills == 0, "plain": c.samples == 0, "deploy": c.deploys == 0 && c.secrets == 0,
		"alarms": c.alarms == 0, "relocate": c.relocate == 0, "drain": c.drainIdle == 0 && c.drainBusy == 0, "move": c.moves == 0}
	for _, mode := range []string{"tls", "plain", "deploy", "alarms", "relocate", "drain", "move"} {
		if nothing[mode] {
			continue
		}
		cl, err := c.startCluster(stdout, mode)
		if err != nil {
			return err
		}
		if res.Engine == "" {
			if res.Engine, err = cl.nodes[0].srv.Engine(cl.nodes[0].logPath); err != nil {
				cl.stop()
				return err
			}
		}
		var rows []measure.Row
		switch {
		case mode == "deploy":
			rows, err = c.appRows(stdout, cl)
		case mode == "alarms":
			rows, err = c.alarmRecovery(stdout, cl)
		case mode == "drain":
			rows, err = c.drainRows(stdout, cl)
		case mode == "relocate":
			rows, err = c.relocation(stdout, cl)
		case mode == "move":
			rows, err = c.moveRows(stdout, cl)
		case c.samples > 0:
			lat[mode], err = c.latencies(stdout, cl)
		}
		if err == nil && mode == "tls" && c.kills > 0 {
			rows, err = c.takeovers(stdout, cl)
		}
		res.Rows = append(res.Rows, rows...)
		if serr := cl.stop(); err == nil {
			err = serr
		}
		if err != nil {
			return fmt.Errorf("%s cluster: %w", mode, err)
		}
	}
	if c.samples > 0 {
		res.Rows = append(res.Rows, latencyRows(stdout, c.samples, lat)...)
	}
	fmt.Fprintf(stdout, "load at the end: %s\n", measure.LoadAverage())
	path, err := measure.WriteCSV(c.out, commit, "-cluster", res)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "wrote", path)
	return nil
}

// shortLease is wkbucket's short lease: a 2 s ttl, valid 1.5 s after
// each write (a 0.7 s validity lapsed on a loaded machine).
var shortLease = []string{"WASMKEEP_CLUSTER__TTL=2s", "WASMKEEP_CLUSTER__GRACE=0s",
	"WASMKEEP_CLUSTER__SAFETY=500ms", "WASMKEEP_CLUSTER__MAX_SKEW=0s"}

// cluster is three nodes on one bucket.
type cluster struct {
	// tls: cluster listeners; plain: --cluster-plaintext accept; deploy:
	// cluster listeners, the nodes serving deployApp; alarms: cluster
	// listeners, alarmLease; relocate: cluster listeners, node a with few
	// instance slots (relocate.go); drain: cluster listeners, drainEnv;
	// move: cluster listeners, the room class beside the probe with -room
	mode      string
	bucketDir string // the bucket-fs directory
	nodes     []*node
}

// node is one of them: its server, data directory and log, and the
// running process (nil while it is down).
type node struct {
	id      string
	srv     measure.Wasmkeep
	dataDir string
	logPath string
	metrics string // its metrics page's base URL
	*measure.Running
}

// start starts the node on its data directory and returns once it
// is ready and answers (a GET of actor <id>-x: one of its own, so that
// nodes starting together do not race for one actor, where a request
// forwarded to a node still taking the actor was seen answered 503).
// Its metrics listener gets a free port at each start, and a start that
// lost that port to another process before it bound it is tried again
// (seen in the suite, where many servers start at once).
func (n *node) start() error {
	for attempt := 1; ; attempt++ {
		addr, err := measure.FreeAddr()
		if err != nil {
			return err
		}
		if i := slices.Index(n.srv.ServeArgs, "--metrics-listen"); i >= 0 {
			n.srv.ServeArgs = slices.Delete(n.srv.ServeArgs, i, i+2)
		}
		n.srv.ServeArgs = append(n.srv.ServeArgs, "--metrics-listen", addr)
		n.metrics = "http://" + addr
		r, err := measure.Start(measure.Options{Server: n.srv, Ready: "/_wasmkeep/ready",
			Read: measure.Request{Method: "GET", Path: "/actor/probe/" + n.id + "-{name}/echo"}}, n.dataDir, n.logPath)
		n.Running = r
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
	}
}

// startCluster starts three nodes, side by side (each first start waits
// out the node id check: ttl + grace, 15 s at the defaults); for the
// deploy cluster, after the app's first deploy, so that they start
// serving it.
func (c *config) startCluster(stdout io.Writer, mode string) (*cluster, error) {
	dir, err := os.MkdirTemp(c.tmp, mode+"-")
	if err != nil {
		return nil, err
	}
	bucketDir := filepath.Join(dir, "bucket")
	if err := os.Mkdir(bucketDir, 0o755); err != nil {
		return nil, err
	}
	cl := &cluster{mode: mode, bucketDir: bucketDir}
	if mode == "deploy" {
		if _, err := c.deploy(bucketDir, 0); err != nil {
			return nil, err
		}
		if c.secrets > 0 {
			if err := c.newSecrets(dir, bucketDir); err != nil {
				return nil, err
			}
		}
	}
	for _, id := range []string{"a", "b", "c"} {
		srv := measure.Wasmkeep{Binary: c.bin, Class: "probe", Guest: c.guest,
			ServeArgs: []string{"--bucket", "file://" + bucketDir, "--node-id", id}}
		if mode == "plain" {
			srv.ServeArgs = append(srv.ServeArgs, "--cluster-plaintext", "accept")
		} else {
			srv.ServeArgs = append(srv.ServeArgs, "--cluster-listen", "127.0.0.1:0")
		}
		if c.shortLease {
			srv.Env = shortLease
		}
		if mode == "alarms" { // a holds every actor: none hibernates, releasing it
			srv.Env = alarmLease
			srv.ServeArgs = append(srv.ServeArgs, "--max-instances", strconv.Itoa(c.alarms+100), alarmCPUBudget)
		}
		if mode == "drain" { // a holds every actor until the drain
			srv.Env = append(slices.Clone(srv.Env), drainEnv...)
			srv.ServeArgs = append(srv.ServeArgs, "--max-instances", strconv.Itoa(c.drainIdle+c.drainBusy+100), alarmCPUBudget)
		}
		if mode == "move" {
			srv.ServeArgs = append(srv.ServeArgs, alarmCPUBudget)
			if c.roomGuest != "" {
				srv.ServeArgs = append(srv.ServeArgs, "--actor", "room="+c.roomGuest)
			}
		}
		if mode == "relocate" && id == "a" { // the node the uneven load goes through
			srv.ServeArgs = append(srv.ServeArgs, "--max-instances", strconv.Itoa(relocateSlots(c.relocate)))
		}
		n := &node{id: id, srv: srv, dataDir: filepath.Join(dir, id), logPath: filepath.Join(dir, id+".log")}
		if mode == "deploy" {
			n.srv.Guest = "" // its classes come from the version
			n.srv.ServeArgs = append(n.srv.ServeArgs, "--app", deployApp)
			if c.secretsKey != "" {
				n.srv.ServeArgs = append(n.srv.ServeArgs, "--secrets-key", c.secretsKey)
			}
		}
		cl.nodes = append(cl.nodes, n)
	}
	begin := time.Now()
	errs := make([]error, len(cl.nodes))
	var wg sync.WaitGroup
	for i, n := range cl.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = n.start()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		cl.stop()
		return nil, err
	}
	fmt.Fprintf(stdout, "\n%s cluster: three nodes ready in %.1f s\n", mode, time.Since(begin).Seconds())
	return cl, nil
}

// stop stops every node that runs (SIGTERM).
func (cl *cluster) stop() error {
	var errs []error
	for _, n := range cl.nodes {
		if n.Running != nil {
			errs = append(errs, n.Stop())
			n.Running = nil
		}
	}
	return errors.Join(errs...)
}

var client = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 8, DisableCompression: true}, Timeout: time.Minute}

// answer is one response: its status, body and the node that answered
// for the actor (x-wasmkeep-node).
type answer struct {
	code int
	body string
	node string
}

// do sends a request without a body.
func do(method, url string) (answer, error) {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return answer{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return answer{resp.StatusCode, strings.TrimSpace(string(body)), resp.Header.Get("x-wasmkeep-node")}, err
}

// expect sends a request that must answer 200 from node holder ("" for
// any) and returns the body.
func expect(method, url, holder string) (string, error) {
	a, err := do(method, url)
	switch {
	case err != nil:
		return "", fmt.Errorf("%s %s: %w", method, url, err)
	case a.code != 200:
		return "", fmt.Errorf("%s %s: %d %q", method, url, a.code, a.body)
	case holder != "" && a.node != holder:
		return "", fmt.Errorf("%s %s: answered for node %q, want %q", method, url, a.node, holder)
	}
	return a.body, nil
}

// wasmkeep runs a wasmkeep command to its end, stdin its input, and
// returns its output (stdout and stderr).
func (c *config) wasmkeep(stdin string, args ...string) ([]byte, error) {
	cmd := exec.Command(c.bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("wasmkeep %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

func row(metric string, v float64, unit string) measure.Row {
	return measure.Row{Metric: metric, Value: v, Unit: unit}
}

// spread is took's p50, p99 and max in seconds, as the rows <metric>_p50,
// _p99 and _max.
func spread(metric string, took []time.Duration) []measure.Row {
	return spreadIn(metric, took, time.Second, "s")
}

// spreadIn is spread in units of unit, the rows' unit called name (the CSV
// keeps one decimal of it).
func spreadIn(metric string, took []time.Duration, unit time.Duration, name string) []measure.Row {
	in := func(d time.Duration) float64 { return float64(d) / float64(unit) }
	return []measure.Row{
		row(metric+"_p50", in(measure.Percentile(took, 0.5)), name),
		row(metric+"_p99", in(measure.Percentile(took, 0.99)), name),
		row(metric+"_max", in(slices.Max(took)), name),
	}
}
