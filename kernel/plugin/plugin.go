// Package plugin is how the kernel finds its backends. A plugin is an Info
// value: its kind (the kernel extension point), its name, the contract
// version it implements, a default configuration and a constructor. A build
// contains the plugins its main package passes to a Registry; the kernel never
// imports a plugin.
package plugin

import (
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
)

// Kind is a kernel extension point.
type Kind string

const (
	Runtime   Kind = "runtime"
	Storage   Kind = "storage"
	Bucket    Kind = "bucket"
	Transport Kind = "transport"
)

// Kinds lists every kind, in the order listings show them.
var Kinds = []Kind{Runtime, Storage, Bucket, Transport}

// Info describes one plugin.
type Info struct {
	Kind Kind
	Name string // lowercase, [a-z][a-z0-9_]*: "wazero", "sqlite"
	// API is the contract version the plugin was built against,
	// "runtime/v1": a literal in the plugin, never the kernel's own
	// constant, so that a plugin left behind when the kernel moves to a new
	// version says so. The kernel refuses a plugin whose version differs
	// from its own (CheckAPIs, ADR 1002).
	API string
	// Summary is one line for `wasmkeep plugins`.
	Summary string
	// NewConfig returns a pointer to the plugin's configuration with its
	// defaults set. plugins.yaml's settings for the plugin are decoded into it
	// strictly (an unknown key is an error). Nil means the plugin takes none.
	NewConfig func() any
	// New builds the plugin from its decoded configuration. It returns the
	// kind's interface (runtime.Driver, storage.Driver, ...).
	New func(config any) (any, error)
	// Unavailable, when set, marks a plugin this build knows of but lacks
	// (a cgo plugin in a CGO_ENABLED=0 build) and says how to get it; New is
	// then nil and choosing the plugin fails with this text.
	Unavailable string
	// Scheme, when set, is the URL scheme that names this plugin where a
	// command takes its kind as a URL (a bucket's --bucket s3://NAME,
	// file:///DIR); FromURL then applies such a URL to the plugin's
	// configuration (NewConfig's, plugins.yaml's settings applied), or
	// refuses it saying what is wrong. One scheme per plugin of a kind.
	Scheme  string
	FromURL func(u *url.URL, config any) error
	// SparseCHeap marks a plugin whose C allocations leave much of what
	// they allocate untouched (Wasmtime's lazily filled instance tables):
	// on huge pages that would be resident, so a process that chose it
	// keeps the C heap on small pages (ADR 1067).
	SparseCHeap bool
}

// ID is "<kind>.<name>".
func (i Info) ID() string { return string(i.Kind) + "." + i.Name }

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// Registry holds the plugins of one build. It is safe for concurrent reads
// once registration is done.
type Registry struct {
	byID map[string]Info
}

// NewRegistry returns a registry holding infos, or an error naming the first
// malformed or duplicate one.
func NewRegistry(infos ...Info) (*Registry, error) {
	r := &Registry{byID: map[string]Info{}}
	for _, in := range infos {
		if err := r.register(in); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func (r *Registry) register(in Info) error {
	known := false
	for _, k := range Kinds {
		known = known || k == in.Kind
	}
	switch {
	case !known:
		return fmt.Errorf("plugin %q: unknown kind %q (valid: %s)", in.Name, in.Kind, joinKinds())
	case !nameRE.MatchString(in.Name):
		return fmt.Errorf("plugin %s: name %q must match %s", in.Kind, in.Name, nameRE)
	case in.New == nil && in.Unavailable == "":
		return fmt.Errorf("plugin %s: New is nil", in.ID())
	case in.API == "":
		return fmt.Errorf("plugin %s: declares no contract version (API)", in.ID())
	case (in.Scheme == "") != (in.FromURL == nil):
		return fmt.Errorf("plugin %s: Scheme and FromURL go together", in.ID())
	}
	if _, dup := r.byID[in.ID()]; dup {
		return fmt.Errorf("plugin %s registered twice", in.ID())
	}
	if other, dup := r.ByScheme(in.Kind, in.Scheme); in.Scheme != "" && dup {
		return fmt.Errorf("plugins %s and %s both take URLs of scheme %s", other.ID(), in.ID(), in.Scheme)
	}
	r.byID[in.ID()] = in
	return nil
}

// Lookup finds a plugin by kind and name. The error for a missing one lists
// the plugins of that kind this build has.
func (r *Registry) Lookup(kind Kind, name string) (Info, error) {
	if in, ok := r.Get(kind, name); ok {
		if in.Unavailable != "" {
			return Info{}, fmt.Errorf("%s plugin %q is not in this build: %s", kind, name, in.Unavailable)
		}
		return in, nil
	}
	names := r.Names(kind, false)
	valid := "none"
	if len(names) > 0 {
		valid = strings.Join(names, ", ")
	}
	return Info{}, fmt.Errorf("unknown %s plugin %q (this build has: %s)", kind, name, valid)
}

// ByScheme finds the plugin of a kind that takes URLs of a scheme.
func (r *Registry) ByScheme(kind Kind, scheme string) (Info, bool) {
	for _, in := range r.byID {
		if in.Kind == kind && in.Scheme == scheme && scheme != "" {
			return in, true
		}
	}
	return Info{}, false
}

// Schemes lists the URL schemes a kind's plugins take, sorted.
func (r *Registry) Schemes(kind Kind) []string {
	var out []string
	for _, in := range r.List() {
		if in.Kind == kind && in.Scheme != "" {
			out = append(out, in.Scheme)
		}
	}
	sort.Strings(out)
	return out
}

// Get finds a plugin by kind and name, an unavailable one included.
func (r *Registry) Get(kind Kind, name string) (Info, bool) {
	in, ok := r.byID[string(kind)+"."+name]
	return in, ok
}

// Names lists the names of a kind's plugins, sorted; withUnavailable adds
// those the build knows of but lacks.
func (r *Registry) Names(kind Kind, withUnavailable bool) []string {
	var names []string
	for _, in := range r.List() {
		if in.Kind == kind && (withUnavailable || in.Unavailable == "") {
			names = append(names, in.Name)
		}
	}
	return names
}

// List returns every plugin, ordered by kind then name.
func (r *Registry) List() []Info {
	order := map[Kind]int{}
	for i, k := range Kinds {
		order[k] = i
	}
	out := make([]Info, 0, len(r.byID))
	for _, in := range r.byID {
		out = append(out, in)
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Kind != out[b].Kind {
			return order[out[a].Kind] < order[out[b].Kind]
		}
		return out[a].Name < out[b].Name
	})
	return out
}

// CheckAPI refuses a plugin whose contract version is not want, naming the
// plugin, both versions and what to do.
func CheckAPI(in Info, want string) error {
	if in.API != want {
		return fmt.Errorf("plugin %s implements %s, but this kernel requires %s: "+
			"build with a version of the plugin brought up to %s, or leave it out of the build (ADR 1002)",
			in.ID(), in.API, want, want)
	}
	return nil
}

// CheckAPIs refuses the first plugin, by List's order and unavailable ones
// included, whose contract version is not the one apis gives for its kind:
// a build holding a plugin made for another version of a contract does not
// start.
func (r *Registry) CheckAPIs(apis map[Kind]string) error {
	for _, in := range r.List() {
		want, ok := apis[in.Kind]
		if !ok {
			return fmt.Errorf("plugin %s: this kernel has no %s contract", in.ID(), in.Kind)
		}
		if err := CheckAPI(in, want); err != nil {
			return err
		}
	}
	return nil
}

func joinKinds() string {
	s := make([]string, len(Kinds))
	for i, k := range Kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}
