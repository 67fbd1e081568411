package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
)

// ActorsRoot is where every actor's history lives in the bucket.
const ActorsRoot = "actors/"

// Stored is one actor's history as the bucket lists it: what `wasmkeep
// bucket ls` shows and `bucket verify` checks.
type Stored struct {
	Tenant, Class string
	Name          string // decoded; for a shortened name, its encoded key segment
	Hashed        bool   // the name was shortened: the key holds its prefix and a hash
	Prefix        string
	Listing       history.Listing
}

// String is tenant/class/name.
func (s Stored) String() string { return s.Tenant + "/" + s.Class + "/" + s.Name }

// ListStored lists every actor with objects under ActorsRoot (of one
// tenant, unless tenant is ""), sorted by tenant, class and name. It lists
// the whole root: for an operator's command, not a request's path. A key
// under the root that is not under an actor's prefix is an error naming it.
func ListStored(ctx context.Context, b bucket.Bucket, tenant string) ([]Stored, error) {
	root := ActorsRoot
	if tenant != "" {
		root += tenant + "/"
	}
	entries, err := bucket.ListAll(ctx, b, root)
	if err != nil {
		return nil, err
	}
	byPrefix := map[string][]bucket.Entry{}
	for _, e := range entries {
		parts := strings.SplitN(strings.TrimPrefix(e.Key, ActorsRoot), "/", 4)
		if len(parts) < 4 {
			return nil, fmt.Errorf("bucket key %q is under %s but not under an actor's prefix (tenant/class/name/)", e.Key, ActorsRoot)
		}
		p := ActorsRoot + strings.Join(parts[:3], "/") + "/"
		byPrefix[p] = append(byPrefix[p], e)
	}
	out := make([]Stored, 0, len(byPrefix))
	for p, es := range byPrefix {
		parts := strings.Split(strings.TrimPrefix(p, ActorsRoot), "/")
		name, hashed, err := history.DecodeName(parts[2])
		if err != nil {
			return nil, fmt.Errorf("bucket prefix %q: %w", p, err)
		}
		l, err := history.ParseListing(p, es)
		if err != nil {
			return nil, err
		}
		out = append(out, Stored{Tenant: parts[0], Class: parts[1], Name: name, Hashed: hashed, Prefix: p, Listing: l})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Prefix < out[j].Prefix })
	return out, nil
}

// HistoryGeneration is the highest generation of the actor's history in
// the bucket, 0 for none: ownership's floor for an actor with no record
// (ownership.Config.Floor).
func HistoryGeneration(ctx context.Context, b bucket.Bucket, a ownership.Actor) (uint64, error) {
	prefix := history.EncodedPrefix(a.Tenant, a.Class, a.Name)
	entries, err := bucket.ListAll(ctx, b, prefix)
	if err != nil {
		return 0, err
	}
	l, err := history.ParseListing(prefix, entries)
	if err != nil {
		return 0, err
	}
	return l.Generation(), nil
}

// Verify checks an actor's history as a restore would, without putting
// anything in place: the plan from its key names, then every object of the
// plan read, decoded, its file checksum and its place in the checksum
// chain checked, and applied to a scratch database in dir (removed after).
// A history that cannot be restored is a *history.BrokenError; a read that
// fails is returned as it is.
func Verify(ctx context.Context, b bucket.Bucket, s Stored, dir string) (history.Plan, error) {
	plan, err := history.PlanRestore(s.Listing)
	if err != nil {
		return plan, err
	}
	f, err := os.CreateTemp(dir, "wasmkeep-verify-*")
	if err != nil {
		return plan, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	err = history.Rebuild(plan, func(o history.Object) (io.ReadCloser, error) {
		obj, err := b.Get(ctx, o.Entry.Key, bucket.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", o.Entry.Key, err)
		}
		return obj.Body, nil
	}, f)
	return plan, err
}
