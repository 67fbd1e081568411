// Command wasmkeep runs actors. This build holds the standard plugins; a
// custom build is a main package like this one with another plugin list
// (see package command).
package main

import (
	"os"

	"github.com/wasmkeep/wasmkeep/cmd/wasmkeep/command"
)

func main() { os.Exit(command.Main(plugins()...)) }
