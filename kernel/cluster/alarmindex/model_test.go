package alarmindex

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/bugs"
)

// A seeded model of owners in turns on one actor, driving the real index
// code: events that list and replicate (acknowledged at once or later),
// takeovers, an earlier owner's upload that lands late (a late commit,
// refused once the new owner uploaded), stale cleanups by the owner and
// by the owner before it, and deletes that land late. The invariant, "the
// entry the replicated state names exists", is checked after every step.
// Each unsafe variant the rules exclude is planted and caught. This is not
// the node's simulation (kernel/cluster/sim, Config.Alarms): one actor, no crashes,
// no joining node (R4).

type variant int

const (
	safe          variant = iota
	untagged              // bugs.UntaggedAlarmKeys
	noGenCheck            // bugs.SkipAlarmGenCheck
	noFence               // bugs.SkipAlarmFence
	notReplicated         // stale entries removed before the state naming the alarm is replicated
)

// plant sets the switches of internal/bugs that variant v plants (none
// for removing before replicating, which the model plants itself: the
// caller says whether its state is replicated) and clears the others.
func plant(v variant) {
	bugs.UntaggedAlarmKeys, bugs.SkipAlarmGenCheck, bugs.SkipAlarmFence = v == untagged, v == noGenCheck, v == noFence
}

func (v variant) String() string {
	return [...]string{"safe", "untagged keys", "no generation check", "no fence", "removing before replicating"}[v]
}

var modelTimes = []int64{1000, 2000, 3000}

// randomLate holds some deletes (their sender sees a timeout) and lands
// them when told.
type randomLate struct {
	bucket.Bucket
	mu   sync.Mutex
	rng  *rand.Rand
	held []string
}

func (r *randomLate) Delete(ctx context.Context, key string, cond bucket.Condition) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rng.IntN(3) == 0 {
		r.held = append(r.held, key)
		return fmt.Errorf("no answer: %w", bucket.ErrTransient)
	}
	return r.Bucket.Delete(ctx, key, cond)
}

func (r *randomLate) landOne() {
	if len(r.held) == 0 {
		return
	}
	i := r.rng.IntN(len(r.held))
	key := r.held[i]
	r.held = append(r.held[:i], r.held[i+1:]...)
	_ = r.Bucket.Delete(ctx, key, bucket.Condition{})
}

type modelOwner struct {
	gen     uint64
	view    Indexed // what its database names
	acked   bool    // its view is in the bucket, as far as it knows
	fenced  bool    // it uploaded under its hold
	pending bool    // an upload of its view is in flight
	before  Indexed // what it named before that upload's event
}

type model struct {
	v         variant
	rng       *rand.Rand
	b         *randomLate
	n         Nonces
	state     Indexed // what the replicated state names
	gen       uint64
	cur, prev *modelOwner
	log       []string
}

func (m *model) logf(format string, args ...any) { m.log = append(m.log, fmt.Sprintf(format, args...)) }

func (m *model) put(at int64, gen uint64) Indexed {
	k, err := List(ctx, m.b, alice, at, gen, m.n)
	if err != nil {
		panic(err)
	}
	return k.Indexed()
}

// event runs an event on the current owner that sets, keeps or clears the
// alarm, and starts its upload.
func (m *model) event() {
	o := m.cur
	if o.pending {
		return
	}
	if !o.fenced {
		// Its first upload is conditioned on the head: had a late commit
		// landed, it would restore that first.
		o.view = m.state
	}
	if m.prev != nil {
		m.prev.pending = false // this upload lands first: the earlier owner's is refused
	}
	next := Indexed{}
	if m.rng.IntN(4) > 0 {
		at := modelTimes[m.rng.IntN(len(modelTimes))]
		if !o.view.None() && o.view.At == at {
			next = o.view // an unchanged alarm keeps its entry
		} else {
			next = m.put(at, o.gen)
		}
	}
	m.logf("gen %d event: %v -> %v", o.gen, o.view, next)
	o.before, o.view, o.acked, o.pending = o.view, next, false, true
	if m.rng.IntN(2) == 0 {
		m.ack()
	}
}

