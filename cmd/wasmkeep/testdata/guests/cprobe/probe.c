/* cprobe exercises the whole C SDK for cmd/wasmkeep/sdk_c_test.go: one route
 * per part of the ABI, each answering what it saw as text. */
#define _GNU_SOURCE /* memmem */
#include <string.h>

#include "wasmkeep.h"

int wk_init(void) {
  return !(wk_exec("CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v)", WK_NO_ARGS, NULL) &&
           wk_exec("CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, what TEXT NOT NULL)", WK_NO_ARGS,
                   NULL));
}

/* note records an event (an alarm, a close) for /events. */
static int note(wk_buf *what) {
  return !wk_exec("INSERT INTO events (what) VALUES (?)", WK_ARGS(wk_text_n(wk_buf_bytes(what))), NULL);
}

int wk_alarm(void) {
  wk_buf b = {0};
  return !wk_buf_str(&b, "alarm") || note(&b);
}

int wk_ws_open(uint64_t conn, wk_bytes path) {
  (void)conn;
  if (memmem(path.ptr, path.len, "refuse", 6) == NULL)
    return 0;
  wk_buf msg = {0};
  wk_buf_str(&msg, "not welcome: ");
  wk_buf_write(&msg, path.ptr, path.len);
  return wk_fail((const char *)msg.ptr);
}

int wk_ws_message(uint64_t conn, wk_message msg) {
  if (wk_eq(msg.data, "close")) {
    wk_close(conn, 4000, "bye");
    return 0;
  }
  if (wk_eq(msg.data, "count")) {
    const uint64_t *ids;
    long n = wk_connections(&ids);
    wk_buf b = {0};
    wk_buf_int(&b, n);
    for (long i = 0; i < n; i++)
      wk_buf_str(&b, ids[i] == conn ? " me" : " other");
    return !wk_send(conn, wk_buf_bytes(&b));
  }
  if (wk_eq(msg.data, "stranger")) { /* a connection this actor does not have */
    wk_buf b = {0};
    wk_buf_str(&b, wk_send(conn + 1000, wk_str("x")) ? "sent" : wk_errmsg());
    return !wk_send(conn, wk_buf_bytes(&b));
  }
  /* Anything else comes back as it came: text or binary. */
  return !(msg.binary ? wk_send_binary(conn, msg.data) : wk_send(conn, msg.data));
}

int wk_ws_close(uint64_t conn, int code, wk_bytes reason) {
  (void)conn;
  wk_buf b = {0};
  wk_buf_str(&b, "close ");
  wk_buf_int(&b, code);
  wk_buf_str(&b, " ");
  wk_buf_write(&b, reason.ptr, reason.len);
  return note(&b);
}

/* param is a query parameter as a C string, "" if absent. */
static const char *param(const wk_request *req, const char *name) {
  wk_bytes v;
  return wk_url_param(req->path, name, &v) ? (const char *)v.ptr : "";
}

static int64_t int_param(const wk_request *req, const char *name) {
  int64_t v = 0;
  wk_bytes s;
  if (wk_url_param(req->path, name, &s))
    wk_parse_int(s, &v);
  return v;
}

/* failure answers the last error: its source, kind and text. */
static int failure(wk_writer *w) {
  const wk_error *e = wk_last_error();
  wk_write_str(w, "error ");
  wk_write_int(w, e->source);
  wk_write_str(w, " ");
  wk_write_int(w, e->kind);
  wk_write_str(w, ": ");
  wk_write_str(w, wk_errmsg());
  return 0;
}

