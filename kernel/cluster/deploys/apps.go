package deploys

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// Deployed is an app's current as cluster status shows it.
type Deployed struct {
	App     app.Name
	Current Current
	// At is when current was written (the bucket's clock): when its
	// version was deployed.
	At  time.Time
	Err error // current exists but could not be read or parsed
}

// ListDeployed lists apps/ and reads the current of every app that has
// one, sorted by app. A current that cannot be read or parsed is kept with
// its Err, naming its key, so that one bad app hides no other. It lists
// every version's objects too: for an operator's command, not a request's
// path.
func ListDeployed(ctx context.Context, b bucket.Bucket) ([]Deployed, error) {
	entries, err := bucket.ListAll(ctx, b, app.DeployPrefix)
	if err != nil {
		return nil, err
	}
	var out []Deployed
	for _, e := range entries {
		// apps/<t>/<a>/current, picked by its parts: keys under a version
		// (apps/<t>/<a>/<v>/...) have more, whatever order they list in.
		parts := strings.Split(strings.TrimPrefix(e.Key, app.DeployPrefix), "/")
		if len(parts) != 3 || parts[2] != "current" {
			continue
		}
		d := Deployed{App: app.Name{Tenant: parts[0], App: parts[1]}}
		if err := d.App.Check(); err != nil {
			d.Err = fmt.Errorf("%s: not under an app's root: %w", e.Key, err)
			out = append(out, d)
			continue
		}
		data, o, err := get(ctx, b, e.Key, maxCurrent)
		switch {
		case errors.Is(err, bucket.ErrNotFound):
			continue // deleted since the listing
		case err != nil:
			d.Err = fmt.Errorf("reading %s: %w", e.Key, err)
		default:
			d.Current, d.Err = ParseCurrent(e.Key, data)
			d.At = o.ModTime
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(x, y Deployed) int { return strings.Compare(x.App.String(), y.App.String()) })
	return out, nil
}
