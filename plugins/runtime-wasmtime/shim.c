//go:build cgo

#include <stdlib.h>
#include <string.h>

#include "_cgo_export.h"
#include "shim.h"

wasm_engine_t *wk_engine_new(bool parallel_compilation, bool fast) {
  wasm_config_t *config = wasm_config_new();
  if (config == NULL) {
    return NULL;
  }
  // Epochs are how a running guest is stopped: see wk_epoch.
  wasmtime_config_epoch_interruption_set(config, true);
  wasmtime_config_parallel_compilation_set(config, parallel_compilation);
  if (fast) {
    wasmtime_config_cranelift_opt_level_set(config, WASMTIME_OPT_LEVEL_NONE);
  }
  // WebAssembly 2.0, the features wazero (the other engine) has, so that
  // both accept the same modules. The proposals beyond it are off: threads
  // (shared memory), tail calls, typed function references, GC, relaxed
  // SIMD, multiple memories, 64-bit memories, wide arithmetic, exceptions,
  // custom page sizes, stack switching.
  wasmtime_config_wasm_simd_set(config, true);
  wasmtime_config_wasm_bulk_memory_set(config, true);
  wasmtime_config_wasm_reference_types_set(config, true);
  wasmtime_config_wasm_multi_value_set(config, true);
  wasmtime_config_wasm_threads_set(config, false);
  wasmtime_config_wasm_tail_call_set(config, false);
  wasmtime_config_wasm_gc_set(config, false);
  wasmtime_config_wasm_function_references_set(config, false);
  wasmtime_config_wasm_relaxed_simd_set(config, false);
  wasmtime_config_wasm_multi_memory_set(config, false);
  wasmtime_config_wasm_memory64_set(config, false);
  wasmtime_config_wasm_wide_arithmetic_set(config, false);
  wasmtime_config_wasm_exceptions_set(config, false);
  wasmtime_config_wasm_custom_page_sizes_set(config, false);
  wasmtime_config_wasm_stack_switching_set(config, false);
  return wasm_engine_new_with_config(config); // takes config
}

// wk_refresh_memory reads where the instance's memory is and how large it is.
// Only the guest changes either (memory.grow), so the Go side reads these
// fields without a cgo call: they are refreshed whenever the guest stops
// running, on entry to a host function, at an epoch tick and after every
// call.
static void wk_refresh_memory(wk_store *st) {
  if (st->mem_state == WK_MEM_SOME) {
    st->mem_base = wasmtime_memory_data(st->cx, &st->mem);
    st->mem_size = wasmtime_memory_data_size(st->cx, &st->mem);
  }
}

// wk_epoch runs when a running guest reaches its epoch deadline, one tick of
// the engine's ticker after each call starts and then at every tick. It asks
// Go whether the call's ctx is done; if so the error it returns unwinds the
// guest, otherwise the guest runs on until the next tick.
static wasmtime_error_t *wk_epoch(wasmtime_context_t *cx, void *data,
                                  uint64_t *delta,
                                  wasmtime_update_deadline_kind_t *kind) {
  wk_store *st = data;
  wk_refresh_memory(st); // for the memory the guest grew (touchGrown)
  if (wkEpochTick(st->handle)) {
    return wasmtime_error_new("guest interrupted");
  }
  *delta = 1;
  *kind = WASMTIME_UPDATE_DEADLINE_CONTINUE;
  return NULL;
}

wk_store *wk_store_new(wasm_engine_t *engine, uintptr_t handle,
                       int64_t memory_limit, int64_t table_elements,
                       int64_t tables, size_t raw_len) {
  wk_store *st = calloc(1, sizeof(wk_store));
  if (st == NULL) {
    return NULL;
  }
  st->raw_len = raw_len > 0 ? raw_len : 1;
  st->raw = calloc(st->raw_len, sizeof(wasmtime_val_raw_t));
  if (st->raw == NULL) {
    free(st);
    return NULL;
  }
  st->handle = handle;
  st->store = wasmtime_store_new(engine, st, NULL);
  st->cx = wasmtime_store_context(st->store);
  wasmtime_store_limiter(st->store, memory_limit, table_elements, -1, tables,
                         -1);
  wasmtime_store_epoch_deadline_callback(st->store, wk_epoch, st, NULL);
  return st;
}

void wk_store_delete(wk_store *st) {
  wasmtime_store_delete(st->store);
  free(st->raw);
  free(st);
}

