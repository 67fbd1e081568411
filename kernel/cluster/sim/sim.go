// Package sim is the deterministic simulation of the cluster protocols
// (issue 14, item 3; book ADR 0006, 0007, 0020; ADR 1027): three nodes run
// the real node lease (nodelease), the real ownership records (ownership,
// wired by cluster.Join as a server wires them) against a simulated
// bucket as concurrent as a real one, with seeded faults: failing and slow
// requests, lost replies, writes held and landing late, partitions,
// crashes and restarts under the same node id, a process left running cut
// off while its successor starts, and clocks skewed up to max_skew. It
// checks at every step that no two processes own one actor, that no
// generation makes two holds, and that an actor event runs (past the hold
// check a node makes before each event, ownership.Owners.Check) only
// under the actor's newest hold.
//
// Replication runs in it too (repl.go): every hold restores with the real
// replication.Open, every event ships a write with the real Stream, with
// periodic snapshots and collection; every acknowledged write must be in
// every later owner's restore.
//
// With Config.Alarms the owners also keep each actor's alarm in the
// bucket's index with the real alarmindex functions (alarm.go), and the
// check adds that the state the bucket holds names an existing entry for
// its pending alarm.
//
// A run is a function of its seed. It runs inside a testing/synctest
// bubble on one clock.Manual that only the scheduler moves: each step
// fires one event of the scheduler's own (a request taking effect, a
// reply, a fault) or the timers due at one instant, then waits
// (synctest.Wait) until every goroutine is blocked again, so what one step
// woke has finished before the next. Every random choice comes from one seeded source, drawn by the
// scheduler in step order; the requests a step produced are put in an
// order of their content before they draw. The trace of a run (every
// request, every effect, every fault) is hashed: the same seed gives the
// same hash.
package sim

import (
	"container/heap"
	"fmt"
	"hash"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"testing/synctest"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/memdb"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
)

// Config is one run.
type Config struct {
	Seed uint64
	// Duration is how long the workload and the faults run (simulated);
	// then every process stops cleanly and the run winds down.
	Duration time.Duration
	Nodes    int // 3 by default
	Actors   int // 4 by default: few, so ownership changes often
	// BlindLeaseWrites plants bug 1: the bucket drops the condition of
	// every write under nodes/ (the lease's renewals and peers' fences).
	BlindLeaseWrites bool
	// AckLateUploads plants bug 2: an upload is acknowledged without
	// checking that the hold is still valid when it returned.
	AckLateUploads bool
	// Alarms runs the alarm index workload (alarm.go).
	Alarms bool
	// FirstUploadBeforeEntry plants an R4 violation: a joining node's
	// first upload goes before the entry of the alarm it holds.
	FirstUploadBeforeEntry bool
	// SocketHome runs the socket home's workload (sockets.go).
	SocketHome bool
	// Moves runs the moves' workload (moves.go).
	Moves bool
	// TempDir is where restores build databases (a test's t.TempDir()).
	TempDir string
	// Trace, if set, gets every line of the trace.
	Trace io.Writer
}

// Result is what a run did and found.
type Result struct {
	Hash        uint64 // of the trace
	Steps       int    // timers and events fired
	Requests    int
	Holds       int // acquisitions that made a new hold
	Gens        int // distinct (actor, generation) held
	Events      int // actor events run while owning
	Acked       int // writes acknowledged
	Restores    int // hold starts that restored (or found the local database the head)
	Snapshots   int // periodic snapshots acknowledged
	Collected   int // history objects deleted by collection
	LateUploads int // history uploads that took effect after their hold ended
	Fences      int // fences written
	LateWrites  int // writes that took effect after their caller gave up
	Lost        int // leases lost (the process exits)
	Twins       int // starts refused by the start check
	Crashes     int
	Restarts    int
	Cuts        int // partitions
	Zombies     int // a process cut off while its successor starts
	Ties        int // requests of one step with the same content (order not decided by content)
	// The alarm index (Config.Alarms):
	Listed        int // entries listed
	Replaced      int // replaced entries removed after the replication
	StaleRemoved  int // entries removed as stale
	NewerKept     int // entries a stale cleanup kept as a newer owner's (R3)
	OwnerFences   int // owner_fence uploads
	HadNothing    int // stale cleanups refused: the bucket had nothing for the actor
	FirstListings int // joining nodes' alarms listed before their first upload (R4)
	Aimed         int // faults aimed at an upload (a joining node's first, and a few others)
	Pauses        int // processes paused between an acknowledgement and a cleanup
	AlarmChecks   int // checks of the alarm invariant
	// The socket home (Config.SocketHome):
	Parks      int // holds parked
	HomeWakes  int // acquisitions that replaced a parked record
	Relays     int // events relayed to the process a record names
	LastSocket int // parked records released as their last socket closed
	Drained    int // parked records released by a drain pass
	// Moves (Config.Moves):
	Successors int // releases that named a successor
	Cleared    int // successors cleared (a failed take)
	ToNext     int // events relayed to a record's successor
	Settings   string
	Violations []string
}

