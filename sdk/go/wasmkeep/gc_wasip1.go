//go:build wasip1

package wasmkeep

import "runtime/debug"

// gcPercent is the garbage collector's target for every actor (GOGC; the
// Go default is 100). The Go runtime never hands linear memory back, so an
// actor keeps the largest heap it ever had: at 100 the heap may reach 4 MiB
// before the first collection, and a counter handling requests levels off
// near 7.4 MiB of linear memory; at 25, near 4.4 MiB, for no more CPU per
// request (bench/cmd/wkmem; the smaller heap touches fewer fresh pages). An
// actor can set its own with debug.SetGCPercent in an init function: the
// SDK's runs first.
const gcPercent = 25

func init() { debug.SetGCPercent(gcPercent) }
