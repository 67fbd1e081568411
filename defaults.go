// Package wasmkeep holds what the whole module shares: the default
// plugins.yaml, embedded so that a binary runs without any file.
package wasmkeep

import _ "embed"

// DefaultConfig is plugins.yaml, the configuration a node starts from.
//
//go:embed plugins.yaml
var DefaultConfig []byte
