package deploys

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/node/access"
	"github.com/wasmkeep/wasmkeep/kernel/node/envfile"
)

// Draft is what a deploy names; everything else is kept from the current
// version (book ADR 0013: a CI job that never knew about a rule must not
// drop it).
type Draft struct {
	// Classes is the new class table, class to module bytes; nil keeps
	// the current classes (their objects copied within the bucket).
	// Classes it leaves out go, with their rules and configuration.
	Classes map[string][]byte
	// Front is a new front (the stateless component); nil keeps the
	// current one, unless DropFront.
	Front     []byte
	DropFront bool
	// Access sets classes' rules; access.Open removes one.
	Access map[string]access.Access
	// Config sets classes' configuration; a nil map removes a class's.
	Config map[string]map[string]string
	// Requires sets the names a class needs; an empty list removes them.
	Requires map[string][]string
	// Expire sets classes' expire-after-idle; 0 removes one.
	Expire map[string]time.Duration
	// SeqFloor, if above the next seq, is the new seq: after current was
	// lost, a seq above every one the nodes served (actors record them), so
	// no older version runs on their data.
	SeqFloor uint64
}

// Result is what a deploy or rollback did.
type Result struct {
	From     Current  // the current it started from; zero for the first deploy
	To       Current  // current now
	NoOp     bool     // the version named is the current one: nothing written
	Changes  []string // what changed, one line each: names, never values
	Warnings []string
}

// Publish makes a version of the current one changed as d says and makes
// it current with the next seq (or d.SeqFloor, if higher): the version's
// objects first, created IfAbsent, then current swapped IfVersion the one
// read (IfAbsent for the first), so a concurrent deploy fails with
// ErrConflict instead of being lost. A version identical to the current
// one is a no-op. A current naming a missing version is replaced by a
// draft giving the whole class table, as a first version. A first deploy
// of an app that has other version directories is refused without
// d.SeqFloor: current was lost, and seq 1 could be below what actors
// recorded.
func Publish(ctx context.Context, b bucket.Bucket, a app.Name, d Draft) (Result, error) {
	if err := RefuseDeleted(ctx, b, a); err != nil {
		return Result{}, err
	}
	k := keysOf(a)
	cur, tok, found, err := readCurrent(ctx, b, k)
	if err != nil {
		return Result{}, err
	}
	res := Result{From: cur, To: cur}
	base, missing := Manifest{}, false
	switch {
	case found:
		base, _, err = readManifest(ctx, b, k, cur.Version)
		missing = errors.Is(err, ErrMissingVersion)
		switch {
		case missing && d.Classes != nil:
			base = Manifest{}
			res.Warnings = append(res.Warnings, fmt.Sprintf("current named version %s, which is not in the bucket: the new version replaces it with no previous, so it cannot be rolled back to", cur.Version))
		case missing:
			return Result{}, fmt.Errorf("the current version: %w: nothing to keep classes from; deploy the whole class table again (--actor for each class)", err)
		case err != nil:
			return Result{}, fmt.Errorf("the current version: %w", err)
		}
	}
	m, err := d.apply(base)
	if err != nil {
		return Result{}, err
	}
	kept := found && !missing // base is the current version
	if kept {
		m.Previous = cur.Version
	}
	if !found && d.SeqFloor == 0 {
		if err := refuseLostCurrent(ctx, b, a, k, m.ID()); err != nil {
			return Result{}, err
		}
	}
	if kept && m.Identity() == base.Identity() {
		res.NoOp = true
		return res, nil
	}
	id := m.ID()
	if err := d.upload(ctx, b, k, cur.Version, base, id, m); err != nil {
		return Result{}, err
	}
	changed, warnings, err := changes(ctx, b, k, cur.Version, base, id, m)
	if err != nil {
		return Result{}, err
	}
	res.Changes, res.Warnings = changed, append(res.Warnings, warnings...)
	res.To = Current{Version: id, Seq: max(cur.Seq+1, d.SeqFloor)}
	cond := bucket.Condition{IfAbsent: true}
	if found {
		cond = bucket.Condition{IfVersion: tok}
	}
	return res, swapCurrent(ctx, b, k, res.To, cond)
}

