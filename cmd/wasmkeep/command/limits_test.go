package command

import (
	"reflect"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep"
	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/config"
	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// The embedded plugins.yaml gives every node setting that has a flag a
// value (so that --help shows it as the default), and its limits are the
// node's own defaults: serving with the file changes nothing.
func TestEmbeddedDefaultsAreTheNodes(t *testing.T) {
	defaults, err := config.NodeDefaults(wasmkeep.DefaultConfig)
	if err != nil {
		t.Fatal(err)
	}
	for key, field := range config.NodeFields(&defaults) {
		// failover_wait_secs: its default comes from the lease timings;
		// cache_dir: from the environment at start (node.MachineCacheDir).
		if key != "metrics_listen" && key != "failover_wait_secs" && key != "cache_dir" && reflect.ValueOf(field.Ptr).Elem().IsZero() {
			t.Errorf("plugins.yaml gives node.%s no value: --help would show no default", key)
		}
	}
	got := limits(defaults)
	want := node.Options{}.WithDefaults()
	// What limits does not set, and what a node derives of its own.
	want.App, want.Logger, want.AdmissionWait = app.Name{}, nil, 0
	got = got.WithDefaults()
	got.App, got.Logger, got.AdmissionWait = app.Name{}, nil, 0
	// The disk check: serve's default is plugins.yaml's 1 GiB (5% of a
	// smaller disk), a node built in process checks no disk unless asked.
	if got.MinFreeDisk <= 0 {
		t.Errorf("Options.MinFreeDisk from plugins.yaml is %d: serve would check no disk", got.MinFreeDisk)
	}
	got.MinFreeDisk = 0
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range gv.NumField() {
		if !reflect.DeepEqual(gv.Field(i).Interface(), wv.Field(i).Interface()) {
			t.Errorf("Options.%s from plugins.yaml is %v; the node's default is %v", gv.Type().Field(i).Name, gv.Field(i).Interface(), wv.Field(i).Interface())
		}
	}
	// And each number reaches Options: set to 1, it changes them.
	for key := range config.NodeFields(&defaults) {
		n := defaults
		for k, f := range config.NodeFields(&n) {
			if k != key {
				continue
			}
			switch p := f.Ptr.(type) {
			case *int:
				*p = 1
			case *int64:
				*p = 1
			case *time.Duration:
				*p = 1
			default:
				continue // listen, data_dir, the log's, guest_log_rate, failover_wait_secs: not limits
			}
			if key == "max_connections" {
				continue // the listener's, not the node's (fitOpenFiles)
			}
			if reflect.DeepEqual(limits(n), limits(defaults)) {
				t.Errorf("node.%s set to 1 changes no node option", key)
			}
		}
	}
}

// Only a public IP address in --advertise is warned about in accept mode.
func TestPublicURL(t *testing.T) {
	for raw, want := range map[string]bool{
		"http://127.0.0.1:8080": false, "http://10.0.0.11:8080": false, "http://[::1]:8080": false,
		"http://192.168.1.2": false, "http://8.8.8.8:8080": true, "http://[2001:db8::1]:80": true,
		"http://node-a.internal:8080": false, "::bad": false,
	} {
		if got := publicURL(raw); got != want {
			t.Errorf("publicURL(%q) = %v, want %v", raw, got, want)
		}
	}
}

// The connection caps and resident actors fit the open-files limit: the
// cluster listener's share first, then what was asked if it fits, else at
// least half of the rest for connections and the remainder for actors
// (issue 24, item 8).
func TestFitOpenFiles(t *testing.T) {
	for _, c := range []struct {
		files                 uint64
		cluster               bool
		connections, instance int
		want                  fitted
	}{
		{20000, false, 10000, 1000, fitted{0, 10000, 1000, false}},
		{^uint64(0), true, 10000, 1000, fitted{1024, 10000, 1000, false}}, // unlimited
		{8192, false, 64, 1000, fitted{0, 64, 1000, false}},               // the bench's 1,000 actors fit
		{4096, false, 64, 1000, fitted{0, 64, 944, true}},                 // but not in the book's floor (three files an actor there)
		{1024, false, 10000, 1000, fitted{0, 384, 96, true}},              // 768 usable
		{1024, true, 10000, 1000, fitted{96, 336, 84, true}},              // an eighth to the cluster
		{1024, false, 64, 1000, fitted{0, 64, 176, true}},                 // connections asked for fit
		{20000, false, 19900, 10, fitted{0, 19744 - 4*10, 10, true}},      // the actors leave more than half
		{100, true, 10000, 1000, fitted{1, 1, 1, true}},
	} {
		if got := fitOpenFiles(c.files, c.cluster, c.connections, c.instance); got != c.want {
			t.Errorf("fitOpenFiles(%d, %v, %d, %d) = %+v, want %+v", c.files, c.cluster, c.connections, c.instance, got, c.want)
		}
	}
}
