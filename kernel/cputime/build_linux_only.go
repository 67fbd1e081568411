//go:build !linux

package cputime

// WasmKeep runs on Linux only (CONTRIBUTING.md): budgets read each thread's
// CPU clock. This makes a build elsewhere say so first.
const _ = wasmkeepRunsOnLinuxOnly
