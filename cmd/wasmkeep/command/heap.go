package command

import (
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/wasmkeep/wasmkeep/internal/hugeheap"
	"github.com/wasmkeep/wasmkeep/kernel/config"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

// heapVar is the variable of node.c_heap_huge_pages, which
// heap_glibc.go's constructor reads too.
const heapVar = config.EnvPrefix + "NODE__C_HEAP_HUGE_PAGES"

// useHeap puts the C heap on huge pages (ADR 1067) unless the node's
// setting is off or a chosen plugin's C allocations are sparse, and
// reports whether it did. A heap the constructor prepared for them that
// the settings decline cannot be given its arenas back: the process runs
// itself again (/proc/self/exe, so the same binary even if replaced on
// disk; the same PID) with the variable off in its environment, in place
// of any value it had, and does not return. serve calls it first, before
// it reads anything that cannot be read twice.
func useHeap(setting string, chosen map[plugin.Kind]config.Choice, log *slog.Logger) bool {
	sparse := slices.ContainsFunc(slices.Collect(maps.Values(chosen)), func(c config.Choice) bool { return c.Info.SparseCHeap })
	if setting != "off" && !sparse {
		return hugeheap.Use()
	}
	if hugeheap.Prepared() && os.Getenv(heapVar) != "off" { // off there, the constructor prepared nothing: no loop
		env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, heapVar+"=") })
		err := syscall.Exec("/proc/self/exe", os.Args, append(env, heapVar+"=off"))
		log.Warn("the C heap was prepared for huge pages, which the settings decline, and the process could not run itself again without: it keeps one malloc arena", "err", err)
	}
	return false
}
