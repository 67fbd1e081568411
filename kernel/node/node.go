// Package node is a single WasmKeep node: it routes requests to actors, keeps
// one mailbox per actor (one event at a time, in arrival order), wakes actors
// on demand and hibernates them when idle, bounds how many are resident, and
// enforces each event's limits. It uses a runtime engine and a storage driver
// through their contracts only.
//
// Its rooms are packages below it, none of which imports it (ADR 1024):
// address, access, mailbox, placement, alarm, websocket, fetch, guestlog,
// envfile and metrics. What stays here is the node itself, the actor's
// life cycle, the front door (http.go) and the host ABI (host.go,
// module.go, and the host functions beside the room each one serves).
package node

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/replication"
	"github.com/wasmkeep/wasmkeep/kernel/node/access"
	"github.com/wasmkeep/wasmkeep/kernel/node/alarm"
	"github.com/wasmkeep/wasmkeep/kernel/node/fair"
	"github.com/wasmkeep/wasmkeep/kernel/node/fetch"
	"github.com/wasmkeep/wasmkeep/kernel/node/guestlog"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
	"github.com/wasmkeep/wasmkeep/kernel/node/websocket"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// Options configure a node. Zero values take the defaults in brackets.
type Options struct {
	DataDir       string                   // where databases live (required)
	CacheDir      string                   // [DataDir/cache] compiled modules and pre-initialised snapshots, content-addressed: may be shared (serve gives MachineCacheDir)
	App           app.Name                 // [app.Default] the app served: its tenant is the actors' (their addresses stay tenant/class/name), its state root holds their databases
	Classes       map[string]string        // class name to module file
	Access        map[string]access.Access // [open] by class: who outside may reach its actors
	IdleTimeout   time.Duration            // [30s] without events before an actor hibernates
	CPUBudget     time.Duration            // [50ms] guest CPU per event
	HostCPUBudget time.Duration            // [3s] CPU per event besides CPUBudget, in host calls or not: the event's CPU cap is their sum
	WallClock     time.Duration            // [30s] wall time per event
	MaxInstances  int                      // [1000] instances at once: resident actors and stateless requests
	CPUTurns      int                      // [GOMAXPROCS-1, at least 1] events of actors heavy on CPU that run guest code at once, the rest waiting their turn (fair.Sched, ADR 1057)
	MemoryLimit   uint32                   // [128 MiB] per linear memory, in bytes
	QueueLimit    int                      // [1024] events waiting per actor
	MaxBodyBytes  int64                    // [16 MB] request body
	BodyTimeout   time.Duration            // [30s] to send a request's body once its headers arrived (http.go)
	AdmissionWait time.Duration            // [250ms] for an idle actor to make room
	GuestLogRate  int                      // [50] lines a second each actor instance may print, bursts of twice that; guestlog.Discard for none
	NoPreinit     bool                     // pre-initialise no module, not even one that asks (preinit.go)
	Storage       storage.Options
	Env           map[string]map[string]string // by class: its configuration (--env), name to value
	Stateless     string                       // module file of the stateless component ("" for none)
	Logger        *slog.Logger
	MinFreeDisk   int64               // [0: no check] not ready while the data directory's disk has less free (disk.go)
	Build         metrics.Build       // the build, for wasmkeep_build_info
	Placement     placement.Placement // [Local] where each actor runs: asked before every delivery
	Clock         clock.Clock         // [clock.Real] what idle timeouts, alarms, admission waits, WebSocket pings, owner hints and metrics read and wait on
	Cluster       *Cluster            // [nil: a node alone] the bucket and the membership of a node with a bucket (replica.go)
	// How long a request for an actor whose holder is suspected gone is
	// kept until it can be placed again (failover.go); NoFailoverWait
	// for none. [FailoverWaitFor the lease's settings; none alone]
	FailoverWait time.Duration
	// How often a node with a bucket sweeps its app's overdue alarms in the
	// bucket's index (sweep.go); NoAlarmSweep for never. [DefaultAlarmSweep]
	AlarmSweep time.Duration
	// The connection limit serve fitted to the open-files limit: a quarter
	// of it is how many requests the node keeps at once. [DefaultMaxConnections]
	MaxConnections int

	// A node started from a deployed version (deploy.go): its id and seq,
	// which stamp Classes from the start (0: --actor classes, never
	// checked), and by class its deployed configuration (under Env) and
	// required names, so nothing runs unchecked before the follower's
	// first Apply. Behind is called, without blocking, when an actor's
	// data was written under a higher seq than its class's here: the
	// follower reads current at once.
	VersionID string
	Seq       uint64
	Config    map[string]map[string]string
	Requires  map[string][]string
	Behind    func(seq uint64)
	// By class, how long an actor may stay idle before it is deleted
	// (ends.go; a deployed version's expire lines, or serve's
	// --expire-after-idle for --actor classes).
	ExpireAfterIdle map[string]time.Duration
	// How often the collecting node of the app looks for idle actors to
	// expire. [DefaultExpiryPass]
	ExpiryPass time.Duration
	// How many idle actors one pass tries at most; the rest wait for the
	// next. [DefaultExpiryBudget]
	ExpiryBudget int

	// The app's secrets the node starts with (secrets.go), by class, name
	// to value, or why it cannot open them (it starts failed closed).
	Secrets        map[string]map[string]string
	SecretsBlocked error

	// Headers that reach an actor: more fields, or more bytes of names,
	// values and request target, answer 431.
	MaxHeaderFields int // [MaxHeaderFields]
	MaxHeaderBytes  int // [MaxHeaderBytes]

	WebSocketsPerActor int           // [1000] open WebSockets per actor; more get 503
	WebSocketsPerNode  int           // [50000] open WebSockets per node; more get 503
	WebSocketPingAfter time.Duration // [25s] of client silence before a ping
	WebSocketPongWait  time.Duration // [30s] for the pong before the socket closes

	WebSocketMaxMessage int64 // [1 MiB] bytes per client message; larger closes the socket with 1009
	WebSocketQueue      int   // [256] messages queued per socket before a send gets backpressure
	WebSocketQueueBytes int   // [4 MiB] bytes queued per socket before a send gets backpressure

	// Outbound HTTP (http_fetch): public addresses only, but for these.
	AllowOutbound      []netip.Prefix      // ranges guests may reach though they are not public
	AllowOutboundPorts []int               // ports guests may reach though the Fetch standard blocks them
	OutboundCAs        []*x509.Certificate // trusted besides the system roots
	Resolver           fetch.Resolver      // [net.DefaultResolver]
	MaxFetches         int                 // [256] outbound requests in flight on the node

	FetchStep         time.Duration // [30s] for each step (connect, first byte, next byte) unless the guest asks
	FetchMaxStep      time.Duration // [60s] the longest step a guest may ask for
	FetchMaxBodyBytes int64         // [16 MB] request and response body, each
}