/* types round-trips one value of each kind through SQLite. */
static int types(wk_writer *w) {
  static const uint8_t blob[] = {0, 1, 2, 0xff, 0};
  if (!wk_exec("INSERT OR REPLACE INTO kv VALUES ('int', ?), ('real', ?), ('text', ?), ('blob', ?), ('null', ?)",
               WK_ARGS(wk_int(INT64_MIN), wk_real(2.5), wk_text("h\xc3\xa9llo"), wk_blob(blob, sizeof blob),
                       wk_null()),
               NULL))
    return failure(w);
  wk_rows rows;
  if (!wk_query("SELECT k, v, typeof(v) AS type FROM kv WHERE k IN ('int', 'real', 'text', 'blob', 'null') ORDER BY k",
                WK_NO_ARGS, &rows))
    return failure(w);
  for (size_t c = 0; c < rows.columns; c++) {
    wk_write(w, rows.names[c].ptr, rows.names[c].len);
    wk_write_str(w, c + 1 < rows.columns ? "," : "\n");
  }
  for (size_t r = 0; r < rows.rows; r++) {
    const wk_value *v = wk_at(&rows, r, 1);
    wk_bytes k = wk_value_bytes(wk_at(&rows, r, 0)), type = wk_value_bytes(wk_at(&rows, r, 2));
    wk_write(w, k.ptr, k.len);
    wk_write_str(w, " ");
    wk_write_int(w, v->kind);
    wk_write_str(w, " ");
    wk_write(w, type.ptr, type.len);
    wk_write_str(w, " ");
    switch (v->kind) {
    case WK_INTEGER:
      wk_write_int(w, wk_value_int(v));
      break;
    case WK_REAL:
      wk_write_int(w, (int64_t)(wk_value_real(v) * 10));
      break;
    case WK_TEXT:
      wk_write(w, v->u.b.ptr, v->u.b.len);
      break;
    case WK_BLOB:
      for (size_t i = 0; i < v->u.b.len; i++) {
        wk_write_int(w, v->u.b.ptr[i]);
        wk_write_str(w, ".");
      }
      break;
    default:
      wk_write_str(w, "null");
    }
    wk_write_str(w, "\n");
  }
  if (wk_at(&rows, rows.rows, 0) != NULL || wk_at(&rows, 0, rows.columns) != NULL)
    return wk_fail("wk_at outside the result");
  return 0;
}

/* answer writes a call's or a fetch's response: status, then body. */
static int answer(wk_writer *w, bool ok, const wk_response *res) {
  if (!ok)
    return failure(w);
  wk_write_int(w, res->status);
  wk_write_str(w, " ");
  return !wk_write(w, res->body.ptr, res->body.len);
}

