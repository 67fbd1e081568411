package command

import (
	"log/slog"
	"maps"
	"os"
	"slices"
	"syscall"

	"github.com/wasmkeep/wasmkeep/internal/hugeheap"
	"github.com/wasmkeep/wasmkeep/kernel/config"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

// heapOff is the variable that turns the C heap's huge pages off
// (node.c_heap_huge_pages), which heap_glibc.go's constructor reads too.
const heapOff = config.EnvPrefix + "NODE__C_HEAP_HUGE_PAGES=off"

// useHeap puts the C heap on huge pages (ADR 1067) when the node's setting
// is on and no chosen plugin's C allocations are sparse, and reports
// whether it did. A heap the constructor prepared for them that the
// settings decline cannot be given its arenas back: the process runs
// itself again, same PID, with heapOff in its environment, and does not
// return. Call it before any plugin is built.
func useHeap(setting string, chosen map[plugin.Kind]config.Choice, log *slog.Logger) bool {
	sparse := slices.ContainsFunc(slices.Collect(maps.Values(chosen)), func(c config.Choice) bool { return c.Info.SparseCHeap })
	if setting == "on" && !sparse {
		return hugeheap.Use()
	}
	if hugeheap.Prepared() {
		exe, err := os.Executable()
		if err == nil {
			err = syscall.Exec(exe, os.Args, append(os.Environ(), heapOff))
		}
		log.Warn("the C heap was prepared for huge pages, which the settings decline, and the process could not run itself again without: it keeps one malloc arena", "err", err)
	}
	return false
}
