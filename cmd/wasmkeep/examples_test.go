package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// The rate limiter: a window of LIMIT requests, closed by an alarm; a key
// idle for a whole window deletes itself.
func TestExampleRateLimiter(t *testing.T) {
	data := t.TempDir()
	n := startNode(t, node.Options{
		DataDir: data,
		Classes: map[string]string{"limit": buildGuest(t, "examples/rate-limiter", "")},
		Env:     map[string]map[string]string{"limit": {"LIMIT": "3", "WINDOW_MS": "500"}},
	})
	db := filepath.Join(data, "actors", "default", "limit", "key.db")

	for _, want := range []string{"2\n", "1\n", "0\n"} {
		n.expect("POST", "/actor/limit/key", "", 200, want)
	}
	code, body, hdr := n.doH("POST", "/actor/limit/key", "", nil)
	if code != 429 || body != "rate limit exceeded\n" || hdr.Get("Retry-After") != "1" {
		t.Fatalf("over the limit: %d %q, Retry-After %q", code, body, hdr.Get("Retry-After"))
	}
	n.expect("GET", "/actor/limit/other", "", 200, "3\n") // keys are independent

	// The alarm closes the window: the key has its full quota again.
	waitFor(t, 5*time.Second, "the window to close", func() bool {
		code, body := n.do("GET", "/actor/limit/key", "")
		return code == 200 && body == "3\n"
	})
	n.expect("POST", "/actor/limit/key", "", 200, "2\n")

	// Then a window without requests: the key deletes itself, and so does
	// one that only ever asked.
	waitFor(t, 5*time.Second, "the idle key to delete itself", func() bool { return missing(db) })
	waitFor(t, 5*time.Second, "the unused key to delete itself", func() bool {
		return missing(filepath.Join(data, "actors", "default", "limit", "other.db"))
	})
	n.expect("POST", "/actor/limit/key", "", 200, "2\n")
}

func missing(path string) bool {
	_, err := os.Stat(path)
	return os.IsNotExist(err)
}

// The shop: a cart reserves through stock, which only actors reach and
// which knows which cart reserved.
func TestExampleShop(t *testing.T) {
	n := startNode(t, node.Options{
		Classes: map[string]string{
			"cart":  buildGuest(t, "examples/shop/cart", ""),
			"stock": buildGuest(t, "examples/shop/stock", ""),
		},
		Access: map[string]node.Access{"stock": mustAccess(t, "internal")},
		Env:    map[string]map[string]string{"stock": {"STOCK": "2"}},
	})
	n.expect("POST", "/actor/cart/alice/apple", "", 200, "reserved for default/cart/alice, 1 left\n")
	n.expect("POST", "/actor/cart/bob/apple", "", 200, "reserved for default/cart/bob, 0 left\n")
	n.expect("POST", "/actor/cart/alice/apple", "", 409, "out of stock\n")
	n.expect("POST", "/actor/cart/alice/pear", "", 200, "reserved for default/cart/alice, 1 left\n")
	n.expect("GET", "/actor/cart/alice", "", 200, "apple 1\npear 1\n")

	const refused = "class \"stock\" is internal: outside requests are refused\n"
	n.expect("POST", "/actor/stock/apple/reserve", "", 403, refused)
	n.expect("POST", "/actor/stock/pear/reserve", "", 403, refused)
}