// wk_set_wasi gives the store its WASI context: Wasmtime's defaults (real
// clocks, a cryptographic random source, no arguments, environment or
// preopened directory, an empty stdin). What the guest writes to stdout and
// stderr never reaches Wasmtime's streams: fd_write is the engine's own
// (wasi.go).
wasmtime_error_t *wk_set_wasi(wk_store *st) {
  return wasmtime_context_set_wasi(st->cx, wasi_config_new()); // takes it
}

wk_result wk_instantiate(wk_store *st, const wasmtime_instance_pre_t *pre) {
  wk_result r = {NULL, NULL};
  // A store with epochs enabled traps at once unless it has a deadline, and
  // instantiation may run the module's start function.
  wasmtime_context_set_epoch_deadline(st->cx, 1);
  r.err = wasmtime_instance_pre_instantiate(pre, st->cx, &st->instance,
                                            &r.trap);
  return r;
}

bool wk_export_func(wk_store *st, const char *name, size_t len,
                    wasmtime_func_t *out) {
  wasmtime_extern_t item;
  if (!wasmtime_instance_export_get(st->cx, &st->instance, name, len,
                                    &item)) {
    return false;
  }
  if (item.kind != WASMTIME_EXTERN_FUNC) {
    wasmtime_extern_delete(&item);
    return false;
  }
  *out = item.of.func;
  return true;
}

void wk_find_memory(wk_store *st) {
  wasmtime_extern_t item;
  st->mem_state = WK_MEM_NONE;
  if (wasmtime_instance_export_get(st->cx, &st->instance, "memory", 6,
                                   &item)) {
    if (item.kind == WASMTIME_EXTERN_MEMORY) {
      st->mem = item.of.memory;
      st->mem_state = WK_MEM_SOME;
    }
    wasmtime_extern_delete(&item);
  }
  wk_refresh_memory(st);
}

wk_result wk_call(wk_store *st, wasmtime_func_t fn) {
  wk_result r = {NULL, NULL};
  wasmtime_context_set_epoch_deadline(st->cx, 1);
  r.err = wasmtime_func_call_unchecked(st->cx, &fn, st->raw, st->raw_len,
                                       &r.trap);
  wk_refresh_memory(st);
  return r;
}

// wk_host is every host function: env is the function's index in the
// engine's table. A start function may call the host before Instantiate has
// looked up the instance's exports, so the memory is then found through the
// caller (the only instance in its store).
static wasm_trap_t *wk_host(void *env, wasmtime_caller_t *caller,
                            wasmtime_val_raw_t *vals, size_t n) {
  wasmtime_context_t *cx = wasmtime_caller_context(caller);
  wk_store *st = wasmtime_context_get_data(cx);
  if (st->mem_state == WK_MEM_UNKNOWN) {
    wasmtime_extern_t item;
    st->mem_state = WK_MEM_NONE;
    if (wasmtime_caller_export_get(caller, "memory", 6, &item)) {
      if (item.kind == WASMTIME_EXTERN_MEMORY) {
        st->mem = item.of.memory;
        st->mem_state = WK_MEM_SOME;
      }
      wasmtime_extern_delete(&item);
    }
  }
  wk_refresh_memory(st);
  int rc = wkHostCall(st->handle, (uintptr_t)env, vals, n);
  if (rc == 0) {
    return NULL;
  }
  // The message is not seen: Go reports the reason it kept.
  static const char msg[] = "host function failed";
  return wasmtime_trap_new(msg, sizeof(msg) - 1);
}

wasmtime_error_t *wk_define_func(wasmtime_linker_t *linker, const char *module,
                                 size_t module_len, const char *name,
                                 size_t name_len, const uint8_t *params,
                                 size_t nparams, const uint8_t *results,
                                 size_t nresults, uintptr_t index) {
  wasm_valtype_vec_t ps, rs;
  wasm_valtype_t *p[nparams > 0 ? nparams : 1];
  wasm_valtype_t *r[nresults > 0 ? nresults : 1];
  for (size_t i = 0; i < nparams; i++) {
    p[i] = wasm_valtype_new(params[i]);
  }
  for (size_t i = 0; i < nresults; i++) {
    r[i] = wasm_valtype_new(results[i]);
  }
  wasm_valtype_vec_new(&ps, nparams, p);
  wasm_valtype_vec_new(&rs, nresults, r);
  wasm_functype_t *ty = wasm_functype_new(&ps, &rs); // takes ps, rs
  wasmtime_error_t *err = wasmtime_linker_define_func_unchecked(
      linker, module, module_len, name, name_len, ty, wk_host, (void *)index,
      NULL);
  wasm_functype_delete(ty);
  return err;
}
