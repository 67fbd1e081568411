package buckettest

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// The suite passes on the honest reference bucket, with the full defaults.
func TestMemory(t *testing.T) {
	Run(t, func(t *testing.T) bucket.Bucket { return NewMemory(Flaws{}) })
}

// The suite can fail: each flaw fails exactly the rules that should see it.
func TestFlawsCaught(t *testing.T) {
	conditional := []string{"VersionsAgree", "CreateIfAbsent", "ReplaceIfVersion", "StaleVersion", "Delete",
		"ErrorsDistinct", "EmptyObject", "RaceCreate", "RaceReplace", "Probe"}
	var all []string
	for _, r := range Rules() {
		all = append(all, r.Name)
	}
	for _, c := range []struct {
		name  string
		flaws Flaws
		fail  []string
	}{
		{"IgnoreConditions", Flaws{IgnoreConditions: true}, conditional},
		{"RefusedPutsLand", Flaws{RefusedPutsLand: true}, []string{"CreateIfAbsent", "ReplaceIfVersion",
			"StaleVersion", "ErrorsDistinct", "EmptyObject", "RaceCreate", "RaceReplace", "Probe"}},
		{"ReverseList", Flaws{ReverseList: true}, []string{"KernelKeys", "ListPages"}},
		{"Unreachable", Flaws{Unreachable: true}, all},
	} {
		t.Run(c.name, func(t *testing.T) {
			results, err := Check(t.Context(), NewMemory(c.flaws), Options{Quick: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var failed []string
			for _, r := range results {
				if r.Err != nil {
					failed = append(failed, r.Rule.Name)
					t.Logf("%s: %v", r.Rule.Name, r.Err)
				}
			}
			if !slices.Equal(failed, c.fail) {
				t.Errorf("failed %v, want %v", failed, c.fail)
			}
		})
	}
}

func TestOptions(t *testing.T) {
	m := NewMemory(Flaws{})
	for _, o := range []Options{{Writers: 1}, {Rounds: -1}, {Prefix: "/x/"}, {Prefix: "x"}, {Prefix: strings.Repeat("p/", 300)}} {
		if _, err := Check(context.Background(), m, o, nil); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

func TestLongestKey(t *testing.T) {
	for n := 1; n <= maxPrefix+20; n++ {
		start := strings.Repeat("abcdefg/", n/8+1)[:n-1] + "x"
		k := longestKey(start)
		if len(k) != bucket.MaxKeyLen || bucket.CheckKey(k) != nil {
			t.Fatalf("after %d bytes: %d bytes, %v", n, len(k), bucket.CheckKey(k))
		}
	}
}
