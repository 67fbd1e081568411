// Command wasmkeep runs actors. This build holds the standard plugins; a
// custom build is a main package like this one with another plugin list
// (see package command), and the same import of the fallback roots.
package main

import (
	"os"

	// Mozilla's root list, which guests' https fetches trust where the
	// system has none (a minimal container): only then, since it is
	// x509.SetFallbackRoots.
	_ "golang.org/x/crypto/x509roots/fallback"

	"github.com/wasmkeep/wasmkeep/cmd/wasmkeep/command"
)

func main() { os.Exit(command.Main(plugins()...)) }
