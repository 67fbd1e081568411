package plugin

import (
	"net/url"
	"strings"
	"testing"
)

func TestRegistryRefusesMalformedPlugins(t *testing.T) {
	newFn := func(any) (any, error) { return nil, nil }
	for want, in := range map[string]Info{
		"unknown kind":         {Kind: "cache", Name: "x", API: "cache/v1", New: newFn},
		"must match":           {Kind: Runtime, Name: "Bad-Name", API: "runtime/v1", New: newFn},
		"New is nil":           {Kind: Runtime, Name: "x", API: "runtime/v1"},
		"declares no contract": {Kind: Runtime, Name: "x", New: newFn},
	} {
		if _, err := NewRegistry(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want %q", in, err, want)
		}
	}
	ok := Info{Kind: Runtime, Name: "x", API: "runtime/v1", New: newFn}
	if _, err := NewRegistry(ok, ok); err == nil || !strings.Contains(err.Error(), "registered twice") {
		t.Errorf("duplicate: %v", err)
	}
}

// A plugin that takes URLs declares its scheme and how to apply one; two of
// a kind cannot share a scheme, and ByScheme finds the one that has it.
func TestSchemes(t *testing.T) {
	newFn := func(any) (any, error) { return nil, nil }
	fromURL := func(*url.URL, any) error { return nil }
	half := Info{Kind: Bucket, Name: "x", API: "bucket/v1", New: newFn, Scheme: "x"}
	if _, err := NewRegistry(half); err == nil || !strings.Contains(err.Error(), "go together") {
		t.Errorf("scheme without FromURL: %v", err)
	}
	a := Info{Kind: Bucket, Name: "a", API: "bucket/v1", New: newFn, Scheme: "s3", FromURL: fromURL}
	b := Info{Kind: Bucket, Name: "b", API: "bucket/v1", New: newFn, Scheme: "s3", FromURL: fromURL}
	if _, err := NewRegistry(a, b); err == nil || !strings.Contains(err.Error(), "both take URLs of scheme s3") {
		t.Errorf("shared scheme: %v", err)
	}
	b.Scheme = "file"
	reg, err := NewRegistry(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if in, ok := reg.ByScheme(Bucket, "file"); !ok || in.Name != "b" {
		t.Errorf("ByScheme(file) = %v, %v", in.ID(), ok)
	}
	if _, ok := reg.ByScheme(Bucket, "gs"); ok {
		t.Error("ByScheme(gs) found a plugin")
	}
	if got := strings.Join(reg.Schemes(Bucket), ","); got != "file,s3" {
		t.Errorf("Schemes = %s", got)
	}
}

func TestLookupAndList(t *testing.T) {
	newFn := func(any) (any, error) { return nil, nil }
	reg, err := NewRegistry(
		Info{Kind: Storage, Name: "b", API: "storage/v1", New: newFn},
		Info{Kind: Runtime, Name: "z", API: "runtime/v1", New: newFn},
		Info{Kind: Runtime, Name: "a", API: "runtime/v1", Unavailable: "needs cgo"},
	)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, in := range reg.List() {
		ids = append(ids, in.ID())
	}
	if strings.Join(ids, " ") != "runtime.a runtime.z storage.b" {
		t.Errorf("list order: %v", ids)
	}
	if _, err := reg.Lookup(Runtime, "a"); err == nil || !strings.Contains(err.Error(), "needs cgo") {
		t.Errorf("unavailable: %v", err)
	}
	if _, err := reg.Lookup(Runtime, "q"); err == nil || !strings.Contains(err.Error(), "this build has: z") {
		t.Errorf("unknown: %v", err)
	}
	if err := CheckAPI(Info{Kind: Runtime, Name: "z", API: "runtime/v2"}, "runtime/v1"); err == nil ||
		!strings.Contains(err.Error(), "runtime/v2") || !strings.Contains(err.Error(), "runtime/v1") {
		t.Errorf("version mismatch: %v", err)
	}
}

// A registry holding a plugin built against another version of its kind's
// contract fails CheckAPIs, naming the plugin, both versions and what to do;
// one whose plugins all match passes, an unavailable one included.
func TestCheckAPIsRefusesAnotherVersion(t *testing.T) {
	newFn := func(any) (any, error) { return nil, nil }
	apis := map[Kind]string{Runtime: "runtime/v1", Storage: "storage/v2"}
	good := []Info{
		{Kind: Runtime, Name: "z", API: "runtime/v1", New: newFn},
		{Kind: Runtime, Name: "a", API: "runtime/v1", Unavailable: "needs cgo"},
		{Kind: Storage, Name: "new", API: "storage/v2", New: newFn},
	}
	reg, err := NewRegistry(good...)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.CheckAPIs(apis); err != nil {
		t.Errorf("matching versions: %v", err)
	}
	for want, in := range map[string]Info{
		"plugin storage.old implements storage/v1, but this kernel requires storage/v2: " +
			"build with a version of the plugin brought up to storage/v2, or leave it out of the build": {Kind: Storage, Name: "old", API: "storage/v1", New: newFn},
		"plugin runtime.cgo implements runtime/v0, but this kernel requires runtime/v1": {Kind: Runtime, Name: "cgo", API: "runtime/v0", Unavailable: "needs cgo"},
		"plugin bucket.b: this kernel has no bucket contract":                           {Kind: Bucket, Name: "b", API: "bucket/v1", New: newFn},
	} {
		reg, err := NewRegistry(append(good, in)...)
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.CheckAPIs(apis); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", in.ID(), err, want)
		}
	}
}
