//go:build wasip1

// Preinit asks to be pre-initialised (ADR 1040). Its init reads 8 bytes of
// crypto/rand, so two actors answering the same token share the start's
// state; a request reads 8 more, which must differ. Built with -X
// main.hostInInit=1, its init calls the host, which pre-initialisation
// refuses.
package main

import (
	"crypto/rand"
	"encoding/hex"

	_ "github.com/wasmkeep/wasmkeep/sdk/go/preinit"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

var hostInInit string

var variant string // -X main.variant=2: another build of the same code

var token string

func random() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func init() {
	token = random()
	if hostInInit != "" {
		wasmkeep.Env("X")
	}
	wasmkeep.HandleFunc(func(w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
		w.Write([]byte(token + " " + random() + variant))
	})
}

func main() {}
