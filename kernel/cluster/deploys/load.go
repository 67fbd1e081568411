package deploys

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/atomicfile"
	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/node/access"
)

// Loaded is a version as a node runs it: every object read and checked
// against the manifest's digests, modules written to files.
type Loaded struct {
	App     app.Name
	Version string
	Seq     uint64
	Classes map[string]LoadedClass
	Front   string // the front's module file, "" without a front
}

// LoadedClass is one class of a loaded version.
type LoadedClass struct {
	Module   string            // the module's file, named by its digest
	Digest   string            // hex SHA-256 of the module
	Access   access.Access     // the zero value (open) without a rule
	Config   map[string]string // the deployed configuration, nil without
	Requires []string          // names that must be set, sorted
	Expire   time.Duration     // expire-after-idle, 0 for none
}

// Load reads the app's current version for a node: the manifest, every
// object it names with its digest checked (an altered one is refused,
// naming it), configuration parsed, and modules written into dir as
// <sha256>.wasm, so the node loads them by path.
func Load(ctx context.Context, b bucket.Bucket, a app.Name, dir string) (Loaded, error) {
	if err := RefuseDeleted(ctx, b, a); err != nil {
		return Loaded{}, err
	}
	cur, _, found, err := readCurrent(ctx, b, keysOf(a))
	if err != nil {
		return Loaded{}, err
	}
	if !found {
		return Loaded{}, fmt.Errorf("app %s: %w", a, ErrNothingDeployed)
	}
	return loadAt(ctx, b, a, cur, dir)
}

// loadAt loads the version cur names.
func loadAt(ctx context.Context, b bucket.Bucket, a app.Name, cur Current, dir string) (Loaded, error) {
	k := keysOf(a)
	m, _, err := readManifest(ctx, b, k, cur.Version)
	if err != nil {
		return Loaded{}, fmt.Errorf("%s names %s: %w", k.current(), cur.Version, err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return Loaded{}, err
	}
	l := Loaded{App: a, Version: cur.Version, Seq: cur.Seq, Classes: map[string]LoadedClass{}}
	if m.Front != "" {
		if l.Front, err = writeModule(ctx, b, k.front(cur.Version), m.Front, dir); err != nil {
			return Loaded{}, err
		}
	}
	for c, digest := range m.Classes {
		lc := LoadedClass{Digest: digest, Access: m.Access[c], Requires: m.Requires[c], Expire: m.Expire[c]}
		if lc.Module, err = writeModule(ctx, b, k.module(cur.Version, c), digest, dir); err != nil {
			return Loaded{}, err
		}
		if d, ok := m.Config[c]; ok {
			if lc.Config, err = readConfig(ctx, b, k.config(cur.Version, c), d); err != nil {
				return Loaded{}, err
			}
		}
		l.Classes[c] = lc
	}
	return l, nil
}

// writeModule reads the module under key, checked against digest, into
// dir/<digest>.wasm, unless a file with that content is there already.
func writeModule(ctx context.Context, b bucket.Bucket, key, digest, dir string) (string, error) {
	path := filepath.Join(dir, digest+".wasm")
	if have, err := os.ReadFile(path); err == nil && Digest(have) == digest {
		return path, nil
	}
	data, err := readArtifact(ctx, b, key, digest, maxModule)
	if err != nil {
		return "", err
	}
	if err := atomicfile.Write(path, data); err != nil {
		return "", fmt.Errorf("writing %s: %w", key, err)
	}
	return path, nil
}
