// Package deletes holds an operator's delete requests (book ADR 0028,
// section 3; ADR 1053): `wasmkeep actor delete` writes one, the nodes of
// the app list them and the actor's holder, or a node that takes the
// actor when nobody holds it, carries it out and writes its outcome
// beside it. The command line never calls a node. Keys are on the app's
// state view (bucket.Under the app's state root):
//
//	deletes/<class>/<encoded name>/<id>          the request, empty
//	deletes/<class>/<encoded name>/<id>.done     carried out: the reset is in the bucket
//	deletes/<class>/<encoded name>/<id>.absent   no such actor
//
// <id> is 16 hex digits drawn for each request, so a node that carried a
// request out deletes exactly its key, and a second request for the same
// actor is never acknowledged by the first one's outcome. The request's
// last-modified time (the bucket's clock) orders the requests of one
// actor. Only an outcome acknowledges a request: its key going away alone
// proves nothing.
package deletes

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
)

// Prefix is where the requests and their outcomes are, on the app's state
// view.
const Prefix = "deletes/"

// Expiry is how long a request or an outcome stays, by its last-modified
// time: the next node that lists it after that deletes it. A request for
// a class no node serves does not wait for ever.
const Expiry = time.Hour

// Outcome is how a request ended, the suffix of the object written beside
// it.
type Outcome string

const (
	Done   Outcome = "done"   // the actor is deleted: its reset is in the bucket
	Absent Outcome = "absent" // no such actor: nothing was written
)

// Request is one delete request.
type Request struct {
	Class, Name string    // the actor (the name decoded)
	ID          string    // 16 hex digits
	At          time.Time // its last-modified time, as listed; zero before
}

// Key is the request's key.
func (r Request) Key() string {
	enc, _ := history.EncodeName(r.Name) // checked by New and List
	return Prefix + r.Class + "/" + enc + "/" + r.ID
}

// OutcomeKey is the key of the request's outcome o.
func (r Request) OutcomeKey(o Outcome) string { return r.Key() + "." + string(o) }

// Marker is what an actor's database records of the requests carried out
// on it (host meta operator_delete) once r is carried out on an actor
// whose marker was prior: r's time and id, followed by the ids of the
// others carried out at that same time (a bucket with second precision
// may give two requests one time), so none of them is carried out again
// on data written after it was acknowledged.
func (r Request) Marker(prior string) string {
	ns, ids, ok := parseMarker(prior)
	mine := r.At.UnixNano()
	switch {
	case !ok || ns < mine:
		return strconv.FormatInt(mine, 10) + " " + r.ID
	case ns > mine || slices.Contains(ids, r.ID):
		return prior
	}
	return prior + " " + r.ID
}

// CarriedOutBy reports whether marker (Marker of the requests carried out
// on the actor, "" for none) says r was carried out already: a request
// after it, or r itself among those of its time.
func (r Request) CarriedOutBy(marker string) bool {
	ns, ids, ok := parseMarker(marker)
	mine := r.At.UnixNano()
	return ok && (ns > mine || ns == mine && slices.Contains(ids, r.ID))
}

// parseMarker reads a marker's time and ids; ok is false for none.
func parseMarker(marker string) (ns int64, ids []string, ok bool) {
	at, rest, ok := strings.Cut(marker, " ")
	if !ok {
		return 0, nil, false
	}
	ns, err := strconv.ParseInt(at, 10, 64)
	return ns, strings.Fields(rest), err == nil
}

// New is a request for the actor a with a fresh id, not written yet. A
// name whose encoded form is shortened with a hash cannot be read back
// from its key, and is refused.
func New(a history.Actor) (Request, error) {
	if _, err := history.Prefix(a); err != nil { // checks every part
		return Request{}, err
	}
	enc, _ := history.EncodeName(a.Name)
	if _, hashed, err := history.DecodeName(enc); err != nil || hashed {
		return Request{}, fmt.Errorf("actor name of %d bytes: too long for a delete request (its key would be shortened)", len(a.Name))
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return Request{}, err
	}
	return Request{Class: a.Class, Name: a.Name, ID: hex.EncodeToString(id[:])}, nil
}

