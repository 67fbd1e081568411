package measure

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/preinit"
)

// Server is a server program the harness can start.
type Server interface {
	// Command returns the process that serves HTTP on addr (host:port) with
	// its data in dataDir, an empty directory or one the same server used.
	Command(addr, dataDir string) *exec.Cmd
	// Engine names what served, given the server's log (stdout and stderr).
	Engine(logPath string) (string, error)
	String() string
}

// Wasmkeep is `Binary serve` with one actor class, Class=Guest; with no
// Guest, a node of an app deployed in the bucket (ServeArgs --app), whose
// classes come from its version.
type Wasmkeep struct {
	Binary, Class, Guest string
	Env                  []string // added to the environment, such as WASMKEEP_RUNTIME__USE=wasmtime
	ServeArgs            []string // added to `wasmkeep serve`'s arguments
	CacheDir             string   // --cache-dir, for a build that takes it; empty: <data dir>/cache
	// BucketFS makes the node a cluster of one on a bucket-fs directory
	// beside its data directory (<data dir>-bucket, new with it), so that
	// an exec-durable write answers once the bucket holds it.
	BucketFS bool
}

func (w Wasmkeep) Command(addr, dataDir string) *exec.Cmd {
	args := []string{"serve"}
	if w.Guest != "" {
		args = append(args, "--actor", w.Class+"="+w.Guest)
	}
	args = append(args,
		"--listen", addr,
		"--data-dir", dataDir,
		"--max-instances", strconv.Itoa(maxInstances),
		"--idle-timeout", "10m", // nothing hibernates during a run
	)
	if takesCacheDir(w.Binary) {
		// Never the machine's cache (the build's default): a run neither
		// reads nor fills it. An older build keeps its cache in the data
		// directory, as this one does without a CacheDir.
		args = append(args, "--cache-dir", cmp.Or(w.CacheDir, filepath.Join(dataDir, "cache")))
	}
	args = append(args, w.ServeArgs...)
	if w.BucketFS {
		args = append(args, "--bucket", "file://"+dataDir+"-bucket", "--node-id", "bench", "--cluster-listen", "127.0.0.1:0")
	}
	cmd := exec.Command(w.Binary, args...)
	cmd.Env = append(os.Environ(), w.Env...)
	return cmd
}

// WithCacheDir is w keeping its compile cache in dir (ADR 1058): the
// start-up rows give each first start an empty one, as on a new machine.
func (w Wasmkeep) WithCacheDir(dir string) Server {
	w.CacheDir = dir
	return w
}

// Preinitialised reports whether the server's log says its guest is served
// pre-initialised, or never will be: at once for a guest that does not ask
// (ADR 1040).
func (w Wasmkeep) Preinitialised(logPath string) bool {
	if w.Guest == "" {
		return true
	}
	if wasm, err := os.ReadFile(w.Guest); err != nil || !preinit.Asks(wasm) {
		return true
	}
	log, _ := os.ReadFile(logPath)
	return bytes.Contains(log, []byte("module pre-initialised")) || bytes.Contains(log, []byte("module not pre-initialised"))
}

// takesCacheDir reports whether the wasmkeep binary at path has the serve
// flag --cache-dir, read once from its help.
func takesCacheDir(path string) bool {
	v, _ := cacheDirFlag.LoadOrStore(path, sync.OnceValue(func() bool {
		out, _ := exec.Command(path, "serve", "--help").Output()
		return bytes.Contains(out, []byte("--cache-dir"))
	}))
	return v.(func() bool)()
}

var cacheDirFlag sync.Map // binary path → func() bool

// Engine is the runtime plugin the server names in its "serving" log line.
func (w Wasmkeep) Engine(logPath string) (string, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "msg=serving") {
			continue
		}
		for _, field := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(field, "runtime="); ok {
				return v, nil
			}
		}
	}
	return "", errors.New(`no runtime= in the server's "serving" log line; label the engine yourself (Options.Engine)`)
}

func (w Wasmkeep) String() string {
	if w.Guest == "" {
		return strings.TrimSpace(strings.Join(w.Env, " ") + " " + w.Binary + " serve " + strings.Join(w.ServeArgs, " "))
	}
	return strings.TrimSpace(strings.Join(w.Env, " ") + " " + w.Binary + " serve --actor " + w.Class + "=" + w.Guest)
}

// PreinitServer is a server whose guest may be pre-initialised in the
// background after it starts (Wasmkeep): the rows of a running deployment
// are measured once it is.
type PreinitServer interface {
	Preinitialised(logPath string) bool
}

