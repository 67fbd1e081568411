package plugin

import (
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