// Failed reports whether an invariant broke.
func (r Result) Failed() bool { return len(r.Violations) > 0 }

func (r Result) String() string {
	extra := ""
	if r.AlarmChecks > 0 {
		extra = fmt.Sprintf("; extra: %d listed, %d replaced removed, %d stale removed, %d newer kept, %d owner fences, %d refused as the bucket had nothing, %d listed on joining, %d aimed faults, %d pauses, %d checks",
			r.Listed, r.Replaced, r.StaleRemoved, r.NewerKept, r.OwnerFences, r.HadNothing, r.FirstListings, r.Aimed, r.Pauses, r.AlarmChecks)
	}
	if r.Parks > 0 {
		extra += fmt.Sprintf("; socket home: %d parks, %d wakes at home, %d relays, %d released at the last socket, %d by drains",
			r.Parks, r.HomeWakes, r.Relays, r.LastSocket, r.Drained)
	}
	if r.Successors > 0 {
		extra += fmt.Sprintf("; moves: %d releases to a successor, %d cleared, %d events relayed to one", r.Successors, r.Cleared, r.ToNext)
	}
	return fmt.Sprintf("%d steps, %d requests, %d holds, %d generations, %d events, %d acknowledged writes, %d restores, %d snapshots, %d objects collected, %d late uploads, %d late writes, %d fences, %d leases lost, %d twins refused, %d crashes, %d restarts, %d cuts, %d zombies, %d ties (%s), trace %016x",
		r.Steps, r.Requests, r.Holds, r.Gens, r.Events, r.Acked, r.Restores, r.Snapshots, r.Collected, r.LateUploads, r.LateWrites, r.Fences, r.Lost, r.Twins, r.Crashes, r.Restarts, r.Cuts, r.Zombies, r.Ties, r.Settings, r.Hash) + extra
}

// simApp is the app the simulated nodes serve: ownership, history and
// replication run on its state root, the kind of view a server's run on.
var simApp = app.Name{Tenant: "t", App: "sim"}

// Epoch is where the simulated (true) time starts.
var Epoch = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

type event struct {
	at  time.Time
	seq uint64
	fn  func()
}

