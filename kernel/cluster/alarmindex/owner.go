package alarmindex

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/bugs"
)

// The owner keeps the index equal to the committed alarm (book ADR 0009,
// point 2): after an event it lists the committed alarm (List) before the
// event is replicated, records the entry in the database (alarm_indexed,
// Indexed.Encode), and once the event is replicated removes the entry it
// replaced (RemoveReplaced). A crash in between leaves an extra entry,
// never a missing one. Three rules make a delete that lands late harmless:
//
//   - R1: every PUT writes a fresh key (a new nonce, created only if
//     absent), so a delete sent earlier never removes a newer entry;
//   - R2: only what the replicated state no longer names is deleted, and a
//     time's stale entries only by an owner that fenced (RemoveStale);
//   - R3: never an entry of a generation above the caller's own.

// Nonces gives the nonces of new entries' tags. The node's draws at
// random; a simulation hands in a seeded source.
type Nonces interface{ Nonce() uint64 }

// NonceFunc is a function as a Nonces.
type NonceFunc func() uint64

func (f NonceFunc) Nonce() uint64 { return f() }

// RandomNonces draws from math/rand/v2's generator, seeded at random and
// safe for concurrent use: a tag pairs the nonce with the hold's
// generation, and List's create-if-absent refuses a key drawn twice.
var RandomNonces Nonces = NonceFunc(rand.Uint64)

// ErrKeyTaken: every key List drew was already in the bucket, which a
// nonce source that repeats itself causes; nothing was written.
var ErrKeyTaken = errors.New("alarmindex: every key drawn for the entry was already taken")

// nonceDraws bounds List's draws: with 64 random bits a second is already
// never needed.
const nonceDraws = 3

// List puts a fresh entry for actor a's alarm at at, tagged with the hold's
// generation gen (R1): created only if absent, so a key is never written
// twice (a provider's retry of the same PUT recognises its own write, ADR
// 1012). The entry returned is what the database then records. An error
// leaves nothing the caller may rely on: the caller gives the actor up
// rather than replicate an alarm no entry lists (a PUT that lands after
// all is an extra entry, delivered once and then removed as stale).
func List(ctx context.Context, b bucket.Bucket, a history.Actor, at int64, gen uint64, nonces Nonces) (Key, error) {
	for range nonceDraws {
		tag, cond := Tag{Gen: gen, Nonce: nonces.Nonce()}, bucket.Condition{IfAbsent: true}
		if bugs.UntaggedAlarmKeys {
			tag, cond = Tag{Gen: 1}, bucket.Condition{}
		}
		k, err := KeyFor(a, at, tag)
		if err != nil {
			return Key{}, err
		}
		body := entryBody(k, a)
		_, err = b.Put(ctx, k.String(), bytes.NewReader(body), int64(len(body)), cond)
		switch {
		case err == nil:
			return k, nil
		case errors.Is(err, bucket.ErrPrecondition):
			continue // the key exists: draw another
		default:
			return Key{}, fmt.Errorf("alarmindex: listing %s's alarm at %d: %w", a, at, err)
		}
	}
	return Key{}, fmt.Errorf("%w (%s's alarm at %d, %d draws)", ErrKeyTaken, a, at, nonceDraws)
}

// entryBody is empty, or the actor's full name when the key holds only a
// shortened one, so a sweep can still name the actor (ResolveActor).
func entryBody(k Key, a history.Actor) []byte {
	if _, hashed, _ := history.DecodeName(k.Name); hashed {
		return []byte(a.Name)
	}
	return nil
}

// ErrNewerGeneration: the entry was written under a generation above the
// caller's, by a newer owner (R3); it is not deleted.
var ErrNewerGeneration = errors.New("alarmindex: the entry's generation is above the caller's")

// RemoveReplaced deletes the entry an event replaced, once that event is
// replicated: replaced is what the database recorded before the event,
// current what it records now. An unchanged entry stays (whichever owner
// wrote it); none replaced is nothing to do. gen is the caller's hold's
// generation: an entry above it is refused (R3). An entry already gone is
// not an error.
func RemoveReplaced(ctx context.Context, b bucket.Bucket, a history.Actor, replaced, current Indexed, gen uint64) error {
	if replaced.None() || replaced == current {
		return nil
	}
	k, err := replaced.Key(a)
	if err != nil {
		return err
	}
	if k.Tag.Gen > gen {
		return fmt.Errorf("%w: %s under generation %d", ErrNewerGeneration, k, gen)
	}
	if err := b.Delete(ctx, k.String(), bucket.Condition{}); err != nil && !errors.Is(err, bucket.ErrNotFound) {
		return fmt.Errorf("alarmindex: removing the replaced entry %s: %w", k, err)
	}
	return nil
}

// Stale is a time an alarm was delivered for that the committed alarm no
// longer matches, and what the caller knows of the actor's state.
type Stale struct {
	Actor history.Actor
	At    int64 // the delivered time
	// Named is what the database records (alarm_indexed), read after the
	// committed alarm was listed: the one entry the replicated state names.
	Named Indexed
	// Replicated: the state that names Named is in the bucket (every write
	// of the caller's up to it acknowledged), so Named is what the next
	// owner would restore. An owner's unacknowledged event may name an
	// entry elsewhere while the bucket's state still names one at At.
	Replicated bool
	Gen        uint64 // the caller's hold's generation
	// Fenced: the caller has uploaded something of its own under this hold
	// (an event's segment, a snapshot, or the one-line owner_fence change),
	// so its state ends the history and no earlier owner's upload landing
	// late can name an entry after all (book ADR 0009, R2).
	Fenced bool
	// BucketHadNothing: the hold's restore found nothing in the bucket for
	// the actor (and, if Fenced is false, nothing was uploaded since). A
	// joining node's first snapshot may still land and name an entry at
	// this time (R4), and fencing would create the actor in the bucket,
	// empty, over that node's data: such an owner removes nothing.
	BucketHadNothing bool
}