// CacheServer is a server that keeps what it compiles apart from its data
// (Wasmkeep): a run gives each first start an empty cache, as on a new
// machine, and the later starts the last one's.
type CacheServer interface {
	WithCacheDir(dir string) Server
}

// Workerd is `Binary serve Config` (bench/workerd/config.capnp): the config's
// socket "http" is moved to the harness's address and its disk directory
// "data", where the Durable Objects keep their databases, to the run's data
// directory.
type Workerd struct {
	Binary, Config string
}

func (w Workerd) Command(addr, dataDir string) *exec.Cmd {
	// workerd, unlike a Go program, does not raise its soft limit on open
	// files, and each resident object holds up to three (database, WAL,
	// shared memory): the shell raises it to the hard limit, as wasmkeep
	// serve does for itself, and exec keeps the process (and pid) the same.
	cmd := exec.Command("/bin/sh", "-c", `ulimit -n "$(ulimit -Hn)" && exec "$0" "$@"`,
		w.Binary, "serve", filepath.Base(w.Config),
		"--socket-addr", "http="+addr,
		"--directory-path", "data="+dataDir)
	// The config embeds counter.js by a path relative to itself.
	cmd.Dir = filepath.Dir(w.Config)
	return cmd
}

func (Workerd) Engine(string) (string, error) { return "workerd", nil }

func (w Workerd) String() string { return w.Binary + " serve " + w.Config }

// Spawned is a server process started on a free loopback port, its output
// appended to a log file.
type Spawned struct {
	Cmd     *exec.Cmd
	Base    string // http://127.0.0.1:PORT
	LogPath string
	Started time.Time // when the process was spawned
}

// Spawn starts srv with dataDir on a free loopback port, appending its
// output to logPath.
func Spawn(srv Server, dataDir, logPath string) (*Spawned, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child holds its own copy
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p := &Spawned{Cmd: srv.Command(addr, dataDir), Base: "http://" + addr, LogPath: logPath}
	p.Cmd.Stdout, p.Cmd.Stderr = logFile, logFile
	p.Started = time.Now()
	if err := p.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %v: %w", srv, err)
	}
	return p, nil
}

// server is one running server process.
type server struct {
	*Spawned
	exited  chan struct{}
	waitErr error
}

// startServer spawns the server on a free loopback port with dataDir and
// returns once the read request to actor x answers a 2xx, with the time that
// took from spawning.
func startServer(opts Options, dataDir, logPath string) (*server, time.Duration, error) {
	p, err := Spawn(opts.Server, dataDir, logPath)
	if err != nil {
		return nil, 0, err
	}
	s := &server{Spawned: p, exited: make(chan struct{})}
	go func() { s.waitErr = s.Cmd.Wait(); close(s.exited) }()
	took, err := s.awaitFirstResponse(opts.Ready, opts.Read, p.Started)
	if err != nil {
		s.stop()
		return nil, 0, err
	}
	return s, took, nil
}

// freePort asks the kernel for a free port. Another process could take it
// before the server binds it; the server then fails to start, loudly.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// awaitFirstResponse polls actor x with r every millisecond, so the
// measured start-up is at most that much late; with a ready path, first
// that path until it answers 200.
func (s *server) awaitFirstResponse(ready string, r Request, start time.Time) (time.Duration, error) {
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	deadline := start.Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return 0, fmt.Errorf("server exited before answering (%v)%s", s.waitErr, s.logTail())
		default:
		}
		req, err := r.to(s.Base, "x")
		if ready != "" {
			req, err = http.NewRequest(http.MethodGet, s.Base+ready, nil)
		}
		if err != nil {
			return 0, err
		}
		resp, err := client.Do(req)
		if err == nil && ready != "" {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				ready = ""
				continue
			}
		} else if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if succeeded(resp) {
				return time.Since(start), nil
			}
			// A node that cannot take the actor yet says so (a lease or an
			// ownership write slower than its attempt on a loaded machine):
			// the first response is the first that is not such a 503.
			if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return 0, fmt.Errorf("first request to the server, %s %s: %s: %s%s",
				req.Method, req.URL.Path, resp.Status, strings.TrimSpace(string(body)), s.logTail())
		}
		time.Sleep(time.Millisecond)
	}
	return 0, fmt.Errorf("server did not answer %v for actor x within 2 minutes%s", r, s.logTail())
}

// stop asks the server to shut down, as an operator would, and kills it if
// it takes too long.
func (s *server) stop() error {
	s.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(20 * time.Second):
		s.Cmd.Process.Kill()
		<-s.exited
		return fmt.Errorf("server did not stop within 20 s of SIGTERM; killed%s", s.logTail())
	}
	var exit *exec.ExitError
	if errors.As(s.waitErr, &exit) {
		return fmt.Errorf("server stopped with %v%s", s.waitErr, s.logTail())
	}
	return s.waitErr
}