type events []*event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if !e[i].at.Equal(e[j].at) {
		return e[i].at.Before(e[j].at)
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(*event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

type holdKey struct {
	actor ownership.Actor
	gen   uint64
}

type holdID struct {
	proc    string
	version string
}

type world struct {
	cfg      Config
	settings nodelease.Settings
	rng      *rand.Rand
	clk      *clock.Manual
	queue    events
	seq      uint64
	reqs     uint64
	trace    hash.Hash64
	res      Result
	store    *buckettest.Memory
	mod      map[string]time.Time
	actors   []ownership.Actor
	nodes    []*node
	procs    []*process
	holds    map[holdKey]holdID
	parkedAt map[holdKey]bool           // holds parked (sockets.go)
	top      map[ownership.Actor]uint64 // the highest generation held of each actor
	stopping bool
	// What replication acknowledged and restored, by actor.
	acked      map[ownership.Actor][]ack
	restoredBy map[ownership.Actor][]restored
	// The alarm index's (alarm.go): what each shipped state records,
	// whether the bucket changed since the last check, joining nodes'
	// actors.
	states   map[statePos]alarmState
	changed  bool
	joins    []join
	pauses   []pause   // under mu
	cleanups []stalled // stale cleanups stalled, under mu

	mu        sync.Mutex // inbox, and what process goroutines record
	inbox     []*request
	notes     []note
	newHolds  []newHold
	parks     []newHold
	ranEvents []ranEvent
	acks      []ack
	restores  []restored
	broken    []string
	live      int // goroutines of the harness still running
	waiting   int // requests sent whose caller waits for an answer
}

// Run runs one seed; call it inside a synctest bubble.
func Run(cfg Config) Result {
	if cfg.Duration == 0 {
		cfg.Duration = 3 * time.Minute
	}
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.Actors == 0 {
		cfg.Actors = 4
	}
	w := &world{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5851f42d4c957f2d)),
		clk: clock.NewManual(Epoch), trace: fnv.New64a(), store: buckettest.NewMemory(buckettest.Flaws{}),
		mod: map[string]time.Time{}, holds: map[holdKey]holdID{}, parkedAt: map[holdKey]bool{}, top: map[ownership.Actor]uint64{},
		acked: map[ownership.Actor][]ack{}, restoredBy: map[ownership.Actor][]restored{}, states: map[statePos]alarmState{}}
	w.settings = w.drawSettings()
	w.res.Settings = fmt.Sprintf("ttl %v grace %v safety %v max skew %v", w.settings.TTL, w.settings.Grace, w.settings.Safety, w.settings.MaxSkew)
	for i := range cfg.Actors {
		w.actors = append(w.actors, ownership.Actor{Tenant: "t", Class: "c", Name: fmt.Sprint(i)})
	}
	for i := range cfg.Nodes {
		n := &node{w: w, id: fmt.Sprintf("n%d", i+1), disk: memdb.New(), fresh: true}
		w.nodes = append(w.nodes, n)
		w.after(w.ms(0, 2000), n.start)
		w.after(w.faultGap(), n.episode)
	}
	w.after(w.wakeGap(), w.wake)
	w.after(cfg.Duration, w.stop)
	w.loop()
	if !w.res.Failed() {
		w.finalRestore()
	}
	w.res.Requests = int(w.reqs)
	w.res.Hash = w.trace.Sum64()
	w.res.Gens = len(w.holds)
	return w.res
}

// drawSettings picks the lease's timings: the book's defaults, or the
// tightest the settings allow (grace + safety exactly twice max_skew), so
// skew at the bound matters.
func (w *world) drawSettings() nodelease.Settings {
	s := nodelease.DefaultSettings()
	if w.rng.IntN(2) == 1 {
		s.Safety, s.Grace = time.Second, time.Second
	}
	if err := s.Validate(); err != nil {
		panic(err)
	}
	return s
}

// after schedules fn d from now (true time).
func (w *world) after(d time.Duration, fn func()) {
	w.seq++
	heap.Push(&w.queue, &event{at: w.clk.Now().Add(max(d, 0)), seq: w.seq, fn: fn})
}

// tracef adds a line to the trace.
func (w *world) tracef(format string, args ...any) {
	line := fmt.Sprintf("%9.3f ", w.clk.Now().Sub(Epoch).Seconds()) + fmt.Sprintf(format, args...) + "\n"
	if strings.Contains(line, bucket.ProbePrefix) {
		line = probeKey.ReplaceAllString(line, bucket.ProbePrefix+"*")
	}
	w.trace.Write([]byte(line))
	if w.cfg.Trace != nil {
		io.WriteString(w.cfg.Trace, line)
	}
}

// probeKey is a key of the bucket probe's: it holds a random nonce and the
// bubble's time, the same from run to run only in shape.
var probeKey = regexp.MustCompile(regexp.QuoteMeta(bucket.ProbePrefix) + `[A-Za-z0-9._~%-]+`)