var (
	// ErrNotFenced: the caller has uploaded nothing under its hold; it
	// uploads the owner_fence change (at most once per hold) and calls
	// RemoveStale again with Fenced.
	ErrNotFenced = errors.New("alarmindex: stale entries are removed only after the hold's first upload (owner_fence)")
	// ErrNotReplicated: the caller's state is not yet in the bucket; it
	// removes stale entries once its event is replicated.
	ErrNotReplicated = errors.New("alarmindex: stale entries are removed only once the state naming the alarm's entry is replicated")
	// ErrBucketHadNothing: the bucket had nothing for the actor and the
	// caller uploaded nothing since; it neither removes nor fences, retries
	// the entry after the longest backoff (5 min) and releases the actor
	// at once (book ADR 0009, R2).
	ErrBucketHadNothing = errors.New("alarmindex: the bucket had nothing for the actor; its entries stay")
)

// Removal is what RemoveStale did with each key at the time.
type Removal struct {
	Removed []Key    // deleted (or already gone)
	Spared  []Key    // the entry the database names
	Newer   []Key    // a generation above the caller's (R3)
	Unknown []string // keys in the folder that are not entries, left alone
}

// RemoveStale removes the actor's entries at s.At that the database does
// not name (R2), none above the caller's generation (R3), and only when
// the caller may: replicated (else ErrNotReplicated) and fenced (else
// ErrNotFenced, or ErrBucketHadNothing when the bucket had nothing for the
// actor). It costs one listing of the
// actor's entries at that time. The caller calls it for a delivered time
// that does not match the committed alarm, after that alarm is listed and
// recorded, and also for an actor with no state (s.Named none: deleted
// since, or never initialised), without running it. It stops at the first
// delete that fails; the next delivery tries again.
func RemoveStale(ctx context.Context, b bucket.Bucket, s Stale) (Removal, error) {
	var r Removal
	switch {
	case !s.Replicated:
		return r, ErrNotReplicated
	case s.Fenced:
	case s.BucketHadNothing:
		if !bugs.ClearWithoutHistory {
			return r, ErrBucketHadNothing
		}
	case !bugs.SkipAlarmFence:
		return r, ErrNotFenced
	}
	if s.Gen == 0 {
		return r, errors.New("alarmindex: removing stale entries under generation 0")
	}
	// The folder is the key of any entry at s.At without its tag.
	probe, err := KeyFor(s.Actor, s.At, Tag{Gen: 1})
	if err != nil {
		return r, err
	}
	folder := actorAt(probe.Tenant, probe.Class, probe.Name, probe.At)
	entries, err := bucket.ListAll(ctx, b, folder)
	if err != nil {
		return r, fmt.Errorf("alarmindex: listing %s's entries at %d: %w", s.Actor, s.At, err)
	}
	for _, e := range entries {
		k, err := ParseKey(e.Key)
		if err != nil || k.Name != probe.Name || k.At != s.At {
			r.Unknown = append(r.Unknown, e.Key)
			continue
		}
		switch {
		case k.Indexed() == s.Named:
			r.Spared = append(r.Spared, k)
			continue
		case k.Tag.Gen > s.Gen && !bugs.SkipAlarmGenCheck:
			r.Newer = append(r.Newer, k)
			continue
		}
		if err := b.Delete(ctx, e.Key, bucket.Condition{}); err != nil && !errors.Is(err, bucket.ErrNotFound) {
			return r, fmt.Errorf("alarmindex: removing the stale entry %s: %w", k, err)
		}
		r.Removed = append(r.Removed, k)
	}
	return r, nil
}

// maxBody bounds the read of an entry's body: a name of at most 256
// bytes.
const maxBody = 256

// ResolveActor is the actor an entry names: from its key, or, when the
// key holds only a shortened name, from the entry's body (one GET). An
// entry deleted meanwhile is bucket.ErrNotFound: there is nothing left to
// deliver.
func ResolveActor(ctx context.Context, b bucket.Bucket, k Key) (history.Actor, error) {
	a, hashed, err := k.Actor()
	if err != nil || !hashed {
		return a, err
	}
	obj, err := b.Get(ctx, k.String(), bucket.GetOptions{})
	if err != nil {
		return history.Actor{}, fmt.Errorf("alarmindex: reading the name in %s: %w", k, err)
	}
	defer obj.Body.Close()
	body, err := io.ReadAll(io.LimitReader(obj.Body, maxBody+1))
	if err != nil {
		return history.Actor{}, fmt.Errorf("alarmindex: reading the name in %s: %w", k, err)
	}
	a.Name = string(body)
	if enc, err := history.EncodeName(a.Name); err != nil || enc != k.Name {
		return history.Actor{}, fmt.Errorf("alarmindex: %s holds a name that is not the key's", k)
	}
	return a, nil
}
