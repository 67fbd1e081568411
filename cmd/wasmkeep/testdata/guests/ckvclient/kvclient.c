/* kvclient drives the C key-value client (sdk/c/wasmkeep_kv.h) over HTTP,
 * for the key-value contract test: the same routes and answers as the Go
 * guest, testdata/guests/kvclient (its comment lists them). It uses the
 * shards kv/shard-0 .. kv/shard-3; the routes under /cached/ go through a
 * client with a read cache of 500 ms. */
#include "wasmkeep.h"
#include "wasmkeep_kv.h"

static const wk_kv store = {.class_name = "kv", .shards = 4};
static const wk_kv cached = {.class_name = "kv", .shards = 4, .read_cache_ms = 500};

static bool param(const wk_request *req, const char *name, wk_bytes *value) {
  *value = wk_str("");
  return wk_url_param(req->path, name, value);
}

/* parse_expect reads ?expect=absent|VERSION; false if it is neither. */
static bool parse_expect(const wk_request *req, wk_kv_expect *e) {
  wk_bytes s;
  *e = (wk_kv_expect){WK_KV_ANY, 0};
  if (!param(req, "expect", &s))
    return true;
  if (wk_eq(s, "absent")) {
    e->kind = WK_KV_ABSENT;
    return true;
  }
  int64_t v;
  if (s.len == 0 || s.ptr[0] == '-' || s.ptr[0] == '+' || !wk_parse_int(s, &v))
    return false;
  *e = (wk_kv_expect){WK_KV_VERSION, (uint64_t)v};
  return true;
}

static int answer_error(wk_writer *w, const wk_kv_error *err) {
  wk_write_str(w, "error ");
  wk_write_str(w, wk_kv_error_name(err->kind));
  if (err->kind == WK_KV_REFUSED) {
    wk_write_str(w, " ");
    wk_write_int(w, err->status);
  }
  return !wk_write_str(w, "\n");
}

static bool starts_with(wk_bytes b, const char *prefix, wk_bytes *rest) {
  size_t n = wk_str(prefix).len;
  if (b.len < n || !wk_eq((wk_bytes){b.ptr, n}, prefix))
    return false;
  *rest = (wk_bytes){b.ptr + n, b.len - n};
  return true;
}

int wk_fetch(const wk_request *req, wk_writer *w) {
  const wk_kv *c = &store;
  wk_bytes path = wk_url_path(req->path), rest;
  if (starts_with(path, "/cached", &rest)) {
    c = &cached;
    path = rest;
  }
  wk_bytes key;
  param(req, "key", &key);
  wk_kv_expect expect;
  if (!parse_expect(req, &expect))
    return !wk_http_error(w, 400, "expect: absent or a version");
  wk_kv_error err;
  if (wk_eq(path, "/put") || wk_eq(path, "/cas")) {
    wk_kv_put_options opts = {.expect = expect};
    wk_bytes s;
    int64_t ttl;
    if (param(req, "ttl", &s) && wk_parse_int(s, &ttl))
      opts.ttl_ms = (uint64_t)ttl;
    opts.local = param(req, "local", &s) && wk_eq(s, "1");
    uint64_t v;
    bool ok;
    if (wk_eq(path, "/cas"))
      ok = wk_kv_compare_and_set(c, key, expect.kind == WK_KV_VERSION ? &expect.version : NULL, req->body, &v,
                                 &err);
    else
      ok = wk_kv_put_with(c, key, req->body, &opts, &v, &err);
    if (!ok)
      return answer_error(w, &err);
    wk_buf b = {0};
    wk_buf_uint(&b, v);
    wk_write(w, b.ptr, b.len);
    return !wk_write_str(w, "\n");
  }
  if (wk_eq(path, "/get") || wk_eq(path, "/fresh")) {
    wk_kv_entry e;
    int found = wk_eq(path, "/get") ? wk_kv_get(c, key, &e, &err) : wk_kv_get_fresh(c, key, &e, &err);
    if (found < 0)
      return answer_error(w, &err);
    if (found == 0)
      return !wk_write_str(w, "absent\n");
    wk_buf b = {0};
    wk_buf_uint(&b, e.version);
    wk_buf_str(&b, " ");
    wk_buf_uint(&b, e.expires_at);
    wk_buf_str(&b, " ");
    wk_write(w, b.ptr, b.len);
    wk_write(w, e.value.ptr, e.value.len);
    return !wk_write_str(w, "\n");
  }
  if (wk_eq(path, "/delete")) {
    int deleted;
    if (expect.kind == WK_KV_ANY)
      deleted = wk_kv_delete(c, key, &err);
    else
      deleted = wk_kv_delete_if(c, key, expect.kind == WK_KV_VERSION ? &expect.version : NULL, &err);
    if (deleted < 0)
      return answer_error(w, &err);
    return !wk_write_str(w, deleted ? "deleted\n" : "absent\n");
  }
  if (wk_eq(path, "/list")) {
    wk_bytes prefix, after, s;
    param(req, "prefix", &prefix);
    bool has_after = param(req, "after", &after);
    int64_t limit = 0;
    if (param(req, "limit", &s) && (!wk_parse_int(s, &limit) || limit < 0))
      limit = 0;
    wk_kv_keys page;
    if (!wk_kv_list(c, prefix, has_after ? &after : NULL, (size_t)limit, &page, &err))
      return answer_error(w, &err);
    for (size_t i = 0; i < page.count; i++) {
      wk_write(w, page.keys[i].ptr, page.keys[i].len);
      wk_write_str(w, "\n");
    }
    return 0;
  }
  return !wk_http_error(w, 404, "no such route");
}
