/* hostcall passes host functions ranges that reach outside its memory, which
 * the SDKs never do, for cmd/wasmkeep/hostcall_test.go; and deletes itself
 * from requests and WebSocket messages for delete_socket_test.go. */
#include <string.h>

#include "wasmkeep.h"

#define HOST(name) __attribute__((import_module("wasmkeep"), import_name(name)))

HOST("take_pending") int32_t raw_take_pending(uint32_t ptr);
HOST("hook_error") void raw_hook_error(uint32_t ptr, uint32_t len);
HOST("respond") int32_t raw_respond(uint32_t ptr, uint32_t len);
HOST("sql_exec")
int32_t raw_sql_exec(const char *sql, size_t sql_len, const void *params, size_t params_len, uint32_t flags,
                     uint32_t out, uint32_t cap);
HOST("sql_query")
int32_t raw_sql_query(const char *sql, size_t sql_len, const void *params, size_t params_len, uint32_t out,
                      uint32_t cap);
HOST("delete_self") int32_t raw_delete_self(uint32_t flags, uint32_t out, uint32_t cap);
HOST("actor_call")
int32_t raw_actor_call(const char *addr, size_t addr_len, const void *req, size_t req_len, uint32_t out,
                       uint32_t cap);
HOST("self_address") int32_t raw_self_address(uint32_t out, uint32_t cap);
HOST("ws_send") int32_t raw_ws_send(uint64_t conn, uint32_t kind, uint32_t ptr, uint32_t len);
HOST("ws_close") void raw_ws_close(uint64_t conn, uint32_t code, uint32_t ptr, uint32_t len);
HOST("ws_connections") int32_t raw_ws_connections(uint32_t out, uint32_t cap);
HOST("env_get") int32_t raw_env_get(const char *name, size_t name_len, uint32_t out, uint32_t cap);
HOST("http_fetch") int32_t raw_http_fetch(const void *req, size_t req_len, uint32_t out, uint32_t cap);

static const uint8_t no_params[4]; /* an empty Values list */

int wk_init(void) { return !wk_exec("CREATE TABLE IF NOT EXISTS kv (k TEXT)", WK_NO_ARGS, NULL); }

/* param is a query parameter as a C string, "" if absent. */
static const char *param(const wk_request *req, const char *name) {
  wk_bytes v;
  return wk_url_param(req->path, name, &v) ? (const char *)v.ptr : "";
}

static uint32_t uint_param(const wk_request *req, const char *name) {
  int64_t v = 0;
  wk_bytes s;
  if (wk_url_param(req->path, name, &s))
    wk_parse_int(s, &v);
  return (uint32_t)v;
}

/* u32 and str append the ABI's encodings (docs/abi.md, section 5). */
static void u32(wk_buf *b, uint32_t v) {
  uint8_t le[4] = {v, v >> 8, v >> 16, v >> 24};
  wk_buf_write(b, le, 4);
}

static void str(wk_buf *b, const char *s) {
  u32(b, (uint32_t)strlen(s));
  wk_buf_str(b, s);
}

/* request encodes a Request with no headers and an empty body. */
static void request(wk_buf *b, const char *method, const char *path) {
  str(b, method);
  str(b, path);
  u32(b, 0);
  u32(b, 0);
}

static int put(const char *k) { return !wk_exec("INSERT INTO kv VALUES (?)", WK_ARGS(wk_text(k)), NULL); }

/* bad calls the host function fn with its buffer at `off` bytes before the
 * end of memory, `cap` (or `len`) bytes long. It returns only if the host
 * did not trap. */