// refuseLostCurrent refuses a first deploy of an app that has version
// directories other than id's (this deploy's, left by a try that stopped
// half-way): its current was deleted or restored from an older backup,
// and seq 1 could be below the seq its actors recorded. Every key is
// looked at: a listing's order across "/" is the store's.
func refuseLostCurrent(ctx context.Context, b bucket.Bucket, a app.Name, k keys, id string) error {
	entries, err := bucket.ListAll(ctx, b, k.root)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if v, ok := k.versionDir(e.Key); ok && v != id {
			return fmt.Errorf("app %s has versions in the bucket (%s) but no %s: it was deleted, or restored from an older backup (or another first deploy is writing one). "+
				"A new deploy would start again at seq 1, perhaps below the seq its actors recorded, and older code could then run on their data: "+
				"give --seq-floor above every seq the nodes served (SERVING in wasmkeep cluster status)", a, k.dir(v), k.current())
		}
	}
	return nil
}

// apply is base changed as d says, without previous.
func (d Draft) apply(base Manifest) (Manifest, error) {
	m := Manifest{Front: base.Front, Classes: maps.Clone(base.Classes), Access: map[string]access.Access{}, Config: map[string]string{}, Requires: map[string][]string{},
		Expire: map[string]time.Duration{}}
	if d.Classes != nil {
		m.Classes = map[string]string{}
		for _, c := range slices.Sorted(maps.Keys(d.Classes)) {
			if err := underCap("class "+c+"'s module", len(d.Classes[c]), maxModule); err != nil {
				return m, err
			}
			m.Classes[c] = Digest(d.Classes[c])
		}
	}
	switch {
	case d.DropFront:
		m.Front = ""
	case d.Front != nil:
		if err := underCap("the front's module", len(d.Front), maxModule); err != nil {
			return m, err
		}
		m.Front = Digest(d.Front)
	}
	// What the new table keeps of the base's rules and configuration.
	for c := range m.Classes {
		if r, ok := base.Access[c]; ok {
			m.Access[c] = r
		}
		if cfg, ok := base.Config[c]; ok {
			m.Config[c] = cfg
		}
		if req, ok := base.Requires[c]; ok {
			m.Requires[c] = req
		}
		if d, ok := base.Expire[c]; ok {
			m.Expire[c] = d
		}
	}
	for _, c := range slices.Sorted(maps.Keys(d.Expire)) {
		if err := m.named(c, "an expire-after-idle"); err != nil {
			return m, err
		}
		if d.Expire[c] == 0 {
			delete(m.Expire, c)
		} else {
			m.Expire[c] = d.Expire[c]
		}
	}
	for _, c := range slices.Sorted(maps.Keys(d.Access)) {
		if err := m.named(c, "an access rule"); err != nil {
			return m, err
		}
		if r := d.Access[c]; r.Mode == access.Open {
			delete(m.Access, c)
		} else {
			m.Access[c] = r
		}
	}
	for _, c := range slices.Sorted(maps.Keys(d.Config)) {
		if err := m.named(c, "configuration"); err != nil {
			return m, err
		}
		if vars := d.Config[c]; vars == nil {
			delete(m.Config, c)
		} else {
			data := envfile.Format(vars)
			if err := underCap("class "+c+"'s configuration", len(data), maxConfig); err != nil {
				return m, err
			}
			m.Config[c] = Digest(data)
		}
	}
	for _, c := range slices.Sorted(maps.Keys(d.Requires)) {
		if err := m.named(c, "required names"); err != nil {
			return m, err
		}
		if names := d.Requires[c]; len(names) == 0 {
			delete(m.Requires, c)
		} else {
			m.Requires[c] = slices.Compact(slices.Sorted(slices.Values(names)))
		}
	}
	return m, m.Check()
}

// underCap refuses what nodes would refuse to read (store.go's caps).
func underCap(what string, size int, max int64) error {
	if int64(size) > max {
		return fmt.Errorf("%s is %d bytes, over the %d a node reads: refused", what, size, max)
	}
	return nil
}