func (o Options) withDefaults() Options {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.IdleTimeout, 30*time.Second)
	def(&o.CPUBudget, 50*time.Millisecond)
	def(&o.HostCPUBudget, 3*time.Second)
	def(&o.WallClock, 30*time.Second)
	def(&o.BodyTimeout, 30*time.Second)
	def(&o.AdmissionWait, 250*time.Millisecond)
	def(&o.WebSocketPingAfter, 25*time.Second)
	def(&o.WebSocketPongWait, 30*time.Second)
	def(&o.FetchStep, 30*time.Second)
	def(&o.FetchMaxStep, 60*time.Second)
	defInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defInt(&o.MaxHeaderFields, MaxHeaderFields)
	defInt(&o.MaxHeaderBytes, MaxHeaderBytes)
	defInt(&o.WebSocketQueue, 256)
	defInt(&o.WebSocketQueueBytes, 4<<20)
	if o.WebSocketMaxMessage == 0 {
		o.WebSocketMaxMessage = 1 << 20
	}
	if o.FetchMaxBodyBytes == 0 {
		o.FetchMaxBodyBytes = 16 << 20
	}
	if o.WebSocketsPerActor == 0 {
		o.WebSocketsPerActor = 1000
	}
	if o.WebSocketsPerNode == 0 {
		o.WebSocketsPerNode = 50000
	}
	if o.App == (app.Name{}) {
		o.App = app.Default
	}
	if o.CacheDir == "" && o.DataDir != "" {
		o.CacheDir = filepath.Join(o.DataDir, "cache")
	}
	if o.MaxInstances == 0 {
		o.MaxInstances = 1000
	}
	if o.MemoryLimit == 0 {
		o.MemoryLimit = 128 << 20
	}
	if o.CPUTurns == 0 {
		o.CPUTurns = max(goruntime.GOMAXPROCS(0)-1, 1)
	}
	if o.QueueLimit == 0 {
		o.QueueLimit = 1024
	}
	if o.GuestLogRate == 0 {
		o.GuestLogRate = guestlog.DefaultRate
	}
	if o.FailoverWait == 0 && o.Cluster != nil {
		o.FailoverWait = FailoverWaitFor(o.Cluster.Member.Lease.Settings())
	}
	if o.AlarmSweep == 0 { // a node without a bucket has no sweep to run
		o.AlarmSweep = DefaultAlarmSweep
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	def(&o.ExpiryPass, DefaultExpiryPass)
	if o.ExpiryBudget == 0 {
		o.ExpiryBudget = DefaultExpiryBudget
	}
	if o.MaxFetches == 0 {
		o.MaxFetches = 256
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = 16 << 20
	}
	if o.Clock == nil {
		o.Clock = clock.Real
	}
	if o.Placement == nil && o.Cluster != nil {
		m := o.Cluster.Member
		o.Placement = placement.Owned{Records: m.Owners, View: m.View, Self: m.Lease.NodeID(), Key: ownerKey,
			Hints: placement.NewHints(o.Clock, placement.MaxHints), App: o.App.String(), Clock: o.Clock}
	}
	if o.Placement == nil {
		o.Placement = placement.Local{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Storage = o.Storage.Defaults()
	o.Storage.Prepare = storage.Preparation{Statements: hostSchema, CacheDir: o.CacheDir}
	return o
}

// MachineCacheDir is the compile cache that the nodes of a machine share
// when their settings name none (ADR 1058), as Go's and Wasmtime's build
// caches are: systemd's $CACHE_DIRECTORY (CacheDirectory= in the unit; the
// first, if it lists several), else wasmkeep in the user's cache directory
// ($XDG_CACHE_HOME, or ~/.cache on Linux). It makes the directory; the
// error says why there is none (no $HOME, a home the process cannot
// write), and a node then keeps its cache in its data directory.
func MachineCacheDir() (string, error) {
	dir, _, _ := strings.Cut(os.Getenv("CACHE_DIRECTORY"), ":")
	if dir == "" {
		user, err := os.UserCacheDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(user, "wasmkeep")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return dir, nil
}

// WithDefaults returns o with each zero field at its default: what a node
// made with o uses.
func (o Options) WithDefaults() Options { return o.withDefaults() }

// Node serves actors over HTTP.
type Node struct {
	opts     Options
	log      *slog.Logger
	failures failureLog  // the limit on failed events' log lines (failures.go)
	clock    clock.Clock // opts.Clock
	engine   runtime.Engine
	storage  storage.Driver
	// stateDir is the storage root: the app's actor databases, their
	// sidecars and its alarm index, <data-dir>/state/<tenant>/<app>/ (ADR 1045).
	stateDir string
	host     map[string]runtime.HostFunction // what guests may import from the wasmkeep module

	// The version served (deploy.go): its classes and the front, the
	// stateless component that answers paths outside /actor/ and
	// /_wasmkeep/. depMu guards dep, swapped (closed when dep is
	// replaced) and behindErr (SetBehind); applyMu orders Apply and Close.
	depMu     sync.Mutex
	dep       *deployment
	swapped   chan struct{}
	behindErr error
	applyMu   sync.Mutex
	// secrets is the app's secrets layer (secrets.go), guarded by
	// secretsMu, which also orders the installs of new values (SetSecrets,
	// swap) and is taken after applyMu; secretsErr why the node cannot
	// open them, guarded by depMu.
	secretsMu  sync.Mutex
	secrets    map[string]map[string]string
	secretsErr error

	// Why the node takes no actor now (taking.go); empty: it takes them.
	// acquiring counts the acquires let through and not returned yet;
	// moving, the target of each move under way, by actor key (move.go;
	// "" while its sockets close);
	// takesUnderWay, the actors a take runs for in the background
	// (take.go: hand-offs, a move's target side); tasks, those and the
	// moves, which Close waits for once tasksClosed.
	takeMu        sync.Mutex
	notTaking     map[string]bool
	acquiring     int
	moving        map[string]moveState
	takesUnderWay map[string]bool
	tasks         sync.WaitGroup
	tasksClosed   bool

	// moveWaitsSaid: the move requests whose wait for their target was
	// logged at Info (move.go), touched only by the taking pass.
	moveWaitsSaid map[string]bool

	ctx    context.Context // ends when the node stops: stops running guests
	cancel context.CancelFunc

	mu      sync.Mutex
	actors  map[string]*actor // registered mailboxes, by tenant/class/name
	lru     lruHeap           // the same actors, least recently active first (lru.go)
	closing map[string]*actor // incarnations still closing their resources
	slots   chan struct{}     // one token per instance: resident actor or stateless request
	cpu     *fair.Sched       // the turns of events running guest code
	wg      sync.WaitGroup    // actor goroutines and stateless requests
	// background: modules being pre-initialised (preinit.go)
	background sync.WaitGroup
	preinitMu  sync.Mutex // held by the one pre-initialisation running

	replicas *replication.Replicas // with a bucket: the actors' replication (replica.go); nil on a node alone

	stopping   atomic.Bool
	diskLow    atomic.Bool   // the data directory's disk has less than MinFreeDisk free (disk.go)
	diskUnread atomic.Bool   // the last read of its free space failed (logged once)
	leaving    chan struct{} // closed once stopping begins: kept requests end (beginStop)
	leave      sync.Once
	keeping    *keeping // the requests kept through a failover (failover.go)
	// unreachable are the live peers no connection could be opened to
	unreachable *unreachable
	alarms      *alarm.Schedule
	alarmEvents alarmEvents   // the alarm events the timer queued, not answered yet (sweep.go)
	sweepDone   chan struct{} // closed once the alarm sweep ended; nil without one
	index       *alarm.Index  // the pending alarms of the tenant's actors, for a start
	metrics     *metrics.Metrics
	fetch       *fetch.Fetcher
	ws          *websocket.Hub

	guestLogs *guestlog.Sink // what guests print, rate-limited and counted
}

// New creates a node: it creates the engine, then compiles and checks every
// class. Close releases what it holds.
func New(ctx context.Context, opts Options, rt runtime.Driver, st storage.Driver) (*Node, error) {
	opts = opts.withDefaults()
	if opts.DataDir == "" {
		return nil, errors.New("node: a data directory is required")
	}
	if err := opts.App.Check(); err != nil {
		return nil, err
	}
	if opts.MaxInstances < 1 {
		return nil, fmt.Errorf("max instances is %d; it must be at least 1", opts.MaxInstances)
	}
	if opts.FetchStep > opts.FetchMaxStep {
		return nil, fmt.Errorf("the outbound HTTP step timeout (%v) is longer than the longest a guest may ask for (%v)", opts.FetchStep, opts.FetchMaxStep)
	}
	if err := os.MkdirAll(opts.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	fetcher, err := fetch.New(fetch.Options{
		Allow: opts.AllowOutbound, Ports: opts.AllowOutboundPorts, CAs: opts.OutboundCAs, Resolver: opts.Resolver,
		Max: opts.MaxFetches, Step: opts.FetchStep, MaxStep: opts.FetchMaxStep, MaxBody: opts.FetchMaxBodyBytes,
	})
	if err != nil {
		return nil, err
	}
	eng, host, err := newEngine(ctx, rt, opts.MemoryLimit, opts.CacheDir)
	if err != nil {
		return nil, err
	}
	n := &Node{
		opts: opts, log: opts.Logger, clock: opts.Clock, engine: eng, host: host, storage: st,
		stateDir: filepath.Join(opts.DataDir, filepath.FromSlash(opts.App.StateRoot())),
		swapped:  make(chan struct{}),
		actors:   map[string]*actor{}, closing: map[string]*actor{},
		slots:       make(chan struct{}, opts.MaxInstances),
		cpu:         fair.New(opts.CPUTurns, opts.Clock.Now),
		alarms:      alarm.NewSchedule(),
		fetch:       fetcher,
		guestLogs:   guestlog.NewSink(opts.Logger, opts.Clock, opts.GuestLogRate),
		leaving:     make(chan struct{}),
		keeping:     newKeeping(opts.MaxConnections),
		unreachable: newUnreachable(),
	}
	if o, ok := n.opts.Placement.(placement.Owned); ok {
		o.Claiming = n.claiming
		n.opts.Placement = o
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.ws = websocket.NewHub(n.ctx, n.clock, websocket.Options{
		PerActor: opts.WebSocketsPerActor, PerNode: opts.WebSocketsPerNode,
		PingAfter: opts.WebSocketPingAfter, PongWait: opts.WebSocketPongWait, MaxMessage: opts.WebSocketMaxMessage,
		Queue: opts.WebSocketQueue, QueueBytes: opts.WebSocketQueueBytes,
		Freed: n.socketFreed,
	})
	n.metrics = metrics.New(metrics.Gauges{
		Resident:        func() float64 { n.mu.Lock(); defer n.mu.Unlock(); return float64(len(n.actors)) },
		Queued:          func() float64 { n.mu.Lock(); defer n.mu.Unlock(); return float64(n.queued()) },
		WaitingCPU:      func() float64 { return float64(n.cpu.Waiting()) },
		GuestLogLines:   func() float64 { return float64(n.GuestLogLines()) },
		GuestLogDropped: func() float64 { return float64(n.GuestLogDropped()) },
		WebSockets:      func() float64 { return float64(n.ws.Len()) },
		Classes:         func() float64 { d, _ := n.deployed(); return float64(len(d.classes)) },
		NotReady:        n.notReady,
		Build:           opts.Build,
	})
	if n.replicas, err = n.newReplicas(); err != nil {
		n.Close()
		return nil, fmt.Errorf("replication: %w", err)
	}
	v := Version{ID: opts.VersionID, Seq: opts.Seq, Classes: map[string]ClassSpec{}, Front: opts.Stateless}
	for name, path := range opts.Classes {
		v.Classes[name] = ClassSpec{Module: path, Access: opts.Access[name], Config: opts.Config[name], Requires: opts.Requires[name],
			Expire: opts.ExpireAfterIdle[name]}
	}
	for _, by := range []struct {
		what  string
		names []string
	}{
		{"access rule", slices.Sorted(maps.Keys(opts.Access))}, // a typo would leave the class open
		{"configuration", slices.Sorted(maps.Keys(opts.Config))},
		{"required configuration", slices.Sorted(maps.Keys(opts.Requires))},
		{"expire-after-idle", slices.Sorted(maps.Keys(opts.ExpireAfterIdle))},
	} {
		for _, name := range by.names {
			if _, ok := opts.Classes[name]; !ok {
				n.Close()
				return nil, fmt.Errorf("%s for class %q, which is not served (served: %s)", by.what, name, strings.Join(slices.Sorted(maps.Keys(opts.Classes)), ", "))
			}
		}
	}
	n.secrets = opts.Secrets
	n.BlockSecrets(opts.SecretsBlocked)
	d, err := n.build(ctx, v, nil)
	if err != nil {
		n.Close()
		return nil, err
	}
	n.swap(d, nil)
	n.removeStaleSnapshots() // after the load, which marks the ones it uses
	if err := n.loadAlarms(ctx); err != nil {
		n.Close()
		return nil, fmt.Errorf("reading pending alarms from %s: %w", n.stateDir, err)
	}
	if n.opts.Cluster != nil {
		// Before the timer fires an overdue alarm and before the first
		// request: a node started while a drain request names it claims
		// nothing.
		n.readDrainRequest()
	}
	go n.alarms.Run(n.ctx, n.clock, n.deliverAlarm)
	if n.opts.Cluster != nil && n.opts.AlarmSweep > 0 {
		n.sweepDone = make(chan struct{})
		go n.sweepAlarms()
	}
	if _, alone := n.opts.Placement.(placement.Local); !alone {
		go n.sweepOwners()
	}
	if n.opts.Cluster != nil {
		go n.runTaking()
		n.opts.Cluster.Member.Lease.SetRoom(n.room)
		go n.runDeletes()
		go n.runExpiry()
	}
	if n.opts.MinFreeDisk > 0 {
		n.readDisk()
		go n.sampleDisk()
	}
	return n, nil
}

// Ready reports whether /_wasmkeep/ready answers 200.
func (n *Node) Ready() bool { return n.notReady() == "" }

// notReady says why the node is not ready (metrics.NotReadyReasons), or
// "": not while stopping, nor while it does not follow its app's current
// version (SetBehind), nor while it cannot open its app's secrets
// (BlockSecrets); with a bucket, not while the node lease is not
// valid, nor before two heartbeat listings (by then this node knows its
// peers, and its peers, which list as often, have seen its lease and the
// pin in it, so what it forwards and what it is sent is trusted), nor
// without the cluster secret (calls between nodes would fail).
func (n *Node) notReady() string {
	c := n.opts.Cluster
	switch {
	case n.stopping.Load():
		return metrics.NotReadyStopping
	case n.diskLow.Load():
		return metrics.NotReadyDisk
	case n.behind() != nil:
		return metrics.NotReadyBehind
	case n.secretsBlocked() != nil:
		return metrics.NotReadySecrets
	case c == nil:
		return ""
	case !c.Member.Ready():
		return metrics.NotReadyLease
	case c.Member.View.Listings() < 2:
		return metrics.NotReadyPeers
	case c.Signer == nil:
		return metrics.NotReadyCallSecret
	}
	return ""
}

// MetricsHandler serves the node's metrics page (--metrics-listen).
func (n *Node) MetricsHandler() http.Handler { return n.metrics.Handler() }

// GuestLogLines is how many lines printed by guests reached the log.
func (n *Node) GuestLogLines() int64 { return n.guestLogs.Lines() }

// GuestLogDropped is how many lines printed by guests the limits dropped
// (every line, with guestlog.Discard).
func (n *Node) GuestLogDropped() int64 { return n.guestLogs.Dropped() }

// Shutdown stops the node: not ready at once, then in-flight requests get up
// to grace to finish, actors finish their queued events, and every database
// is closed cleanly.
func (n *Node) Shutdown(srv *http.Server, grace time.Duration) error {
	n.beginStop()
	// The grace is the operator's wall time, and net/http polls its idle
	// connections on timers of its own: the wall clock, not n.clock.
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if n.opts.Cluster != nil {
		// No park after beginStop; Member.Leave releases one that began
		// before, and those the grace left (thousands of parked rooms),
		// or the lease's release frees them.
		n.releaseAllParked(ctx, metrics.ParkedStop)
	}
	err := srv.Shutdown(ctx)
	n.ws.Shutdown()
	n.hibernateAll()
	n.Close()
	return err
}

// beginStop takes no new events and ends the kept requests.
func (n *Node) beginStop() {
	n.stopping.Store(true)
	n.leave.Do(func() { close(n.leaving) })
}

// hibernateAll asks every actor to finish its queue and close, and waits.
func (n *Node) hibernateAll() {
	n.mu.Lock()
	for _, a := range n.actors {
		a.stop()
	}
	n.mu.Unlock()
	n.wg.Wait()
}

// Close releases the engine and stops running guests. Actors still resident
// are closed first.
func (n *Node) Close() {
	n.beginStop() // no new events (Shutdown began it already; other callers may not have)
	n.hibernateAll()
	if n.index != nil {
		n.index.Close()
	}
	if n.cancel != nil {
		n.cancel()
	}
	n.takeMu.Lock()
	n.tasksClosed = true
	n.takeMu.Unlock()
	n.tasks.Wait() // hand-offs and moves, ended by n.ctx
	if n.sweepDone != nil {
		<-n.sweepDone
	}
	n.applyMu.Lock()    // an Apply under way ends first; later ones see stopping
	n.secretsMu.Lock()  // so does a SetSecrets
	n.background.Wait() // pre-initialisations: no compile may outlive the engine
	d, _ := n.deployed()
	for _, c := range d.codes() {
		c.close(context.Background())
	}
	n.secretsMu.Unlock()
	n.applyMu.Unlock()
	n.engine.Close(context.Background())
}

var (
	errQueueFull = errors.New("actor queue full")
	errCapacity  = errors.New("no resident capacity")
	errStopping  = errors.New("node is stopping")
	// An event for an actor being handed over (book ADR 0014: its
	// requests may get a 503 for a moment): the next one after it is gone
	// goes to the node that takes it.
	errHandingOver = errors.New("the actor is being handed over to another node")
)

// deliver queues ev in the mailbox of tenant/class/name, waking the actor if
// it has none, or runs it at once on the caller's goroutine (runInline): its
// answer is then in ev.reply when deliver returns. Every event reaches an
// actor through it, and only if the placement says the actor runs here
// (unless the front door asked already).
func (n *Node) deliver(ctx context.Context, c *class, name string, ev *event) error {
	if !ev.placed && ev.del == nil { // a delete job's pass chose this node (ends.go)
		if err := n.place(ctx, c, name); err != nil {
			return err
		}
	}
	ev.class = c
	key := n.actorKey(c, name)
	for {
		if n.stopping.Load() && !ev.isWSClose() {
			return errStopping
		}
		n.mu.Lock()
		if a := n.actors[key]; a != nil {
			err := errHandingOver
			if !a.handingOver.Load() || ev.isWSClose() {
				if a.runInline(ev) {
					return nil
				}
				err = a.enqueue(ev)
			}
			n.mu.Unlock()
			return err
		}
		n.mu.Unlock()
		if err := n.admit(ctx); err != nil {
			return err
		}
		n.mu.Lock()
		if n.actors[key] != nil { // another request woke it meanwhile
			n.mu.Unlock()
			<-n.slots
			continue
		}
		a := newActor(n, c, abi.Address{Tenant: n.opts.App.Tenant, Class: c.name, Name: name}, key, n.closing[key])
		a.armIdle()
		n.register(a)
		n.wg.Add(1)
		// Its goroutine starts as deliver returns: after its first request
		// if that ran here (ADR 1066, amendment), even one that panicked
		// (net/http recovers a handler's panic). It runs here unless the
		// previous incarnation is still closing, which the goroutine waits
		// for.
		defer func() { go a.run() }()
		if a.prev == nil && a.runInline(ev) {
			return nil
		}
		a.enqueue(ev)
		n.mu.Unlock()
		return nil
	}
}

// place decides whether an event for c/name runs here: nil if it does, a
// *placement.Elsewhere or *placement.Unplaced if not. It is the one place
// that asks the Placement (deliver calls it, or the front door before its
// access check, which reads this node's storage).
func (n *Node) place(ctx context.Context, c *class, name string) error {
	addr := abi.Address{Tenant: n.opts.App.Tenant, Class: c.name, Name: name}
	n.unparkForTaker(addr)
	return placement.Check(ctx, n.opts.Placement, addr)
}

// forgetOwner drops the owner hint the placement may keep for addr
// (placement.Hinted): it proved wrong, or this node acquired the actor.
func (n *Node) forgetOwner(addr abi.Address) {
	if h, ok := n.opts.Placement.(placement.Hinted); ok {
		h.Forget(addr)
	}
}

// countRefusal counts a request or call that deliver refused.
func (n *Node) countRefusal(err error) {
	switch {
	case errors.Is(err, errQueueFull):
		n.metrics.Refused(metrics.RefusedOverloaded)
	case errors.Is(err, errCapacity):
		n.metrics.Refused(metrics.RefusedCapacity)
	case errors.Is(err, errStopping), errors.Is(err, errHandingOver), placement.NotHere(err):
		n.metrics.Refused(metrics.RefusedUnavailable)
	}
}

// actorKey is an actor's key in n.actors: tenant/class/name.
func (n *Node) actorKey(c *class, name string) string {
	return n.opts.App.Tenant + "/" + c.name + "/" + name
}

// queued counts the events in resident actors' mailboxes; n.mu is held.
func (n *Node) queued() (sum int) {
	for _, a := range n.actors {
		sum += a.queue.Len()
	}
	return sum
}

// exists reports whether the actor exists for its class's access rule
// (book ADR 0010): it is resident, has a database here, or, on a node with
// a bucket, has history there, so an actor no node holds is reached
// through any node. Nothing is created. A database that cannot be checked
// counts as missing (refusing creates nothing); a bucket that cannot be
// listed is an error, since the actor may well exist.
func (n *Node) exists(ctx context.Context, c *class, name string) (bool, error) {
	n.mu.Lock()
	a := n.actors[n.actorKey(c, name)]
	n.mu.Unlock()
	if a != nil && !a.deleted.Load() {
		return true, nil
	}
	addr := abi.Address{Tenant: n.opts.App.Tenant, Class: c.name, Name: name}
	switch {
	case n.hasDatabase(addr):
		return true, nil
	case n.replicas == nil:
		return false, nil
	}
	return n.replicas.Exists(ctx, addr)
}

// hasDatabase asks storage whether the actor has a database; an error
// counts as no.
func (n *Node) hasDatabase(addr abi.Address) bool {
	ok, err := n.storage.Exists(context.Background(), n.stateDir, addr)
	return err == nil && ok
}

// noDatabase reports whether storage says for sure that the actor has no
// database here: an error is not a no, since what decides on it may
// create the actor or remove its only copy.
func (n *Node) noDatabase(addr abi.Address) bool {
	ok, err := n.storage.Exists(context.Background(), n.stateDir, addr)
	return err == nil && !ok
}

// admit takes a resident slot. If none is free it has the least recently
// used idle actor hibernate and takes that actor's slot, so that concurrent
// admissions each evict an actor of their own; it gives up after
// AdmissionWait.
func (n *Node) admit(ctx context.Context) error {
	t := n.clock.NewTimer(n.opts.AdmissionWait)
	defer t.Stop()
	for {
		select {
		case n.slots <- struct{}{}:
			return nil
		default:
		}
		victim, claim := n.evictOne()
		if victim == nil { // every actor is busy: wait for one to hibernate
			select {
			case n.slots <- struct{}{}:
				return nil
			case <-t.C():
				return errCapacity
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		select {
		case got := <-claim:
			if got {
				return nil
			}
			// an event reached the victim first: evict another
		case <-t.C():
			n.abandonClaim(victim, claim)
			return errCapacity
		case <-ctx.Done():
			n.abandonClaim(victim, claim)
			return ctx.Err()
		}
	}
}

// evictOne asks the least recently active idle actor that no other
// admission claimed to hibernate, and returns it with the claim on its slot
// (nil if there is no such actor).
func (n *Node) evictOne() (*actor, chan bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	lru := n.leastRecent()
	if lru == nil {
		return nil, nil
	}
	lru.claim = make(chan bool, 1)
	lru.requestEviction()
	return lru, lru.claim
}

// abandonClaim gives up a claim from evictOne: the slot goes back to the
// node if the victim already handed it over, or will when it closes.
func (n *Node) abandonClaim(victim *actor, claim chan bool) {
	n.mu.Lock()
	if victim.claim == claim {
		victim.claim = nil
	}
	n.mu.Unlock()
	select {
	case got := <-claim: // answered before it was abandoned
		if got {
			<-n.slots
		}
	default:
	}
}

// retire unregisters a hibernating actor if nothing is queued for it. Called
// by the actor itself; after it returns true no event can reach it. An
// actor that stays tells the admission that claimed it to evict another.
func (n *Node) retire(a *actor) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if a.queue.Len() > 0 {
		if a.claim != nil {
			a.claim <- false
			a.claim = nil
		}
		return false
	}
	n.unregister(a)
	n.closing[a.key] = a
	return true
}

// closed releases the slot of an actor whose resources are closed, or hands
// it to the admission that evicted the actor.
func (n *Node) closed(a *actor) {
	n.mu.Lock()
	if n.closing[a.key] == a {
		delete(n.closing, a.key)
	}
	claim := a.claim
	if claim != nil {
		claim <- true
		a.claim = nil
	}
	n.mu.Unlock()
	if claim == nil {
		<-n.slots
	}
}