// violation records a broken invariant (the first few).
func (w *world) violation(format string, args ...any) {
	msg := fmt.Sprintf("at %v: ", w.clk.Now().Sub(Epoch)) + fmt.Sprintf(format, args...)
	w.tracef("VIOLATION %s", msg)
	if len(w.res.Violations) < 10 {
		w.res.Violations = append(w.res.Violations, msg)
	}
}

// loop is the scheduler: settle, take the step's requests, check, fire
// the next timer or event (a timer first on a tie), until the run wound
// down.
func (w *world) loop() {
	limit := Epoch.Add(w.cfg.Duration + 10*time.Minute)
	for {
		synctest.Wait()
		w.send()
		if w.reap() {
			continue // what it started runs alone before the next step
		}
		w.checkReplication()
		w.pauseAll()
		w.checkAlarms()
		w.check()
		if w.stopping && w.quiet() {
			w.tracef("end")
			return
		}
		if w.clk.Now().After(limit) {
			w.violation("the run did not wind down within 10 minutes of its end (%d harness goroutines left)", w.harness())
			return
		}
		next, timer := w.clk.Next()
		if timer && (len(w.queue) == 0 || !next.After(w.queue[0].at)) {
			// Every timer due at this instant fires in this step: timers
			// tie only when goroutines that ran side by side armed them
			// alike (a restore's reads), and their arming order is not
			// the seed's; what they send is put in order by content.
			w.clk.FireNext()
			w.tracef("timer")
		} else if len(w.queue) > 0 {
			e := heap.Pop(&w.queue).(*event)
			if d := e.at.Sub(w.clk.Now()); d > 0 {
				w.clk.Advance(d) // no timer is due before e
			}
			e.fn()
		} else {
			w.violation("nothing left to run, %d harness goroutines blocked", w.harness())
			return
		}
		w.res.Steps++
	}
}

func (w *world) harness() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.live
}

// quiet: every process stopped, no harness goroutine is left, no timer
// is armed and no request waits for its answer: a crashed process's
// collection pass, on a goroutine of its own, may still wait for either.
func (w *world) quiet() bool {
	if w.harness() > 0 || w.clk.Armed() > 0 {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting > 0 {
		return false
	}
	for _, p := range w.procs {
		if !p.ended {
			return false
		}
	}
	return true
}

// spawn runs f on a harness goroutine, counted until it returns.
func (w *world) spawn(f func()) {
	w.mu.Lock()
	w.live++
	w.mu.Unlock()
	go func() {
		defer func() {
			w.mu.Lock()
			w.live--
			w.mu.Unlock()
		}()
		f()
	}()
}

// Faults and their rates, per request.
func (w *world) faultFor(r *request) fault {
	if w.stopping {
		return fNone
	}
	x := w.rng.Float64()
	write := r.op == opPut || r.op == opDelete
	switch {
	case x < 0.03:
		return fFail
	case x < 0.06:
		return fLost
	case x < 0.08 && write:
		return fHeld
	case x < 0.09:
		return fHang
	}
	return fNone
}

// ms is between lo and hi milliseconds, to the nanosecond: the
// scheduler's times never meet a timer's or each other's but by design.
func (w *world) ms(lo, hi int) time.Duration {
	return time.Duration(lo)*time.Millisecond + time.Duration(w.rng.Int64N(int64(hi-lo)*int64(time.Millisecond)))
}

// latency is one leg of a request: a few milliseconds, sometimes slow
// (seconds: past a lease attempt's timeout now and then).
func (w *world) latency() time.Duration {
	if !w.stopping && w.rng.IntN(25) == 0 {
		return w.ms(300, 3800)
	}
	return w.ms(2, 42)
}

// held is how long a held write stays on the way.
func (w *world) held() time.Duration { return w.ms(2000, 20000) }

func (w *world) faultGap() time.Duration { return w.ms(3000, 28000) }

func (w *world) wakeGap() time.Duration { return w.ms(50, 450) }

// stop ends the workload and the faults: partitions heal, every process
// stops cleanly.
func (w *world) stop() {
	w.stopping = true
	w.tracef("stop")
	for _, p := range w.procs {
		if p.cut {
			p.cut = false
			w.tracef("%s reconnects", p)
		}
		if !p.dead {
			p.leave()
		}
	}
}