// named refuses what a deploy gives for a class the new version does not
// have: a typo would leave the real class open or unconfigured.
func (m Manifest) named(class, what string) error {
	if _, ok := m.Classes[class]; !ok {
		return fmt.Errorf("%s for class %q, which the new version does not have (its classes: %s)",
			what, class, strings.Join(slices.Sorted(maps.Keys(m.Classes)), ", "))
	}
	return nil
}

// upload writes version id's objects, manifest last: what d gives, and what
// it keeps copied from the base version baseID, its digests checked.
func (d Draft) upload(ctx context.Context, b bucket.Bucket, k keys, baseID string, base Manifest, id string, m Manifest) error {
	copyOr := func(given []byte, from, to, digest string, max int64) error {
		data := given
		if data == nil {
			var err error
			if data, err = readArtifact(ctx, b, from, digest, max); err != nil {
				return fmt.Errorf("copying from the current version: %w", err)
			}
		}
		return putImmutable(ctx, b, to, data)
	}
	if m.Front != "" {
		if err := copyOr(d.Front, k.front(baseID), k.front(id), m.Front, maxModule); err != nil {
			return err
		}
	}
	for _, c := range slices.Sorted(maps.Keys(m.Classes)) {
		if err := copyOr(d.Classes[c], k.module(baseID, c), k.module(id, c), m.Classes[c], maxModule); err != nil {
			return err
		}
	}
	for _, c := range slices.Sorted(maps.Keys(m.Config)) {
		var given []byte
		if vars, ok := d.Config[c]; ok {
			given = envfile.Format(vars)
		}
		if err := copyOr(given, k.config(baseID, c), k.config(id, c), m.Config[c], maxConfig); err != nil {
			return err
		}
	}
	return putImmutable(ctx, b, k.manifest(id), m.Format())
}

// changes says what going from version fromID (manifest from; "" for
// none) to toID changes, both in the bucket: classes, rules and the names
// of configuration values, never a value.
func changes(ctx context.Context, b bucket.Bucket, k keys, fromID string, from Manifest, toID string, to Manifest) (lines, warnings []string, err error) {
	if from.Front != to.Front {
		lines = append(lines, "front: "+change(from.Front != "", to.Front != ""))
	}
	var removedRuled, added []string
	all := maps.Clone(to.Classes)
	maps.Copy(all, from.Classes)
	for _, c := range slices.Sorted(maps.Keys(all)) {
		old, had := from.Classes[c]
		now, has := to.Classes[c]
		switch {
		case !had:
			added = append(added, c)
			lines = append(lines, "class "+c+": added")
		case !has && from.Access[c].Mode != access.Open:
			lines = append(lines, fmt.Sprintf("class %s: removed, and its rule %s with it", c, from.Access[c]))
			removedRuled = append(removedRuled, c)
		case !has:
			lines = append(lines, "class "+c+": removed")
		case old != now:
			lines = append(lines, "class "+c+": new code")
		}
		if had && has || !had && to.Access[c].Mode != access.Open {
			if r0, r1 := from.Access[c], to.Access[c]; r0.String() != r1.String() {
				lines = append(lines, fmt.Sprintf("access %s: %s -> %s", c, r0, r1))
			}
		}
		if e0, e1 := from.Expire[c], to.Expire[c]; has && e0 != e1 {
			lines = append(lines, fmt.Sprintf("expire-after-idle %s: %s -> %s", c, idleOrNone(e0), idleOrNone(e1)))
		}
		if r0, r1 := strings.Join(from.Requires[c], ","), strings.Join(to.Requires[c], ","); has && r0 != r1 {
			lines = append(lines, fmt.Sprintf("requires %s: %s -> %s", c, orNone(r0), orNone(r1)))
		}
		if d0, d1 := from.Config[c], to.Config[c]; has && d0 != d1 {
			var v0, v1 map[string]string
			if d0 != "" {
				if v0, err = readConfig(ctx, b, k.config(fromID, c), d0); err != nil {
					return nil, nil, err
				}
			}
			if d1 != "" {
				if v1, err = readConfig(ctx, b, k.config(toID, c), d1); err != nil {
					return nil, nil, err
				}
			}
			lines = append(lines, "config "+c+": "+configChange(v0, v1))
		}
	}
	if len(removedRuled) > 0 && len(added) > 0 {
		for _, c := range added {
			if to.Access[c].Mode == access.Open {
				warnings = append(warnings, fmt.Sprintf("class %s is new and open, while %s, removed, had a rule: if it is a rename, give it --access", c, strings.Join(removedRuled, ", ")))
			}
		}
	}
	return lines, warnings, nil
}

