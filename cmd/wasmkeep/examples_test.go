package main

import (
	"os"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/node/access"
)

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
		Access: map[string]access.Access{"stock": mustAccess(t, "internal")},
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
