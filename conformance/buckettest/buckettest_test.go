package buckettest

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// The suite passes on the honest reference bucket, with the full defaults.
func TestMemory(t *testing.T) {
	Run(t, func(t *testing.T) bucket.Bucket { return NewMemory(Flaws{}) })
}

// The suite can fail: each flaw fails exactly the rules that should see it.
// A provider lacking a capability conforms: the flaws the contract allows
// fail no rule and show as lacking capabilities.
func TestFlawsCaught(t *testing.T) {
	conditional := []string{"VersionsAgree", "CreateIfAbsent", "ReplaceIfVersion", "StaleVersion",
		"ErrorsDistinct", "EmptyObject", "RaceCreate", "RaceReplace", "Probe"}
	for _, c := range []struct {
		name         string
		flaws        Flaws
		fail, lacked []string
	}{
		{"Honest", Flaws{}, nil, nil},
		{"IgnoreConditions", Flaws{IgnoreConditions: true}, conditional, []string{"ConditionalDelete"}},
		{"IgnoreIfAbsent", Flaws{IgnoreIfAbsent: true}, []string{"CreateIfAbsent", "ErrorsDistinct", "RaceCreate", "Probe"}, nil},
		{"RefusedPutsLand", Flaws{RefusedPutsLand: true}, []string{"CreateIfAbsent", "ReplaceIfVersion",
			"StaleVersion", "ErrorsDistinct", "EmptyObject", "RaceCreate", "RaceReplace", "Probe"}, nil},
		{"ReverseList", Flaws{ReverseList: true}, []string{"KernelKeys", "ListPages"}, []string{"ListByteOrder"}},
		// MinIO's two departures, measured (plugins/bucket-s3/README.md).
		{"LikeMinIO", Flaws{IgnoreDeleteIfVersion: true, ListByDirectory: true}, nil, []string{"ConditionalDelete", "ListByteOrder"}},
		{"StartAfterInByteOrder", Flaws{ListByDirectory: true, StartAfterInByteOrder: true}, []string{"ListPages"}, []string{"ListByteOrder"}},
		{"RefuseDeleteIfVersion", Flaws{RefuseDeleteIfVersion: true}, nil, []string{"ConditionalDelete"}},
		{"TornGets", Flaws{TornGets: true}, []string{"GetDuringReplace"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			results, err := Check(t.Context(), NewMemory(c.flaws), Options{Quick: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var failed, lacked []string
			for _, r := range results {
				switch {
				case r.Failed():
					failed = append(failed, r.Rule.Name)
				case r.Err != nil:
					lacked = append(lacked, r.Rule.Name)
				default:
					continue
				}
				t.Logf("%s: %v", r.Rule.Name, r.Err)
			}
			if len(results) != len(Rules()) || !slices.Equal(failed, c.fail) || !slices.Equal(lacked, c.lacked) {
				t.Errorf("%d results, failed %v, lacked %v; want %d, failed %v, lacked %v", len(results), failed, lacked, len(Rules()), c.fail, c.lacked)
			}
		})
	}
}

// A bucket that cannot be listed is reported once, as the cause, and no
// rule is run: at the start, or after a rule fails because it went away.
func TestUnusableStops(t *testing.T) {
	results, err := Check(t.Context(), NewMemory(Flaws{Unreachable: true}), Options{Quick: true}, func(r Result) {
		t.Errorf("rule %s ran on an unreachable bucket: %v", r.Rule.Name, r.Err)
	})
	if !errors.Is(err, ErrUnusable) || !errors.Is(err, bucket.ErrTransient) || len(results) != 0 {
		t.Errorf("an unreachable bucket: %d results, %v; want none and ErrUnusable wrapping ErrTransient", len(results), err)
	}

	m := NewMemory(Flaws{})
	gone := &failAfter{Memory: m, rule: "/" + Rules()[2].Name + "/"}
	results, err = Check(t.Context(), gone, Options{Quick: true}, nil)
	if !errors.Is(err, ErrUnusable) || len(results) != 3 || !results[2].Failed() || results[1].Err != nil {
		t.Errorf("a bucket lost during rule 3: %d results, %v", len(results), err)
	}
}

// failAfter is a bucket whose every call fails from the first one under
// rule on, as a store taken away during a run.
type failAfter struct {
	*Memory
	rule string
	gone atomic.Bool
}

func (f *failAfter) List(ctx context.Context, prefix string, opts bucket.ListOptions) (bucket.ListPage, error) {
	if f.gone.Load() {
		return bucket.ListPage{}, errors.New("no such bucket")
	}
	return f.Memory.List(ctx, prefix, opts)
}

func (f *failAfter) Put(ctx context.Context, key string, body io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	if strings.Contains(key, f.rule) {
		f.gone.Store(true)
	}
	if f.gone.Load() {
		return "", errors.New("no such bucket")
	}
	return f.Memory.Put(ctx, key, body, size, cond)
}

// The descriptions name the sizes a run uses, not the defaults' (issue 12:
// --quick called its 4 MiB object 64 MiB).
func TestDescribeSizes(t *testing.T) {
	var large Rule
	for _, r := range Rules() {
		if r.Name == "LargeObject" {
			large = r
		}
	}
	for opts, want := range map[Options]string{
		{}:                   "(64 MiB)",
		{Quick: true}:        "(4 MiB)",
		{LargeSize: 1000}:    "(1000 bytes)",
		{LargeSize: 3 << 10}: "(3 KiB)",
	} {
		if got := large.Describe(opts); !strings.HasSuffix(got, want) {
			t.Errorf("%+v: %q, want it to end %q", opts, got, want)
		}
	}
	results, err := Check(t.Context(), NewMemory(Flaws{}), Options{Quick: true, Writers: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Rule.Name == "RaceCreate" && !strings.HasSuffix(r.Summary, "(3 writers, 3 rounds)") {
			t.Errorf("RaceCreate described as %q", r.Summary)
		}
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
