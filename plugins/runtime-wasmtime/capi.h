// The part of the Wasmtime C API (version 39.0.0, the one
// github.com/bytecodealliance/wasmtime-go/v39 v39.0.1 ships in build/include
// and links as build/<os>-<arch>/libwasmtime.a) that this package calls.
//
// cgo cannot point an include path at another module's directory, so the
// declarations are repeated here, as the headers declare them (wasm.h, wasi.h,
// wasmtime/*.h; Apache-2.0 WITH LLVM-exception, Copyright the Wasmtime
// Project Developers). Only the layouts of the structs this package reads or
// passes by value matter (wasmtime_func_t, wasmtime_memory_t,
// wasmtime_extern_t, wasmtime_instance_t, wasmtime_val_raw_t, the vectors);
// every other type is opaque. Update this file with the module's headers when
// the dependency moves.

#ifndef WASMKEEP_WASMTIME_CAPI_H
#define WASMKEEP_WASMTIME_CAPI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WASMTIME_VERSION "39.0.0"

// wasm.h

typedef struct wasm_config_t wasm_config_t;
typedef struct wasm_engine_t wasm_engine_t;
typedef struct wasm_valtype_t wasm_valtype_t;
typedef struct wasm_functype_t wasm_functype_t;
typedef struct wasm_externtype_t wasm_externtype_t;
typedef struct wasm_importtype_t wasm_importtype_t;
typedef struct wasm_exporttype_t wasm_exporttype_t;
typedef struct wasm_trap_t wasm_trap_t;

typedef struct wasm_byte_vec_t {
  size_t size;
  char *data;
} wasm_byte_vec_t;
typedef wasm_byte_vec_t wasm_name_t;

typedef struct wasm_valtype_vec_t {
  size_t size;
  wasm_valtype_t **data;
} wasm_valtype_vec_t;

typedef struct wasm_importtype_vec_t {
  size_t size;
  wasm_importtype_t **data;
} wasm_importtype_vec_t;

typedef struct wasm_exporttype_vec_t {
  size_t size;
  wasm_exporttype_t **data;
} wasm_exporttype_vec_t;

// wasm_valkind_t values; WASMTIME_V128 is from wasmtime/val.h.
#define WASM_I32 0
#define WASM_I64 1
#define WASM_F32 2
#define WASM_F64 3
#define WASMTIME_V128 4
#define WASM_EXTERNREF 128
#define WASM_FUNCREF 129

// wasm_externkind_t values.
#define WASM_EXTERN_FUNC 0
#define WASM_EXTERN_GLOBAL 1
#define WASM_EXTERN_TABLE 2
#define WASM_EXTERN_MEMORY 3

void wasm_byte_vec_delete(wasm_byte_vec_t *);
wasm_config_t *wasm_config_new(void);
wasm_engine_t *wasm_engine_new_with_config(wasm_config_t *);
void wasm_engine_delete(wasm_engine_t *);
wasm_valtype_t *wasm_valtype_new(uint8_t);
uint8_t wasm_valtype_kind(const wasm_valtype_t *);
void wasm_valtype_vec_new(wasm_valtype_vec_t *out, size_t,
                          wasm_valtype_t *const[]);
void wasm_valtype_vec_new_empty(wasm_valtype_vec_t *out);
wasm_functype_t *wasm_functype_new(wasm_valtype_vec_t *params,
                                   wasm_valtype_vec_t *results);
const wasm_valtype_vec_t *wasm_functype_params(const wasm_functype_t *);
const wasm_valtype_vec_t *wasm_functype_results(const wasm_functype_t *);
void wasm_functype_delete(wasm_functype_t *);
uint8_t wasm_externtype_kind(const wasm_externtype_t *);
const wasm_functype_t *
wasm_externtype_as_functype_const(const wasm_externtype_t *);
const wasm_name_t *wasm_importtype_module(const wasm_importtype_t *);
const wasm_name_t *wasm_importtype_name(const wasm_importtype_t *);
const wasm_externtype_t *wasm_importtype_type(const wasm_importtype_t *);
void wasm_importtype_vec_delete(wasm_importtype_vec_t *);
const wasm_name_t *wasm_exporttype_name(const wasm_exporttype_t *);
const wasm_externtype_t *wasm_exporttype_type(const wasm_exporttype_t *);
void wasm_exporttype_vec_delete(wasm_exporttype_vec_t *);
void wasm_trap_message(const wasm_trap_t *, wasm_byte_vec_t *out);
void wasm_trap_delete(wasm_trap_t *);

// wasi.h

typedef struct wasi_config_t wasi_config_t;

