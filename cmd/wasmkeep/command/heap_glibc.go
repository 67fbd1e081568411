//go:build cgo && linux

package command

/*
#include <stdlib.h>
#include <string.h>

int wk_hugeheap_prepare(void); // internal/hugeheap

// A `serve` process prepares its C heap for huge pages before the Go
// runtime starts, since the runtime's threads allocate (through cgo)
// before serve has read its settings, and a thread's glibc arena is
// decided at its first allocation (ADR 1067). serve then uses the huge
// pages, or, if its settings decline them, runs itself again without
// (useHeap). The environment's settings are read here to spare that second
// start: WASMKEEP_NODE__C_HEAP_HUGE_PAGES=off, and
// WASMKEEP_RUNTIME__USE=wasmtime, whose C allocations are sparse.
// glibc alone passes a constructor the program's arguments (musl passes
// none, and is left alone).
__attribute__((constructor)) static void wk_prepare_heap(int argc, char **argv) {
#ifdef __GLIBC__
	const char *setting = getenv("WASMKEEP_NODE__C_HEAP_HUGE_PAGES"), *engine = getenv("WASMKEEP_RUNTIME__USE");
	if ((setting != 0 && strcmp(setting, "off") == 0) || (engine != 0 && strcmp(engine, "wasmtime") == 0)) {
		return;
	}
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "serve") == 0) {
			wk_hugeheap_prepare();
			return;
		}
	}
#endif
}
*/
import "C"

import _ "github.com/wasmkeep/wasmkeep/internal/hugeheap" // wk_hugeheap_prepare