// ack acknowledges the current owner's upload: its state is the bucket's,
// and it removes the entry the event replaced.
func (m *model) ack() {
	o := m.cur
	if !o.pending {
		return
	}
	o.pending, o.acked, o.fenced = false, true, true
	m.state = o.view
	m.logf("gen %d replicated %v, removes %v", o.gen, o.view, o.before)
	_ = RemoveReplaced(ctx, m.b, alice, o.before, o.view, o.gen)
}

func (m *model) takeover() {
	m.gen++
	m.prev = m.cur
	m.cur = &modelOwner{gen: m.gen, view: m.state, acked: true}
	m.logf("gen %d takes over, restoring %v", m.gen, m.state)
}

// lateCommit lands the earlier owner's upload, unless the new owner
// uploaded since.
func (m *model) lateCommit() {
	p := m.prev
	if p == nil || !p.pending {
		return
	}
	p.pending = false
	if m.cur.fenced {
		return
	}
	m.state = p.view
	m.logf("gen %d's upload lands late: the state names %v", p.gen, p.view)
	if m.rng.IntN(2) == 0 {
		p.acked, p.fenced = true, true
		_ = RemoveReplaced(ctx, m.b, alice, p.before, p.view, p.gen)
	}
}

// clean delivers a time o's view does not name, and removes its stale
// entries as o may.
func (m *model) clean(o *modelOwner) {
	if o == nil {
		return
	}
	at := modelTimes[m.rng.IntN(len(modelTimes))]
	if !o.view.None() && o.view.At == at {
		return
	}
	s := Stale{Actor: alice, At: at, Named: o.view, Gen: o.gen, Fenced: o.fenced, Replicated: o.acked && !o.pending}
	if m.v == notReplicated {
		s.Replicated = true
	}
	_, err := RemoveStale(ctx, m.b, s)
	if errors.Is(err, ErrNotFenced) && o == m.cur {
		// It uploads owner_fence, conditioned on the head: a late commit
		// that landed is restored first, and none lands after it.
		if m.prev != nil {
			m.prev.pending = false
		}
		o.view, o.fenced = m.state, true
		s.Named, s.Fenced = o.view, true
		if !o.view.None() && o.view.At == at {
			return
		}
		_, err = RemoveStale(ctx, m.b, s)
	}
	m.logf("gen %d cleans %d naming %v: %v", o.gen, at, s.Named, err)
}

func (m *model) violated() error {
	if m.state.None() {
		return nil
	}
	k, err := m.state.Key(alice)
	if err != nil {
		return err
	}
	obj, err := m.b.Bucket.Get(ctx, k.String(), bucket.GetOptions{})
	if err != nil {
		return fmt.Errorf("the state names %v: %w", m.state, err)
	}
	obj.Body.Close()
	return nil
}

// runModel plays steps seeded by seed and returns the first violation.
func runModel(v variant, seed uint64, steps int) ([]string, error) {
	plant(v)
	defer plant(safe)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	m := &model{v: v, rng: rng, b: &randomLate{Bucket: view(), rng: rng}, n: NonceFunc(rng.Uint64), gen: 1}
	m.cur = &modelOwner{gen: 1, acked: true}
	for range steps {
		switch m.rng.IntN(10) {
		case 0, 1:
			m.event()
		case 2:
			m.ack()
		case 3:
			m.takeover()
		case 4:
			m.lateCommit()
		case 5, 6:
			m.clean(m.cur)
		case 7:
			m.clean(m.prev)
		default:
			m.b.landOne()
		}
		if err := m.violated(); err != nil {
			return m.log, err
		}
	}
	return m.log, nil
}

func TestModelTheRulesKeepTheNamedEntry(t *testing.T) {
	for seed := range uint64(300) {
		if log, err := runModel(safe, seed, 300); err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, strings.Join(log[max(0, len(log)-20):], "\n"))
		}
	}
}

func TestModelCatchesEachUnsafeVariant(t *testing.T) {
	for _, v := range []variant{untagged, noGenCheck, noFence, notReplicated} {
		t.Run(v.String(), func(t *testing.T) {
			for seed := range uint64(2000) {
				if _, err := runModel(v, seed, 300); err != nil {
					t.Logf("caught at seed %d: %v", seed, err)
					return
				}
			}
			t.Fatal("not caught within 2,000 seeds")
		})
	}
}
