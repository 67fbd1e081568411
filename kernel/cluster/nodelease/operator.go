package nodelease

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// OperatorDid is what FenceByOperator did.
type OperatorDid int

const (
	FencedLive       OperatorDid = iota // a live object replaced by a fence keeping its instance, seq and written_at
	FencedAbsent                        // no object: a fence created, with no instance
	FencedUnreadable                    // an object that is not format 3 replaced by a fence, with no instance
	WasFenced                           // already fenced: left as it was
	WasReleased                         // released by a clean stop: left as it was
	WasForgotten                        // forgotten (cluster forget): no process runs under it, left as it was
)

var operatorNames = [...]string{"fenced", "fence created", "unreadable object fenced", "already fenced", "already released", "forgotten"}

func (d OperatorDid) String() string { return operatorNames[d] }

// OperatorFence is what FenceByOperator did, and nodes/<id> as it left it.
type OperatorFence struct {
	Did    OperatorDid
	Object Object // the object now: its WrittenAt + ttl + grace is when the node's actors are free
	// Unreadable is why the object FencedUnreadable replaced was not a
	// node lease.
	Unreadable error
}

// operatorTries bounds FenceByOperator's decisions: each conflict (the
// node renewed, or another writer came first) reads and decides again.
const operatorTries = 8

// FenceByOperator is `wasmkeep cluster fence` (book ADR 0020 section 2,
// Security model "Revocation"): the operator's fence over nodes/<id>,
// without the watch a peer needs, since the time bound alone keeps it
// safe. now is the operator's clock. On one versioned read it decides:
//
//   - live: replaced If-Match its version by a fence keeping its instance,
//     seq and written_at; the process exits at its next write, and its
//     actors are free at that written_at + ttl + grace;
//   - fenced, released or forgotten: left as it is (already not live);
//   - absent: created If-None-Match: * as a fence with no instance, dated
//     by the bucket's own time for that write but never earlier than now;
//   - not a format-3 object: replaced If-Match its version by a fence with
//     no instance, dated as for an absent one.
//
// A conflict reads and decides again, at most operatorTries times.
func FenceByOperator(ctx context.Context, b bucket.Bucket, id string, now time.Time) (OperatorFence, error) {
	if err := CheckNodeID(id); err != nil {
		return OperatorFence{}, err
	}
	for range operatorTries {
		r, err := ReadObject(ctx, b, id)
		if err != nil {
			return OperatorFence{}, fmt.Errorf("reading nodes/%s: %w", id, err)
		}
		var out OperatorFence
		switch {
		case r.Found && r.Err == nil && r.Object.State == Fenced:
			return OperatorFence{Did: WasFenced, Object: r.Object}, nil
		case r.Found && r.Err == nil && r.Object.State == Released:
			return OperatorFence{Did: WasReleased, Object: r.Object}, nil
		case r.Found && r.Err == nil && r.Object.State == Forgotten:
			return OperatorFence{Did: WasForgotten, Object: r.Object}, nil
		case r.Found && r.Err == nil:
			o := r.Object
			o.State = Fenced
			_, err = writeObject(ctx, b, id, o, bucket.Condition{IfVersion: r.Version})
			out = OperatorFence{Did: FencedLive, Object: o}
		default:
			out, err = createFence(ctx, b, id, r, now)
		}
		if errors.Is(err, bucket.ErrPrecondition) {
			continue // nodes/<id> changed since it was read: decide again
		}
		if err != nil {
			return out, fmt.Errorf("fencing nodes/%s: %w", id, err)
		}
		return out, nil
	}
	return OperatorFence{}, fmt.Errorf("nodes/%s changed under each of %d tries to fence it", id, operatorTries)
}

// MarkForgotten is `wasmkeep cluster forget`'s only write (ADR 1041): the
// format-3 object r read replaced, If-Match r's version, by the same
// object marked forgotten (instance, seq and written_at kept). It is
// ErrPrecondition when nodes/<id> changed since r: a process that started
// with the id meanwhile keeps its lease. Nothing deletes a node lease: a
// delete cannot be conditioned on every store, and one that landed after
// such a start would take that process's live lease.
func MarkForgotten(ctx context.Context, b bucket.Bucket, id string, r Read) (Object, error) {
	if !r.Found || r.Err != nil {
		return Object{}, fmt.Errorf("nodes/%s: only a node lease read whole can be marked forgotten", id)
	}
	o := r.Object
	o.State = Forgotten
	_, err := writeObject(ctx, b, id, o, bucket.Condition{IfVersion: r.Version})
	return o, err
}

// createFence writes a fence with no instance where r found no node lease
// (If-None-Match: *) or one that is not format 3 (If-Match its version),
// dated now, then by the bucket's time for that write if it is later.
// ErrPrecondition: nodes/<id> changed since r. An error after the write
// returns the fence as written, dated by now alone.
func createFence(ctx context.Context, b bucket.Bucket, id string, r Read, now time.Time) (OperatorFence, error) {
	out := OperatorFence{Did: FencedAbsent, Object: Object{State: Fenced, WrittenAt: truncMS(now)}}
	cond := bucket.Condition{IfAbsent: true}
	if r.Found {
		out.Did, out.Unreadable, cond = FencedUnreadable, r.Err, bucket.Condition{IfVersion: r.Version}
	}
	if _, err := writeObject(ctx, b, id, out.Object, cond); err != nil {
		return OperatorFence{}, err
	}
	var err error
	for range 3 { // a read or write that failed is tried again
		var dated Object
		if dated, err = dateByBucket(ctx, b, id, out.Object); err == nil || errors.Is(err, bucket.ErrPrecondition) {
			out.Object = dated
			return out, err
		}
	}
	return out, fmt.Errorf("a fence dated %s by this machine's clock was written, but not checked against the bucket's time (if this clock is behind, the node's actors may be freed early): %w",
		at(out.Object.WrittenAt), err)
}

// dateByBucket moves the date of a fence createFence wrote (dated by the
// operator's clock) to the bucket's own time for that write when the
// bucket's is later: the object is read back and, if its modification
// time is after the fence's written_at, rewritten If-Match with that time. A time in whole seconds (S3's Last-Modified) may have
// been cut down to the second, so it counts as the end of that second.
// ErrPrecondition: the object changed since the fence was written.
func dateByBucket(ctx context.Context, b bucket.Bucket, id string, o Object) (Object, error) {
	r, err := ReadObject(ctx, b, id)
	switch {
	case err != nil:
		return o, fmt.Errorf("reading the fence back for the bucket's time: %w", err)
	case !r.Found || !bytes.Equal(r.Body, o.Encode()):
		return o, fmt.Errorf("nodes/%s changed after the fence was written: %w", id, bucket.ErrPrecondition)
	}
	t := BucketTime(r.ModTime)
	if !t.After(o.WrittenAt) {
		return o, nil
	}
	o.WrittenAt = t
	_, err = writeObject(ctx, b, id, o, bucket.Condition{IfVersion: r.Version})
	return o, err
}

// BucketTime is the latest moment a modification time the bucket gave
// may stand for, in whole milliseconds rounded up: a time in whole seconds
// (S3's Last-Modified) counts as the end of its second.
func BucketTime(mod time.Time) time.Time {
	if mod.Nanosecond() == 0 {
		return time.UnixMilli(mod.Add(time.Second - time.Millisecond).UnixMilli())
	}
	return time.UnixMilli(mod.Add(time.Millisecond - 1).UnixMilli())
}

func at(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }
