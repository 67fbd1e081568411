/* WasmKeep C SDK: the key-value client (wasmkeep_kv.h). The protocol is in
 * docs/sdk-protocols.md, "Key-value". */
#include "wasmkeep_kv.h"

#include <stdlib.h>
#include <string.h>

#define PATH_PREFIX "/wasmkeep-kv/v1/"
#define CACHE_LINES 64
#define MESSAGE_MAX 400

wk_kv wk_kv_client(const char *class_name, uint32_t shards) {
  return (wk_kv){.class_name = class_name, .shards = shards};
}

wk_kv wk_kv_with_read_cache(wk_kv kv, uint32_t max_age_ms) {
  kv.read_cache_ms = max_age_ms;
  return kv;
}

const char *wk_kv_error_name(wk_kv_error_kind kind) {
  switch (kind) {
  case WK_KV_OK:
    return "ok";
  case WK_KV_CONFLICT:
    return "conflict";
  case WK_KV_KEY_TOO_LONG:
    return "key-too-long";
  case WK_KV_STORAGE:
    return "storage";
  case WK_KV_CALL:
    return "call";
  case WK_KV_REFUSED:
    return "refused";
  }
  return "unknown";
}

uint64_t wk_kv_fnv1a(wk_bytes key) {
  uint64_t h = 0xcbf29ce484222325u;
  for (size_t i = 0; i < key.len; i++) {
    h ^= key.ptr[i];
    h *= 0x100000001b3u;
  }
  return h;
}

static const char *shard_address(const wk_kv *kv, uint32_t i) {
  wk_buf b = {0};
  if (!wk_buf_str(&b, kv->class_name) || !wk_buf_str(&b, "/shard-") || !wk_buf_uint(&b, i))
    return NULL;
  return (const char *)wk_buf_bytes(&b).ptr;
}

const char *wk_kv_shard(const wk_kv *kv, wk_bytes key) {
  uint32_t n = kv->shards > 0 ? kv->shards : 1;
  return shard_address(kv, (uint32_t)(wk_kv_fnv1a(key) % n));
}

/* fail fills *err and returns false. */
static bool fail(wk_kv_error *err, wk_kv_error_kind kind, int status, wk_bytes message) {
  if (err != NULL)
    *err = (wk_kv_error){.kind = kind, .status = status, .message = message};
  return false;
}

static bool check_key(wk_bytes key, wk_kv_error *err) {
  if (key.len <= WK_KV_MAX_KEY)
    return true;
  return fail(err, WK_KV_KEY_TOO_LONG, 0, wk_str("the key is over 1024 bytes"));
}

/* call sends one operation to a shard; *reply is the body of a 200. */
static bool call(const char *address, const char *op, const wk_buf *body, wk_reader *reply, wk_kv_error *err) {
  if (address == NULL)
    return fail(err, WK_KV_CALL, 0, wk_str(wk_errmsg()));
  static const wk_header content_type[] = {{{(const uint8_t *)"content-type", 12},
                                            {(const uint8_t *)"application/octet-stream", 24}}};
  wk_buf path = {0};
  if (!wk_buf_str(&path, PATH_PREFIX) || !wk_buf_str(&path, op))
    return fail(err, WK_KV_CALL, 0, wk_str(wk_errmsg()));
  wk_request req = {.method = wk_str("POST"),
                    .path = wk_buf_bytes(&path),
                    .headers = content_type,
                    .header_count = 1,
                    .body = {body->ptr, body->len}};
  wk_response res;
  if (!wk_call(address, &req, &res))
    return fail(err, WK_KV_CALL, 0, wk_str(wk_errmsg()));
  if (res.status == 200) {
    *reply = (wk_reader){(uint8_t *)res.body.ptr, (uint8_t *)res.body.ptr + res.body.len, false};
    return true;
  }
  wk_bytes msg = res.body;
  if (msg.len > MESSAGE_MAX)
    msg.len = MESSAGE_MAX;
  if (msg.len > 0 && msg.ptr[msg.len - 1] == '\n')
    msg.len--;
  uint8_t *copy = wk_alloc(msg.len + 1);
  if (copy != NULL) {
    memcpy(copy, msg.ptr, msg.len);
    copy[msg.len] = 0;
    msg.ptr = copy;
  }
  switch (res.status) {
  case 409:
    return fail(err, WK_KV_CONFLICT, 0, msg);
  case 500:
    return fail(err, WK_KV_STORAGE, 0, msg);
  }
  return fail(err, WK_KV_REFUSED, res.status, msg);
}

/* done checks that a reply was read to its end. */
static bool done(wk_reader *r, wk_kv_error *err) {
  if (!r->bad && r->p == r->end)
    return true;
  return fail(err, WK_KV_REFUSED, 200, wk_str("malformed reply from the shard"));
}

/* ---- The read cache: CACHE_LINES lines, a key's line chosen by its hash ---- */

typedef struct {
  char *class_name; /* NULL: the line is empty */
  uint8_t *key, *value;
  size_t key_len, value_len;
  bool found;
  uint64_t version, expires_at;
  int64_t at; /* when it was read or written */
} line;

static line cache[CACHE_LINES];

static line *line_of(const wk_kv *kv, wk_bytes key) {
  line *l = &cache[wk_kv_fnv1a(key) % CACHE_LINES];
  if (l->class_name == NULL || strcmp(l->class_name, kv->class_name) != 0 || l->key_len != key.len ||
      (key.len > 0 && memcmp(l->key, key.ptr, key.len) != 0))
    return NULL;
  return l;
}

static void clear_line(line *l) {
  free(l->class_name);
  free(l->key);
  free(l->value);
  *l = (line){0};
}

static void forget(const wk_kv *kv, wk_bytes key) {
  line *l = line_of(kv, key);
  if (l != NULL)
    clear_line(l);
}

static uint8_t *dup(const void *p, size_t n) {
  uint8_t *d = malloc(n + 1);
  if (d != NULL) {
    if (n > 0)
      memcpy(d, p, n);
    d[n] = 0;
  }
  return d;
}

/* remember keeps an entry (NULL: absent) for a client with a cache, and
 * drops the key's line for one without. */
static void remember(const wk_kv *kv, wk_bytes key, const wk_kv_entry *e, int64_t at) {
  if (kv->read_cache_ms == 0) {
    forget(kv, key);
    return;
  }
  line *l = &cache[wk_kv_fnv1a(key) % CACHE_LINES];
  clear_line(l);
  l->class_name = (char *)dup(kv->class_name, strlen(kv->class_name));
  l->key = dup(key.ptr, key.len);
  l->value = e != NULL ? dup(e->value.ptr, e->value.len) : NULL;
  if (l->class_name == NULL || l->key == NULL || (e != NULL && l->value == NULL)) {
    clear_line(l);
    return;
  }
  l->key_len = key.len;
  l->found = e != NULL;
  if (e != NULL) {
    l->value_len = e->value.len;
    l->version = e->version;
    l->expires_at = e->expires_at;
  }
  l->at = at;
}

/* ---- Operations ---- */

int wk_kv_get_fresh(const wk_kv *kv, wk_bytes key, wk_kv_entry *entry, wk_kv_error *err) {
  if (!check_key(key, err))
    return -1;
  wk_buf body = {0};
  wk_reader r;
  if (!wk_put_bytes(&body, key)) {
    fail(err, WK_KV_CALL, 0, wk_str(wk_errmsg()));
    return -1;
  }
  if (!call(wk_kv_shard(kv, key), "get", &body, &r, err))
    return -1;
  wk_kv_entry e = {0};
  bool found = wk_get_u8(&r) == 1;
  if (found) {
    e.value = wk_get_bytes(&r);
    e.version = wk_get_u64(&r);
    e.expires_at = wk_get_u64(&r);
  }
  if (!done(&r, err))
    return -1;
  remember(kv, key, found ? &e : NULL, wk_now_ms());
  if (found && entry != NULL)
    *entry = e;
  return found ? 1 : 0;
}

int wk_kv_get(const wk_kv *kv, wk_bytes key, wk_kv_entry *entry, wk_kv_error *err) {
  line *l = kv->read_cache_ms > 0 ? line_of(kv, key) : NULL;
  int64_t now = wk_now_ms();
  if (l != NULL && now - l->at <= (int64_t)kv->read_cache_ms) {
    if (!l->found || (l->expires_at != 0 && (int64_t)l->expires_at <= now))
      return 0;
    if (entry != NULL) {
      uint8_t *v = wk_alloc(l->value_len + 1);
      if (v == NULL) {
        fail(err, WK_KV_CALL, 0, wk_str(wk_errmsg()));
        return -1;
      }
      memcpy(v, l->value, l->value_len + 1);
      *entry = (wk_kv_entry){{v, l->value_len}, l->version, l->expires_at};
    }
    return 1;
  }
  return wk_kv_get_fresh(kv, key, entry, err);
}

static bool put_expect(wk_buf *b, wk_kv_expect e) {
  return wk_put_u8(b, (uint8_t)e.kind) && wk_put_u64(b, e.kind == WK_KV_VERSION ? e.version : 0);
}