wasi_config_t *wasi_config_new(void);

// wasmtime/error.h, trap.h

typedef struct wasmtime_error wasmtime_error_t;

wasmtime_error_t *wasmtime_error_new(const char *);
void wasmtime_error_delete(wasmtime_error_t *);
void wasmtime_error_message(const wasmtime_error_t *, wasm_name_t *message);
bool wasmtime_error_exit_status(const wasmtime_error_t *, int *status);
wasm_trap_t *wasmtime_trap_new(const char *msg, size_t msg_len);

// wasmtime/config.h, engine.h

void wasmtime_config_epoch_interruption_set(wasm_config_t *, bool);
void wasmtime_config_parallel_compilation_set(wasm_config_t *, bool);
typedef uint8_t wasmtime_opt_level_t;
enum wasmtime_opt_level_enum {
  WASMTIME_OPT_LEVEL_NONE,
  WASMTIME_OPT_LEVEL_SPEED,
  WASMTIME_OPT_LEVEL_SPEED_AND_SIZE,
};
void wasmtime_config_cranelift_opt_level_set(wasm_config_t *, wasmtime_opt_level_t);
void wasmtime_config_wasm_simd_set(wasm_config_t *, bool);
void wasmtime_config_wasm_bulk_memory_set(wasm_config_t *, bool);
void wasmtime_config_wasm_reference_types_set(wasm_config_t *, bool);
void wasmtime_config_wasm_multi_value_set(wasm_config_t *, bool);
void wasmtime_config_wasm_threads_set(wasm_config_t *, bool);
void wasmtime_config_wasm_tail_call_set(wasm_config_t *, bool);
void wasmtime_config_wasm_function_references_set(wasm_config_t *, bool);
void wasmtime_config_wasm_gc_set(wasm_config_t *, bool);
void wasmtime_config_wasm_relaxed_simd_set(wasm_config_t *, bool);
void wasmtime_config_wasm_multi_memory_set(wasm_config_t *, bool);
void wasmtime_config_wasm_memory64_set(wasm_config_t *, bool);
void wasmtime_config_wasm_wide_arithmetic_set(wasm_config_t *, bool);
void wasmtime_config_wasm_exceptions_set(wasm_config_t *, bool);
void wasmtime_config_wasm_custom_page_sizes_set(wasm_config_t *, bool);
void wasmtime_config_wasm_stack_switching_set(wasm_config_t *, bool);
void wasmtime_engine_increment_epoch(wasm_engine_t *);

// wasmtime/module.h

typedef struct wasmtime_module wasmtime_module_t;

wasmtime_error_t *wasmtime_module_new(wasm_engine_t *, const uint8_t *wasm,
                                      size_t wasm_len, wasmtime_module_t **ret);
void wasmtime_module_delete(wasmtime_module_t *);
void wasmtime_module_imports(const wasmtime_module_t *,
                             wasm_importtype_vec_t *out);
void wasmtime_module_exports(const wasmtime_module_t *,
                             wasm_exporttype_vec_t *out);
wasmtime_error_t *wasmtime_module_serialize(wasmtime_module_t *,
                                            wasm_byte_vec_t *ret);
wasmtime_error_t *wasmtime_module_deserialize(wasm_engine_t *,
                                              const uint8_t *bytes,
                                              size_t bytes_len,
                                              wasmtime_module_t **ret);
wasmtime_error_t *wasmtime_module_deserialize_file(wasm_engine_t *,
                                                   const char *path,
                                                   wasmtime_module_t **ret);

// wasmtime/store.h

typedef struct wasmtime_store wasmtime_store_t;
typedef struct wasmtime_context wasmtime_context_t;
typedef uint8_t wasmtime_update_deadline_kind_t;
#define WASMTIME_UPDATE_DEADLINE_CONTINUE 0

wasmtime_store_t *wasmtime_store_new(wasm_engine_t *, void *data,
                                     void (*finalizer)(void *));
wasmtime_context_t *wasmtime_store_context(wasmtime_store_t *);
void wasmtime_store_limiter(wasmtime_store_t *, int64_t memory_size,
                            int64_t table_elements, int64_t instances,
                            int64_t tables, int64_t memories);
void wasmtime_store_delete(wasmtime_store_t *);
void *wasmtime_context_get_data(const wasmtime_context_t *);
wasmtime_error_t *wasmtime_context_set_wasi(wasmtime_context_t *,
                                            wasi_config_t *);
void wasmtime_context_set_epoch_deadline(wasmtime_context_t *,
                                         uint64_t ticks_beyond_current);