// await waits up to 2 minutes for done, polling it.
func (s *server) await(done func() bool, what string) error {
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if done() {
			return nil
		}
	}
	return fmt.Errorf("server did not log %s within 2 minutes", what)
}

// logTail is the end of the server's log, to explain a failure.
func (s *server) logTail() string {
	b, err := os.ReadFile(s.LogPath)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return "\nserver log:\n  " + strings.Join(lines, "\n  ")
}

func (s *server) pid() int { return s.Cmd.Process.Pid }

// rssKiB is the server's resident set size, VmRSS in /proc/<pid>/status:
// a page several mappings share counts once in each.
func (s *server) rssKiB() (int64, error) { return s.procKiB("status", "VmRSS:") }

// pssKiB is the server's proportional set size, Pss in
// /proc/<pid>/smaps_rollup: a page n mappings share counts 1/n in each. The
// kernel walks the page tables to add it up, a few milliseconds for a
// server with 1,000 actors, so it is read only between timed phases.
func (s *server) pssKiB() (int64, error) { return s.procKiB("smaps_rollup", "Pss:") }

// footprint is the server's memory, in KiB, as RSS (VmRSS, a shared page
// counted once per mapping) and as PSS (divided among its mappings).
type footprint struct{ rss, pss int64 }

func (s *server) footprint() (footprint, error) {
	rss, err := s.rssKiB()
	if err != nil {
		return footprint{}, err
	}
	pss, err := s.pssKiB()
	return footprint{rss, pss}, err
}

// procKiB is the value of the line starting with field in /proc/<pid>/file,
// a size in kB.
func (s *server) procKiB(file, field string) (int64, error) {
	path := fmt.Sprintf("/proc/%d/%s", s.pid(), file)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s line in %s", field, path)
}

// children lists the server's child processes, from every thread's
// /proc/<pid>/task/<tid>/children: the rows read one process, so a server
// that works in others would be measured short.
func (s *server) children() ([]string, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", s.pid()))
	if err != nil {
		return nil, err
	}
	var kids []string
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", s.pid(), t.Name()))
		if err != nil {
			return nil, err
		}
		kids = append(kids, strings.Fields(string(b))...)
	}
	return kids, nil
}

// alone fails if the server has child processes (children).
func (s *server) alone() error {
	kids, err := s.children()
	if err == nil && len(kids) > 0 {
		err = fmt.Errorf("the server has child processes %v, whose memory and CPU time the rows would leave out", kids)
	}
	return err
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat; Linux fixes it at
// 100 for user space whatever the kernel's own tick rate.
const userHZ = 100

// cpuTime is the user plus system CPU time of all the server's threads.
func (s *server) cpuTime() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.pid()))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: count fields after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("unexpected /proc/<pid>/stat format")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("unexpected /proc/<pid>/stat format")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14 of the file
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}

// openFileLimit is the server's own soft limit on open files, after it
// raised it (Go programs raise it to the hard limit at start).
func (s *server) openFileLimit() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", s.pid()))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Max open files"); ok {
			f := strings.Fields(v)
			if len(f) > 0 && f[0] == "unlimited" {
				return 1 << 62, nil
			}
			if len(f) > 0 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, errors.New("no \"Max open files\" in /proc/<pid>/limits")
}

// dataFS names the file system under dir: actor creation and writes cost
// very different amounts on tmpfs and on a disk.
func dataFS(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "unknown"
	}
	switch uint32(st.Type) {
	case 0x01021994:
		return "tmpfs"
	case 0xEF53:
		return "ext4"
	case 0x9123683E:
		return "btrfs"
	case 0x58465342:
		return "xfs"
	case 0x794C7630:
		return "overlayfs"
	case 0x2FC12FC1:
		return "zfs"
	case 0xF2F52010:
		return "f2fs"
	}
	return fmt.Sprintf("fs-0x%x", st.Type)
}

// thp is the kernel's transparent huge page setting, the bracketed word of
// /sys/kernel/mm/transparent_hugepage/enabled: "always" roughly doubles
// memory per actor.
func thp() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return "unknown"
	}
	s := string(b)
	i, j := strings.IndexByte(s, '['), strings.IndexByte(s, ']')
	if i < 0 || j < i {
		return "unknown"
	}
	return s[i+1 : j]
}

// loadAverage is the machine's 1, 5 and 15 minute load averages: on a
// shared machine, what else ran during the run.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}