static int bad(const wk_request *req, wk_writer *w) {
  const char *fn = param(req, "fn");
  uint32_t cap = uint_param(req, "cap"), ptr = (uint32_t)__builtin_wasm_memory_size(0) * 65536 - uint_param(req, "off");
  static const char insert[] = "INSERT INTO kv VALUES ('bad')";
  int32_t n = 0;
  if (!strcmp(fn, "sql_exec") || !strcmp(fn, "sql_exec_durable"))
    n = raw_sql_exec(insert, sizeof insert - 1, no_params, 4, fn[8] != 0, ptr, cap);
  else if (!strcmp(fn, "sql_query")) {
    static const char returning[] = "INSERT INTO kv VALUES ('bad') RETURNING k";
    n = raw_sql_query(returning, sizeof returning - 1, no_params, 4, ptr, cap);
  } else if (!strcmp(fn, "delete_self") || !strcmp(fn, "delete_self_durable"))
    n = raw_delete_self(fn[11] != 0, ptr, cap);
  else if (!strcmp(fn, "self_address"))
    n = raw_self_address(ptr, cap);
  else if (!strcmp(fn, "env_get"))
    n = raw_env_get("GREETING", 8, ptr, cap);
  else if (!strcmp(fn, "ws_connections"))
    n = raw_ws_connections(ptr, cap);
  else if (!strcmp(fn, "actor_call")) {
    wk_buf r = {0};
    request(&r, "POST", "/put");
    n = raw_actor_call(param(req, "to"), strlen(param(req, "to")), r.ptr, r.len, ptr, cap);
  } else if (!strcmp(fn, "http_fetch")) {
    wk_buf r = {0};
    request(&r, "GET", param(req, "url"));
    u32(&r, 0); /* the step timeout: the default */
    n = raw_http_fetch(r.ptr, r.len, ptr, cap);
  } else if (!strcmp(fn, "take_pending")) {
    static const char query[] = "SELECT 'a payload for take_pending'";
    raw_sql_query(query, sizeof query - 1, no_params, 4, 0, 0); /* nothing fits: all pending */
    n = raw_take_pending(ptr);
  } else if (!strcmp(fn, "respond"))
    n = raw_respond(ptr, cap);
  else if (!strcmp(fn, "hook_error"))
    raw_hook_error(ptr, cap);
  else
    return wk_fail("unknown fn");
  wk_write_str(w, "returned ");
  return !wk_write_int(w, n);
}

int wk_fetch(const wk_request *req, wk_writer *w) {
  wk_bytes route = wk_url_path(req->path);
  if (wk_eq(route, "/bad"))
    return bad(req, w);
  if (wk_eq(route, "/put"))
    return put("put");
  if (wk_eq(route, "/rows")) { /* the rows of kv: how many, and how many say 'bad' */
    int64_t all, bad_rows;
    if (!wk_query_int("SELECT count(*) FROM kv", WK_NO_ARGS, 0, &all) ||
        !wk_query_int("SELECT count(*) FROM kv WHERE k = 'bad'", WK_NO_ARGS, 0, &bad_rows))
      return 1;
    wk_write_int(w, all);
    wk_write_str(w, " ");
    return !wk_write_int(w, bad_rows);
  }
  if (wk_eq(route, "/create")) { /* creates name in the class to, by an inside call */
    wk_request call = {.method = wk_str("POST"), .path = wk_str("/put")};
    wk_response res;
    if (!wk_call(param(req, "to"), &call, &res))
      return 1;
    return !wk_write_int(w, res.status);
  }
  if (wk_eq(route, "/delete-then-trap") || wk_eq(route, "/delete-durable-then-trap")) {
    if (!(route.len > 17 ? wk_delete_self_durable() : wk_delete_self()))
      return 1;
    __builtin_trap();
  }
  wk_status(w, 404);
  return !wk_write_str(w, "no such route");
}

int wk_ws_open(uint64_t conn, wk_bytes path) {
  (void)conn;
  (void)path;
  return put("open");
}

/* A message deletes the actor ("delete", "delete-durable"), passes a range
 * outside memory ("bad-send", "bad-close"), or is written and echoed. */
int wk_ws_message(uint64_t conn, wk_message msg) {
  uint32_t end = (uint32_t)__builtin_wasm_memory_size(0) * 65536;
  if (wk_eq(msg.data, "delete"))
    return !wk_delete_self();
  if (wk_eq(msg.data, "delete-durable"))
    return !wk_delete_self_durable();
  if (wk_eq(msg.data, "bad-send"))
    return raw_ws_send(conn, 0, end - 2, 4);
  if (wk_eq(msg.data, "bad-close")) {
    raw_ws_close(conn, 1000, end - 2, 4);
    return 0;
  }
  return put("message") || !wk_send(conn, msg.data);
}

int wk_ws_close(uint64_t conn, int code, wk_bytes reason) {
  (void)conn;
  (void)code;
  (void)reason;
  return put("close");
}