void wasmtime_store_epoch_deadline_callback(
    wasmtime_store_t *,
    wasmtime_error_t *(*func)(wasmtime_context_t *, void *data,
                              uint64_t *epoch_deadline_delta,
                              wasmtime_update_deadline_kind_t *update_kind),
    void *data, void (*finalizer)(void *));

// wasmtime/extern.h, instance.h, val.h

typedef struct wasmtime_func {
  uint64_t store_id;
  void *__private;
} wasmtime_func_t;

typedef struct wasmtime_table {
  struct {
    uint64_t store_id;
    uint32_t __private1;
  };
  uint32_t __private2;
} wasmtime_table_t;

typedef struct wasmtime_memory {
  struct {
    uint64_t store_id;
    uint32_t __private1;
  };
  uint32_t __private2;
} wasmtime_memory_t;

typedef struct wasmtime_global {
  uint64_t store_id;
  uint32_t __private1;
  uint32_t __private2;
  uint32_t __private3;
} wasmtime_global_t;

#define WASMTIME_EXTERN_FUNC 0
#define WASMTIME_EXTERN_MEMORY 3

typedef union wasmtime_extern_union {
  wasmtime_func_t func;
  wasmtime_global_t global;
  wasmtime_table_t table;
  wasmtime_memory_t memory;
  struct wasmtime_sharedmemory *sharedmemory;
} wasmtime_extern_union_t;

typedef struct wasmtime_extern {
  uint8_t kind;
  wasmtime_extern_union_t of;
} wasmtime_extern_t;

typedef struct wasmtime_instance {
  uint64_t store_id;
  size_t __private;
} wasmtime_instance_t;

typedef struct wasmtime_instance_pre wasmtime_instance_pre_t;

// wasmtime_val_raw_t: 16 bytes, 8-aligned, little-endian fields.
typedef union wasmtime_val_raw {
  int32_t i32;
  int64_t i64;
  float f32;
  double f64;
  uint8_t v128[16];
  uint32_t anyref;
  uint32_t externref;
  void *funcref;
} wasmtime_val_raw_t;

void wasmtime_extern_delete(wasmtime_extern_t *);
bool wasmtime_instance_export_get(wasmtime_context_t *,
                                  const wasmtime_instance_t *,
                                  const char *name, size_t name_len,
                                  wasmtime_extern_t *item);
void wasmtime_instance_pre_delete(wasmtime_instance_pre_t *);
wasmtime_error_t *
wasmtime_instance_pre_instantiate(const wasmtime_instance_pre_t *,
                                  wasmtime_context_t *,
                                  wasmtime_instance_t *instance,
                                  wasm_trap_t **trap);

// wasmtime/func.h, memory.h

typedef struct wasmtime_caller wasmtime_caller_t;
typedef wasm_trap_t *(*wasmtime_func_unchecked_callback_t)(
    void *env, wasmtime_caller_t *caller, wasmtime_val_raw_t *args_and_results,
    size_t num_args_and_results);

wasmtime_context_t *wasmtime_caller_context(wasmtime_caller_t *);
bool wasmtime_caller_export_get(wasmtime_caller_t *, const char *name,
                                size_t name_len, wasmtime_extern_t *item);
wasmtime_error_t *wasmtime_func_call_unchecked(
    wasmtime_context_t *, const wasmtime_func_t *,
    wasmtime_val_raw_t *args_and_results, size_t args_and_results_len,
    wasm_trap_t **trap);
uint8_t *wasmtime_memory_data(const wasmtime_context_t *,
                              const wasmtime_memory_t *);
size_t wasmtime_memory_data_size(const wasmtime_context_t *,
                                 const wasmtime_memory_t *);

// wasmtime/linker.h

typedef struct wasmtime_linker wasmtime_linker_t;

wasmtime_linker_t *wasmtime_linker_new(wasm_engine_t *);
void wasmtime_linker_delete(wasmtime_linker_t *);
void wasmtime_linker_allow_shadowing(wasmtime_linker_t *, bool);
wasmtime_error_t *wasmtime_linker_define_wasi(wasmtime_linker_t *);
wasmtime_error_t *wasmtime_linker_define_func_unchecked(
    wasmtime_linker_t *, const char *module, size_t module_len,
    const char *name, size_t name_len, const wasm_functype_t *ty,
    wasmtime_func_unchecked_callback_t cb, void *data,
    void (*finalizer)(void *));
wasmtime_error_t *
wasmtime_linker_instantiate_pre(const wasmtime_linker_t *,
                                const wasmtime_module_t *,
                                wasmtime_instance_pre_t **instance_pre);

#endif
