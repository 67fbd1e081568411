package cluster

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
)

// A move request (book ADR 0017, as revised by its ADR 0022; ADR 1052)
// is an empty object under the app's own root, the state an app owns
// (Member.State), since an actor's name is its app's: only that app's
// nodes list them, and deleting the app deletes them. `wasmkeep actor
// move` writes one; the nodes of the app list them once per lease
// period, act on them, and delete them once done, dropped or older than
// MoveExpiry. They decide no ownership: the take call does.

// MovePrefix is where an app's move requests are, under its root.
const MovePrefix = "control/move/"

// MoveExpiry is how long a move request is tried (by the bucket's
// last-modified time): the node that lists one older deletes it.
const MoveExpiry = 5 * time.Minute

// Move is one move request: class's actor name to node Target.
type Move struct {
	Key         string
	Class, Name string
	Target      string
	Written     time.Time      // the bucket's last-modified time
	Version     bucket.Version // as listed: DropMove deletes only that
}

// MoveKey is the key of the request to move class's actor name to
// target: control/move/CLASS/NAME in hex/TARGET, so any name fits one
// segment, and a new target is a new key.
func MoveKey(class, name, target string) string {
	return MovePrefix + class + "/" + hex.EncodeToString([]byte(name)) + "/" + target
}

// RequestMove writes the request to move class's actor name to target in
// state, the app's root (again, if it is there).
func RequestMove(ctx context.Context, state bucket.Bucket, class, name, target string) (string, error) {
	if err := nodelease.CheckNodeID(target); err != nil {
		return "", err
	}
	if class == "" || strings.Contains(class, "/") {
		return "", errors.New("a class name has no /")
	}
	key := MoveKey(class, name, target)
	_, err := state.Put(ctx, key, bytes.NewReader(nil), 0, bucket.Condition{})
	return key, err
}

// ListMoves lists the move requests in state; a key that is not one (no
// node wrote it so) is left out.
func ListMoves(ctx context.Context, state bucket.Bucket) ([]Move, error) {
	entries, err := bucket.ListAll(ctx, state, MovePrefix)
	if err != nil {
		return nil, err
	}
	var out []Move
	for _, e := range entries {
		parts := strings.Split(strings.TrimPrefix(e.Key, MovePrefix), "/")
		if len(parts) != 3 || parts[0] == "" || nodelease.CheckNodeID(parts[2]) != nil {
			continue
		}
		name, err := hex.DecodeString(parts[1])
		if err != nil || len(name) == 0 {
			continue
		}
		out = append(out, Move{Key: e.Key, Class: parts[0], Name: string(name), Target: parts[2], Written: e.ModTime, Version: e.Version})
	}
	return out, nil
}

// DropMove deletes the move request mv at the version listed, so that
// one written again since under the same key stays: that is
// bucket.ErrPrecondition. One gone already is no error. The condition is
// a best effort: a store may ignore it, or refuse it (then the request is
// deleted unconditionally), and a request lost so is only a move to ask
// again, since a request decides no ownership.
func DropMove(ctx context.Context, state bucket.Bucket, mv Move) error {
	err := state.Delete(ctx, mv.Key, bucket.Condition{IfVersion: mv.Version})
	if err != nil && !errors.Is(err, bucket.ErrNotFound) && !errors.Is(err, bucket.ErrPrecondition) {
		err = state.Delete(ctx, mv.Key, bucket.Condition{})
	}
	if errors.Is(err, bucket.ErrNotFound) {
		return nil
	}
	return err
}