bool wk_kv_put_with(const wk_kv *kv, wk_bytes key, wk_bytes value, const wk_kv_put_options *opts, uint64_t *version,
                    wk_kv_error *err) {
  static const wk_kv_put_options none = {0};
  if (opts == NULL)
    opts = &none;
  if (!check_key(key, err))
    return false;
  wk_buf body = {0};
  if (!wk_put_bytes(&body, key) || !wk_put_bytes(&body, value) || !put_expect(&body, opts->expect) ||
      !wk_put_u64(&body, opts->ttl_ms) || !wk_put_u8(&body, opts->local ? 1 : 0))
    return fail(err, WK_KV_CALL, 0, wk_str(wk_errmsg()));
  int64_t start = wk_now_ms();
  wk_reader r;
  if (!call(wk_kv_shard(kv, key), "put", &body, &r, err)) {
    forget(kv, key);
    return false;
  }
  uint64_t v = wk_get_u64(&r);
  if (!done(&r, err)) {
    forget(kv, key);
    return false;
  }
  wk_kv_entry e = {value, v, opts->ttl_ms > 0 ? (uint64_t)start + opts->ttl_ms : 0};
  remember(kv, key, &e, wk_now_ms());
  if (version != NULL)
    *version = v;
  return true;
}

bool wk_kv_put(const wk_kv *kv, wk_bytes key, wk_bytes value, uint64_t *version, wk_kv_error *err) {
  return wk_kv_put_with(kv, key, value, NULL, version, err);
}

static wk_kv_expect expect_of(const uint64_t *expected) {
  return expected != NULL ? (wk_kv_expect){WK_KV_VERSION, *expected} : (wk_kv_expect){WK_KV_ABSENT, 0};
}

bool wk_kv_compare_and_set(const wk_kv *kv, wk_bytes key, const uint64_t *expected, wk_bytes value,
                           uint64_t *version, wk_kv_error *err) {
  wk_kv_put_options opts = {.expect = expect_of(expected)};
  return wk_kv_put_with(kv, key, value, &opts, version, err);
}

static int delete_with(const wk_kv *kv, wk_bytes key, wk_kv_expect expect, wk_kv_error *err) {
  if (!check_key(key, err))
    return -1;
  wk_buf body = {0};
  if (!wk_put_bytes(&body, key) || !put_expect(&body, expect)) {
    fail(err, WK_KV_CALL, 0, wk_str(wk_errmsg()));
    return -1;
  }
  wk_reader r;
  if (!call(wk_kv_shard(kv, key), "delete", &body, &r, err)) {
    forget(kv, key);
    return -1;
  }
  uint8_t deleted = wk_get_u8(&r);
  if (!done(&r, err)) {
    forget(kv, key);
    return -1;
  }
  remember(kv, key, NULL, wk_now_ms());
  return deleted == 1;
}

int wk_kv_delete(const wk_kv *kv, wk_bytes key, wk_kv_error *err) {
  return delete_with(kv, key, (wk_kv_expect){WK_KV_ANY, 0}, err);
}

int wk_kv_delete_if(const wk_kv *kv, wk_bytes key, const uint64_t *expected, wk_kv_error *err) {
  return delete_with(kv, key, expect_of(expected), err);
}

/* byte_order compares keys as memcmp does, a prefix first. */
static int byte_order(const void *a, const void *b) {
  const wk_bytes *x = a, *y = b;
  size_t n = x->len < y->len ? x->len : y->len;
  int c = n > 0 ? memcmp(x->ptr, y->ptr, n) : 0;
  if (c != 0)
    return c;
  return (x->len > y->len) - (x->len < y->len);
}

bool wk_kv_list(const wk_kv *kv, wk_bytes prefix, const wk_bytes *after, size_t limit, wk_kv_keys *page,
                wk_kv_error *err) {
  if (limit == 0)
    limit = WK_KV_DEFAULT_LIST;
  if (limit > WK_KV_MAX_LIST)
    limit = WK_KV_MAX_LIST;
  if (!check_key(prefix, err) || (after != NULL && !check_key(*after, err)))
    return false;
  wk_buf body = {0};
  if (!wk_put_bytes(&body, prefix) || !wk_put_u8(&body, after != NULL) ||
      !wk_put_bytes(&body, after != NULL ? *after : wk_str("")) || !wk_put_u32(&body, (uint32_t)limit))
    return fail(err, WK_KV_CALL, 0, wk_str(wk_errmsg()));
  uint32_t shards = kv->shards > 0 ? kv->shards : 1;
  wk_bytes *all = NULL;
  size_t count = 0, cap = 0;
  for (uint32_t i = 0; i < shards; i++) {
    wk_reader r;
    if (!call(shard_address(kv, i), "list", &body, &r, err))
      return false;
    size_t n = wk_get_count(&r, 4);
    if (count + n > cap) {
      size_t grown = count + n + (count + n) / 2 + 8;
      wk_bytes *more = wk_alloc(grown * sizeof *more);
      if (more == NULL)
        return fail(err, WK_KV_CALL, 0, wk_str(wk_errmsg()));
      if (count > 0)
        memcpy(more, all, count * sizeof *more);
      cap = grown;
      all = more;
    }
    for (size_t j = 0; j < n; j++)
      all[count++] = wk_get_bytes(&r);
    if (!done(&r, err))
      return false;
  }
  if (count > 1)
    qsort(all, count, sizeof *all, byte_order);
  page->keys = all;
  page->count = count < limit ? count : limit;
  return true;
}
