// The C side of the plugin: the hot paths (calling an export, a guest
// calling a host function, the epoch deadline callback) run here so that
// each costs one cgo transition.

#ifndef WASMKEEP_WASMTIME_SHIM_H
#define WASMKEEP_WASMTIME_SHIM_H

#include "capi.h"

// What the instance's "memory" export is known to be.
#define WK_MEM_UNKNOWN 0
#define WK_MEM_SOME 1
#define WK_MEM_NONE 2

// wk_store is one instance: its store and what the Go side reads without a
// cgo call. Allocated in C so Go may keep pointers into it across calls.
typedef struct wk_store {
  wasmtime_store_t *store;
  wasmtime_context_t *cx;
  wasmtime_instance_t instance;
  // handle is the runtime/cgo.Handle of the Go instance, passed back to Go
  // by every callback.
  uintptr_t handle;
  // The instance's "memory" export and its data as of the last time the
  // guest stopped running (see wk_refresh_memory).
  int mem_state;
  wasmtime_memory_t mem;
  uint8_t *mem_base;
  size_t mem_size;
  // raw holds an export call's parameters and results.
  wasmtime_val_raw_t *raw;
  size_t raw_len;
} wk_store;

typedef struct wk_result {
  wasm_trap_t *trap;
  wasmtime_error_t *err;
} wk_result;

// wk_engine_new makes an engine; fast makes Cranelift skip its
// optimisations (opt level none), for the fast tier.
wasm_engine_t *wk_engine_new(bool parallel_compilation, bool fast);
wk_store *wk_store_new(wasm_engine_t *engine, uintptr_t handle,
                       int64_t memory_limit, int64_t table_elements,
                       int64_t tables, size_t raw_len);
void wk_store_delete(wk_store *st);
wasmtime_error_t *wk_set_wasi(wk_store *st);
wk_result wk_instantiate(wk_store *st, const wasmtime_instance_pre_t *pre);
bool wk_export_func(wk_store *st, const char *name, size_t len,
                    wasmtime_func_t *out);
void wk_find_memory(wk_store *st);
wk_result wk_call(wk_store *st, wasmtime_func_t fn);
wasmtime_error_t *wk_define_func(wasmtime_linker_t *linker, const char *module,
                                 size_t module_len, const char *name,
                                 size_t name_len, const uint8_t *params,
                                 size_t nparams, const uint8_t *results,
                                 size_t nresults, uintptr_t index);

#endif
