package bucket_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

func TestProbe(t *testing.T) {
	ctx := t.Context()
	honest := buckettest.NewMemory(buckettest.Flaws{})
	for range 2 { // a second probe on the same bucket picks another name
		if err := bucket.Probe(ctx, honest); err != nil {
			t.Fatal(err)
		}
	}
	if page, err := honest.List(ctx, bucket.ProbePrefix, bucket.ListOptions{}); err != nil || len(page.Entries) != 0 {
		t.Errorf("after the probe, probe/ holds %+v (%v)", page.Entries, err)
	}

	lax := buckettest.NewMemory(buckettest.Flaws{IgnoreConditions: true})
	err := bucket.Probe(ctx, lax)
	if !errors.Is(err, bucket.ErrIgnoresConditions) || errors.Is(err, bucket.ErrTransient) {
		t.Errorf("a bucket ignoring conditions: %v", err)
	}
	if page, _ := lax.List(ctx, bucket.ProbePrefix, bucket.ListOptions{}); len(page.Entries) != 0 {
		t.Errorf("a failed probe left %+v", page.Entries)
	}

	// Refusing a write but storing it all the same is caught on reading back.
	leaky := buckettest.NewMemory(buckettest.Flaws{RefusedPutsLand: true})
	if err := bucket.Probe(ctx, leaky); !errors.Is(err, bucket.ErrIgnoresConditions) || !strings.Contains(err.Error(), "after refusing a write") {
		t.Errorf("a bucket storing refused writes: %v", err)
	}

	down := buckettest.NewMemory(buckettest.Flaws{Unreachable: true})
	if err := bucket.Probe(ctx, down); !errors.Is(err, bucket.ErrTransient) || errors.Is(err, bucket.ErrIgnoresConditions) {
		t.Errorf("an unreachable bucket: %v", err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := bucket.Probe(ended, honest); !errors.Is(err, bucket.ErrTransient) || !errors.Is(err, context.Canceled) {
		t.Errorf("an ended context: %v", err)
	}
}