func idleOrNone(d time.Duration) string {
	if d == 0 {
		return "none"
	}
	return d.String()
}

func change(had, has bool) string {
	switch {
	case !had:
		return "added"
	case !has:
		return "removed"
	}
	return "new code"
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// configChange names the values added, changed and removed.
func configChange(old, now map[string]string) string {
	var added, changed, removed []string
	for _, n := range slices.Sorted(maps.Keys(now)) {
		v, ok := old[n]
		switch {
		case !ok:
			added = append(added, n)
		case v != now[n]:
			changed = append(changed, n)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(old)) {
		if _, ok := now[n]; !ok {
			removed = append(removed, n)
		}
	}
	var parts []string
	for _, p := range []struct {
		what  string
		names []string
	}{{"added", added}, {"changed", changed}, {"removed", removed}} {
		if len(p.names) > 0 {
			parts = append(parts, p.what+" "+strings.Join(p.names, ", "))
		}
	}
	return strings.Join(parts, "; ")
}

// Rollback makes the current version's previous current again, with the
// next seq (seq never goes back, so nodes take it as any deploy). One that
// would make a class more open is refused unless allowReopen.
func Rollback(ctx context.Context, b bucket.Bucket, a app.Name, allowReopen bool) (Result, error) {
	if err := RefuseDeleted(ctx, b, a); err != nil {
		return Result{}, err
	}
	k := keysOf(a)
	cur, tok, found, err := readCurrent(ctx, b, k)
	if err != nil {
		return Result{}, err
	}
	if !found {
		return Result{}, fmt.Errorf("app %s: %w", a, ErrNothingDeployed)
	}
	m, _, err := readManifest(ctx, b, k, cur.Version)
	if errors.Is(err, ErrMissingVersion) {
		return Result{}, fmt.Errorf("the current version: %w: there is nothing to roll back from or to; deploy the app's classes again (--actor for each class)", err)
	}
	if err != nil {
		return Result{}, fmt.Errorf("the current version: %w", err)
	}
	if m.Previous == "" {
		return Result{}, fmt.Errorf("app %s: version %s is its first: there is nothing to roll back to", a, cur.Version)
	}
	prev, _, err := readManifest(ctx, b, k, m.Previous)
	if err != nil {
		return Result{}, fmt.Errorf("the previous version: %w", err)
	}
	if reopened := reopens(m, prev); len(reopened) > 0 && !allowReopen {
		return Result{}, fmt.Errorf("rolling back to %s makes classes more open (%s): give --allow-reopen to do it anyway",
			m.Previous, strings.Join(reopened, "; "))
	}
	res := Result{From: cur, To: Current{Version: m.Previous, Seq: cur.Seq + 1}}
	if res.Changes, res.Warnings, err = changes(ctx, b, k, cur.Version, m, m.Previous, prev); err != nil {
		return Result{}, err
	}
	return res, swapCurrent(ctx, b, k, res.To, bucket.Condition{IfVersion: tok})
}

// reopens lists the classes of both versions that to makes more open
// than from: existing to open, internal to anything else, an existing:
// list that grows.
func reopens(from, to Manifest) []string {
	var out []string
	for _, c := range slices.Sorted(maps.Keys(from.Classes)) {
		if _, ok := to.Classes[c]; !ok {
			continue
		}
		r0, r1 := from.Access[c], to.Access[c]
		more := r0.Mode == access.Internal && r1.Mode != access.Internal ||
			r0.Mode == access.Existing && r1.Mode == access.Open ||
			r0.Mode == access.Existing && r1.Mode == access.Existing && slices.ContainsFunc(r1.Create, func(n string) bool { return !slices.Contains(r0.Create, n) })
		if more {
			out = append(out, fmt.Sprintf("%s: %s -> %s", c, r0, r1))
		}
	}
	return out
}
