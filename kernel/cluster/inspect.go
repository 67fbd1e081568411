package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
)

// ActorsRoot is where every actor's history lives under its app's state
// root.
const ActorsRoot = "actors/"

// Stored is one actor's history as the bucket lists it: what `wasmkeep
// bucket ls` shows and `bucket verify` checks.
type Stored struct {
	App           app.Name // whose state root it is under
	Tenant, Class string
	Name          string // decoded; for a shortened name, its encoded key segment
	Hashed        bool   // the name was shortened: the key holds its prefix and a hash
	Prefix        string // under the app's state root
	Listing       history.Listing
}

// String is tenant/class/name.
func (s Stored) String() string { return s.Tenant + "/" + s.Class + "/" + s.Name }

// Apps lists the apps with actor state in b, the shared root: those with a
// key under app.StatePrefix, sorted by tenant and app. It lists all of
// state/: for an operator's command, not a request's path. A key under
// state/ that is under no app's root is an error naming it.
func Apps(ctx context.Context, b bucket.Bucket) ([]app.Name, error) {
	entries, err := bucket.ListAll(ctx, b, app.StatePrefix)
	if err != nil {
		return nil, err
	}
	seen := map[app.Name]bool{}
	for _, e := range entries {
		parts := strings.SplitN(strings.TrimPrefix(e.Key, app.StatePrefix), "/", 3)
		a := app.Name{Tenant: parts[0]}
		if len(parts) == 3 {
			a.App = parts[1]
		}
		if len(parts) < 3 || a.Check() != nil {
			return nil, fmt.Errorf("bucket key %q is under %s but not under an app's root (%s<tenant>/<app>/)", e.Key, app.StatePrefix, app.StatePrefix)
		}
		seen[a] = true
	}
	out := make([]app.Name, 0, len(seen))
	for a := range seen {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

// ListStored lists every actor of app a with objects under ActorsRoot in
// its state root in b, the shared root, sorted by tenant, class and name.
// It lists the whole root: for an operator's command, not a request's
// path. A key under the root that is not under an actor's prefix is an
// error naming it.
func ListStored(ctx context.Context, b bucket.Bucket, a app.Name) ([]Stored, error) {
	entries, err := bucket.ListAll(ctx, bucket.Under(b, a.StateRoot()), ActorsRoot)
	if err != nil {
		return nil, err
	}
	byPrefix := map[string][]bucket.Entry{}
	for _, e := range entries {
		parts := strings.SplitN(strings.TrimPrefix(e.Key, ActorsRoot), "/", 4)
		if len(parts) < 4 {
			return nil, fmt.Errorf("bucket key %q is under %s but not under an actor's prefix (tenant/class/name/)", a.StateRoot()+e.Key, a.StateRoot()+ActorsRoot)
		}
		p := ActorsRoot + strings.Join(parts[:3], "/") + "/"
		byPrefix[p] = append(byPrefix[p], e)
	}
	out := make([]Stored, 0, len(byPrefix))
	for p, es := range byPrefix {
		parts := strings.Split(strings.TrimPrefix(p, ActorsRoot), "/")
		name, hashed, err := history.DecodeName(parts[2])
		if err != nil {
			return nil, fmt.Errorf("bucket prefix %q: %w", a.StateRoot()+p, err)
		}
		l, err := history.ParseListing(p, es)
		if err != nil {
			return nil, err
		}
		out = append(out, Stored{App: a, Tenant: parts[0], Class: parts[1], Name: name, Hashed: hashed, Prefix: p, Listing: l})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Prefix < out[j].Prefix })
	return out, nil
}

// HistoryGeneration is the highest generation of the actor's history in
// the bucket, 0 for none: ownership's floor for an actor with no record
// (ownership.Config.Floor). b is the app's state view.
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
// fails is returned as it is. b is the shared root.
func Verify(ctx context.Context, b bucket.Bucket, s Stored, dir string) (history.Plan, error) {
	b = bucket.Under(b, s.App.StateRoot())
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