int wk_fetch(const wk_request *req, wk_writer *w) {
  wk_bytes route = wk_url_path(req->path);

  if (wk_eq(route, "/types"))
    return types(w);
  if (wk_eq(route, "/a b+c")) /* a decoded path */
    return !wk_write_str(w, "decoded");
  if (wk_eq(route, "/convert")) { /* conversions as SQLite's, on values not from the SDK (no NUL) */
    const char digits[] = "42.75x";
    wk_value text = wk_text_n(wk_bytes_of(digits, 5)), whole = wk_text_n(wk_bytes_of(digits, 2)), real = wk_real(-3.9);
    wk_write_int(w, wk_value_int(&whole));
    wk_write_str(w, " ");
    wk_write_int(w, wk_value_int(&text)); /* not a whole integer: 0 */
    wk_write_str(w, " ");
    wk_write_int(w, (int64_t)(wk_value_real(&text) * 100));
    wk_write_str(w, " ");
    return !wk_write_int(w, wk_value_int(&real));
  }
  if (wk_eq(route, "/exec") || wk_eq(route, "/exec-durable")) {
    int64_t changed;
    const char *sql = param(req, "sql");
    bool ok = wk_eq(route, "/exec") ? wk_exec(sql, WK_NO_ARGS, &changed) : wk_exec_durable(sql, WK_NO_ARGS, &changed);
    if (!ok)
      return failure(w);
    wk_write_str(w, "changed ");
    return !wk_write_int(w, changed);
  }
  if (wk_eq(route, "/count")) { /* wk_query_int, with a default for no row */
    int64_t n;
    if (!wk_query_int(param(req, "sql"), WK_NO_ARGS, -1, &n))
      return failure(w);
    return !wk_write_int(w, n);
  }
  if (wk_eq(route, "/big")) { /* a result larger than the arena: the pending path */
    wk_rows rows;
    if (!wk_query("SELECT zeroblob(?) AS b, ? AS t", WK_ARGS(wk_int(int_param(req, "n")), wk_text(param(req, "t"))),
                  &rows))
      return failure(w);
    wk_bytes b = wk_value_bytes(wk_at(&rows, 0, 0)), t = wk_value_bytes(wk_at(&rows, 0, 1));
    wk_write_int(w, (int64_t)b.len);
    wk_write_str(w, " ");
    return !wk_write(w, t.ptr, t.len);
  }
  if (wk_eq(route, "/echo")) { /* the request body back, with a header of the request */
    wk_bytes v;
    if (wk_header_get(req->headers, req->header_count, "x-probe", &v)) {
      wk_set_header(w, "X-Probe", (const char *)v.ptr);
    }
    wk_set_header(w, "Content-Type", "application/octet-stream");
    return !wk_write(w, req->body.ptr, req->body.len);
  }
  if (wk_eq(route, "/headers")) {
    wk_status(w, 201);
    wk_set_header(w, "X-One", "first");
    wk_set_header(w, "x-one", "replaced");
    wk_add_header(w, "Set-Cookie", "a=1");
    wk_add_header(w, "Set-Cookie", "b=2");
    return 0;
  }
  if (wk_eq(route, "/bad-header")) {
    wk_set_header(w, "Bad Name", "x");
    return 0;
  }
  if (wk_eq(route, "/self")) {
    wk_address a = wk_self_address();
    wk_write(w, a.tenant.ptr, a.tenant.len);
    wk_write_str(w, "/");
    wk_write(w, a.class_name.ptr, a.class_name.len);
    wk_write_str(w, "/");
    return !wk_write(w, a.name.ptr, a.name.len);
  }
  if (wk_eq(route, "/env")) {
    wk_bytes v;
    return !wk_write_str(w, wk_env(param(req, "name"), &v) ? (const char *)v.ptr : "unset");
  }
  if (wk_eq(route, "/alarm-set")) {
    wk_alarm_set(wk_now_ms() + int_param(req, "in"));
    return !wk_write_str(w, "set");
  }
  if (wk_eq(route, "/alarm-get")) {
    int64_t at;
    if (!wk_alarm_get(&at))
      return !wk_write_str(w, "none");
    int64_t in = at - wk_now_ms();
    return !wk_write_str(w, in > 0 && in <= int_param(req, "within") ? "soon" : "not soon");
  }
  if (wk_eq(route, "/alarm-clear")) {
    wk_alarm_clear();
    return !wk_write_str(w, "cleared");
  }
  if (wk_eq(route, "/events")) {
    wk_rows rows;
    if (!wk_query("SELECT what FROM events ORDER BY id", WK_NO_ARGS, &rows))
      return failure(w);
    for (size_t i = 0; i < rows.rows; i++) {
      wk_bytes what = wk_value_bytes(wk_at(&rows, i, 0));
      wk_write(w, what.ptr, what.len);
      wk_write_str(w, "\n");
    }
    return 0;
  }
  if (wk_eq(route, "/call")) {
    wk_header h = {wk_str("X-Probe"), wk_str("called")};
    wk_request call = {.method = wk_str("POST"), .path = wk_str(param(req, "path")), .headers = &h,
                       .header_count = 1, .body = wk_str("ping")};
    wk_response res;
    return answer(w, wk_call(param(req, "to"), &call, &res), &res);
  }
  if (wk_eq(route, "/caller")) {
    wk_bytes v;
    return !wk_write_str(w, wk_header_get(req->headers, req->header_count, "X-Wasmkeep-Caller", &v)
                                ? (const char *)v.ptr
                                : "none");
  }
  if (wk_eq(route, "/fetch")) {
    wk_request out = {.path = wk_str(param(req, "url"))};
    wk_response res;
    return answer(w, wk_http_fetch(&out, (uint32_t)int_param(req, "timeout"), &res), &res);
  }
  if (wk_eq(route, "/delete")) {
    if (!wk_delete_self())
      return failure(w);
    return !wk_write_str(w, "deleted at the end");
  }
  if (wk_eq(route, "/delete-durable")) {
    if (!wk_delete_self_durable())
      return failure(w);
    if (wk_exec("INSERT INTO kv VALUES ('after', 1)", WK_NO_ARGS, NULL))
      return wk_fail("storage still works after delete-self-durable");
    return failure(w);
  }
  if (wk_eq(route, "/fail"))
    return wk_fail("deliberately");
  if (wk_eq(route, "/fail-sql")) { /* no wk_fail: the last error is the message */
    wk_exec("SELEC 1", WK_NO_ARGS, NULL);
    return 1;
  }
  if (wk_eq(route, "/trap"))
    __builtin_trap();
  if (wk_eq(route, "/spin")) /* past the CPU budget */
    for (volatile int i = 0;; i++) {
    }
  if (wk_eq(route, "/recurse")) { /* past the stack: it is first in memory, so this traps */
    volatile uint8_t frame[1024];
    frame[0] = (uint8_t)int_param(req, "depth");
    wk_request deeper = *req;
    return wk_fetch(&deeper, w) + frame[0];
  }
  if (wk_eq(route, "/alloc")) { /* event memory: NULL and an error past the host's cap */
    uint8_t *p = wk_alloc((size_t)int_param(req, "mb") << 20);
    if (p == NULL)
      return failure(w);
    memset(p, 1, (size_t)int_param(req, "mb") << 20);
    return !wk_write_str(w, "allocated");
  }
  if (wk_eq(route, "/memory")) { /* linear memory, in 64 KiB pages */
    return !wk_write_int(w, (int64_t)__builtin_wasm_memory_size(0));
  }
  wk_status(w, 404);
  return !wk_write_str(w, "no such route");
}
