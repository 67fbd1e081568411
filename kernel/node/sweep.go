package node

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/alarmindex"
	"github.com/wasmkeep/wasmkeep/kernel/node/alarm"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
)

// The alarm sweep (book ADR 0009, point 4; ADR 1048): every AlarmSweep a
// node with a bucket reads its app's overdue index entries and hands the
// ones it plans to deliver to its own timer, so that the alarm of an
// actor whose node died fires on another node with no request. Delivery
// is then the ordinary alarm event: the actor is taken (restored from the
// bucket) and on-alarm runs only if the committed alarm is due.

// DefaultAlarmSweep is Options.AlarmSweep's default: the book's
// alarm_sweep.
const DefaultAlarmSweep = 10 * time.Second

// NoAlarmSweep is Options.AlarmSweep turned off (--alarm-sweep-secs 0).
const NoAlarmSweep time.Duration = -1

// alarmEvents counts, by actor key, the alarm events this node's timer
// queued that have not been answered: the sweep leaves those actors out.
type alarmEvents struct {
	mu sync.Mutex
	m  map[string]int
}

func (e *alarmEvents) add(key string) {
	e.mu.Lock()
	if e.m == nil {
		e.m = map[string]int{}
	}
	e.m[key]++
	e.mu.Unlock()
}

func (e *alarmEvents) done(key string) {
	e.mu.Lock()
	if e.m[key]--; e.m[key] <= 0 {
		delete(e.m, key)
	}
	e.mu.Unlock()
}

func (e *alarmEvents) has(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.m[key] > 0
}

// sweepAlarms runs the sweep until the node stops, then closes
// n.sweepDone. A pass waits while the node's lease is not valid or before
// its second heartbeat listing (its view of the live nodes, which shares
// the entries out, is not trusted before: notReady).
func (n *Node) sweepAlarms() {
	defer close(n.sweepDone)
	c := n.opts.Cluster
	margin := c.Member.Lease.Settings().Takeover()
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())) // each node its own rotation
	var cursor string
	for clock.Sleep(n.ctx, n.clock, n.opts.AlarmSweep) == nil {
		// A node that takes no actor delivers none: its peers that take
		// actors share the entries.
		if n.stopping.Load() || !c.Member.Ready() || c.Member.View.Listings() < 2 || n.takesNone() {
			continue
		}
		next, err := n.sweepOnce(n.ctx, cursor, margin, rng)
		if err != nil && n.ctx.Err() == nil {
			n.log.Warn("alarm sweep", "err", err)
		}
		cursor = next
	}
}

// sweepOnce is one pass from cursor, counted with the alarms it handed to
// the timer: it returns where the next resumes ("" from the start, after
// an error too: a cursor the store no longer takes costs one pass).
func (n *Node) sweepOnce(ctx context.Context, cursor string, margin time.Duration, rng alarmindex.Rand) (_ string, err error) {
	c := n.opts.Cluster
	var own, anyone int
	defer func() {
		outcome := metrics.SweepOK
		if err != nil {
			outcome = metrics.SweepFailed
		}
		c.Metrics.AlarmSweep(outcome, own, anyone)
	}()
	now := n.clock.Now()
	read, err := alarmindex.ReadOverdue(ctx, c.Member.State, n.opts.App.Tenant, alarmindex.Horizon(now, margin), cursor, 0)
	if err != nil {
		return "", err
	}
	// Entries of classes this node does not serve use none of its share:
	// another node delivers them once they are anyone's.
	var served []alarmindex.Key
	for _, k := range read.Keys {
		if n.class(k.Class) != nil {
			served = append(served, k)
		}
	}
	plan := alarmindex.Plan(served, alarmindex.Sweep{
		Now: now, Margin: margin, Self: c.Member.Lease.NodeID(), Shards: n.sweepShards(), Rand: rng,
		Busy: func(k alarmindex.Key) bool { return n.alarmBusy(k, now) },
	})
	for _, d := range plan {
		a, err := alarmindex.ResolveActor(ctx, c.Member.State, d.Key)
		if errors.Is(err, bucket.ErrNotFound) { // removed since the listing
			continue
		}
		if err != nil {
			return "", err
		}
		cl := n.class(a.Class)
		if cl == nil || !n.alarms.Offer(n.actorKey(cl, a.Name), a.Class, a.Name, time.UnixMilli(d.Key.At), now, alarm.RetryMax) {
			continue
		}
		if d.Anyone {
			anyone++
		} else {
			own++
		}
	}
	return read.Next, nil
}

// sweepShards are the nodes the sweep shares entries with: this node and
// the live peers serving its app that take actors.
func (n *Node) sweepShards() []string {
	m := n.opts.Cluster.Member
	shards := []string{m.Lease.NodeID()}
	for _, p := range placement.Takers(m.View, n.opts.App.String()) {
		shards = append(shards, p.ID)
	}
	return shards
}

// alarmBusy reports whether this node has k's actor's alarm in flight or
// holds a time for it that an offer of k would not move (a retry, or an
// earlier time: Schedule.Holds). A shortened name is not resolved here (a GET each): its
// offer is refused the same way.
func (n *Node) alarmBusy(k alarmindex.Key, now time.Time) bool {
	a, hashed, err := k.Actor()
	cl := n.class(k.Class)
	if err != nil || hashed || cl == nil {
		return false
	}
	key := n.actorKey(cl, a.Name)
	return n.alarmEvents.has(key) || n.alarms.Holds(key, now, alarm.RetryMax)
}