// Write creates r's key (empty, If-None-Match).
func Write(ctx context.Context, b bucket.Bucket, r Request) error {
	_, err := b.Put(ctx, r.Key(), bytes.NewReader(nil), 0, bucket.Condition{IfAbsent: true})
	return err
}

// Listing is what List found: the requests, and every object under
// Prefix with its time (requests and outcomes), for Expire.
type Listing struct {
	Requests []Request
	Entries  []bucket.Entry
}

// List lists the requests; keys it cannot parse are left out (and expire).
func List(ctx context.Context, b bucket.Bucket) (Listing, error) {
	entries, err := bucket.ListAll(ctx, b, Prefix)
	if err != nil {
		return Listing{}, err
	}
	l := Listing{Entries: entries}
	for _, e := range entries {
		if r, ok := parse(e.Key); ok {
			r.At = e.ModTime
			l.Requests = append(l.Requests, r)
		}
	}
	return l, nil
}

// parse reads a request's key; false for an outcome or a foreign key.
func parse(key string) (Request, bool) {
	parts := strings.Split(strings.TrimPrefix(key, Prefix), "/")
	if len(parts) != 3 || parts[0] == "" || len(parts[2]) != 16 || !isHex(parts[2]) {
		return Request{}, false
	}
	name, hashed, err := history.DecodeName(parts[1])
	if err != nil || hashed {
		return Request{}, false
	}
	return Request{Class: parts[0], Name: name, ID: parts[2]}, true
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// Expired reports whether an object listed with time at has expired by
// now.
func Expired(at, now time.Time) bool { return now.Sub(at) > Expiry }

// Expire deletes the listed objects (requests and outcomes) that expired
// by now.
func Expire(ctx context.Context, b bucket.Bucket, l Listing, now time.Time) error {
	for _, e := range l.Entries {
		if !Expired(e.ModTime, now) {
			continue
		}
		if err := b.Delete(ctx, e.Key, bucket.Condition{}); err != nil && !errors.Is(err, bucket.ErrNotFound) {
			return err
		}
	}
	return nil
}

// Finish writes r's outcome o beside it, then deletes r. If the outcome
// cannot be written the request stays, for a later pass.
func Finish(ctx context.Context, b bucket.Bucket, r Request, o Outcome) error {
	if _, err := b.Put(ctx, r.OutcomeKey(o), bytes.NewReader(nil), 0, bucket.Condition{}); err != nil {
		return fmt.Errorf("writing the outcome %s: %w", r.OutcomeKey(o), err)
	}
	if err := b.Delete(ctx, r.Key(), bucket.Condition{}); err != nil && !errors.Is(err, bucket.ErrNotFound) {
		return fmt.Errorf("deleting the request %s: %w", r.Key(), err)
	}
	return nil
}

// State is what the bucket says of a written request.
type State int

const (
	Pending State = iota // the request is there, with no outcome
	Dropped              // neither the request nor an outcome: expired, or not an actor's
	Ended                // an outcome is there (Read's Outcome)
)

// Read reads r's state: its outcome if one is there, else whether the
// request still is.
func Read(ctx context.Context, b bucket.Bucket, r Request) (State, Outcome, error) {
	for _, o := range []Outcome{Done, Absent} {
		found, err := exists(ctx, b, r.OutcomeKey(o))
		if err != nil || found {
			return Ended, o, err
		}
	}
	found, err := exists(ctx, b, r.Key())
	if err != nil || found {
		return Pending, "", err
	}
	// The outcome may have been written between the two reads.
	for _, o := range []Outcome{Done, Absent} {
		found, err := exists(ctx, b, r.OutcomeKey(o))
		if err != nil || found {
			return Ended, o, err
		}
	}
	return Dropped, "", nil
}

func exists(ctx context.Context, b bucket.Bucket, key string) (bool, error) {
	o, err := b.Get(ctx, key, bucket.GetOptions{})
	if errors.Is(err, bucket.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	o.Body.Close()
	return true, nil
}
