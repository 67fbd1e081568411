/* WasmKeep C SDK: the key-value client (sdk/c/README.md, "Key-value
 * client"). It calls the shards of a key-value class (the Go class of
 * sdk/go/kv, served as, say, class kv) with wk_call, in the protocol of
 * docs/sdk-protocols.md. Keys are spread over <class>/shard-0 ..
 * <class>/shard-<n-1> by FNV-1a 64 of the key modulo n, as in every SDK.
 *
 * Memory: what a call hands out (an entry's value, a page of keys, an
 * error's message) lives in the event arena, valid until the hook returns,
 * as everything the SDK hands out; there is nothing to free. Bytes are
 * NUL-terminated one past their length.
 *
 * Errors: each call returns false (or -1) and fills *err, if err is not
 * NULL, with a kind and a message. */
#ifndef WASMKEEP_KV_H
#define WASMKEEP_KV_H

#include "wasmkeep.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The longest key, in bytes. */
#define WK_KV_MAX_KEY 1024
/* The most keys one list returns, and what a limit of 0 asks for. */
#define WK_KV_MAX_LIST 1000
#define WK_KV_DEFAULT_LIST 100

/* A client: the shards' class, their number (the same for every caller)
 * and the read cache's maximum age in milliseconds (0: no cache). It
 * borrows class_name. static const wk_kv store = {.class_name = "kv",
 * .shards = 8}; works. */
typedef struct {
  const char *class_name;
  uint32_t shards;
  uint32_t read_cache_ms;
} wk_kv;

wk_kv wk_kv_client(const char *class_name, uint32_t shards);
/* wk_kv_with_read_cache returns kv with a read cache: wk_kv_get answers
 * from memory what this instance read or wrote through a client of the
 * class for up to max_age_ms. The cache (64 lines, kept in malloc'd memory
 * across events) is lost with the instance. wk_kv_get_fresh skips it. */
wk_kv wk_kv_with_read_cache(wk_kv kv, uint32_t max_age_ms);

typedef enum {
  WK_KV_OK = 0,
  WK_KV_CONFLICT,     /* the expectation did not hold (409) */
  WK_KV_KEY_TOO_LONG, /* over WK_KV_MAX_KEY bytes; nothing was sent */
  WK_KV_STORAGE,      /* the shard's database failed (500) */
  WK_KV_CALL,         /* the call failed: a write may have applied */
  WK_KV_REFUSED,      /* another status (status), or a reply that does not decode (status 200) */
} wk_kv_error_kind;

typedef struct {
  wk_kv_error_kind kind;
  int status;       /* WK_KV_REFUSED: the shard's status */
  wk_bytes message; /* the shard's or the host's message (at most 400 bytes of a refusal) */
} wk_kv_error;

/* wk_kv_error_name is the kind's name: "conflict", "key-too-long",
 * "storage", "call", "refused" (as the Go client's). */
const char *wk_kv_error_name(wk_kv_error_kind kind);

typedef struct {
  wk_bytes value;
  uint64_t version;    /* changes with every write; never reused within a shard */
  uint64_t expires_at; /* milliseconds since the Unix epoch; 0: never */
} wk_kv_entry;

/* The condition of a write: any, absent, or the key's version. */
typedef enum { WK_KV_ANY = 0, WK_KV_ABSENT = 1, WK_KV_VERSION = 2 } wk_kv_expect_kind;

typedef struct {
  wk_kv_expect_kind kind;
  uint64_t version;
} wk_kv_expect;

/* Zeroed: a durable, unconditional write that never expires. */
typedef struct {
  bool local;      /* return once committed, not waiting for durability */
  uint64_t ttl_ms; /* expire this long after the write; 0: never */
  wk_kv_expect expect;
} wk_kv_put_options;

/* A page of keys, in byte order. */
typedef struct {
  const wk_bytes *keys;
  size_t count;
} wk_kv_keys;

/* wk_kv_shard is the address of key's shard, "<class>/shard-<i>" (arena). */
const char *wk_kv_shard(const wk_kv *kv, wk_bytes key);
uint64_t wk_kv_fnv1a(wk_bytes key);

/* 1 found (*entry set), 0 absent or expired, -1 failed. */
int wk_kv_get(const wk_kv *kv, wk_bytes key, wk_kv_entry *entry, wk_kv_error *err);
int wk_kv_get_fresh(const wk_kv *kv, wk_bytes key, wk_kv_entry *entry, wk_kv_error *err);
/* Writes; *version (if not NULL) gets the new version. */
bool wk_kv_put(const wk_kv *kv, wk_bytes key, wk_bytes value, uint64_t *version, wk_kv_error *err);
bool wk_kv_put_with(const wk_kv *kv, wk_bytes key, wk_bytes value, const wk_kv_put_options *opts, uint64_t *version,
                    wk_kv_error *err);
/* Only if the key is at *expected, or absent when expected is NULL;
 * otherwise WK_KV_CONFLICT. */
bool wk_kv_compare_and_set(const wk_kv *kv, wk_bytes key, const uint64_t *expected, wk_bytes value,
                           uint64_t *version, wk_kv_error *err);
/* 1 deleted, 0 the key had no value, -1 failed; durable. wk_kv_delete_if
 * deletes only if the key is at *expected (absent when NULL). */
int wk_kv_delete(const wk_kv *kv, wk_bytes key, wk_kv_error *err);
int wk_kv_delete_if(const wk_kv *kv, wk_bytes key, const uint64_t *expected, wk_kv_error *err);
/* Up to limit keys that start with prefix (0: WK_KV_DEFAULT_LIST, at most
 * WK_KV_MAX_LIST), after *after if not NULL, from every shard. */
bool wk_kv_list(const wk_kv *kv, wk_bytes prefix, const wk_bytes *after, size_t limit, wk_kv_keys *page,
                wk_kv_error *err);

#ifdef __cplusplus
}
#endif
#endif
