/* WasmKeep C SDK: the guest side of ABI v1 (docs/abi.md). */
#include "wasmkeep.h"

#include <stdlib.h>
#include <string.h>
#include <wasi/api.h>

/* The hooks are weak: an actor defines the ones it needs, and the exports
 * below find the others NULL. */
#pragma weak wk_fetch
#pragma weak wk_init
#pragma weak wk_alarm
#pragma weak wk_ws_open
#pragma weak wk_ws_message
#pragma weak wk_ws_close

/* ---- Host functions (docs/abi.md section 4) ---- */

#define HOST(name) __attribute__((import_module("wasmkeep"), import_name(name)))

HOST("take_pending") int32_t host_take_pending(void *ptr);
HOST("hook_error") void host_hook_error(const void *ptr, size_t len);
HOST("respond") int32_t host_respond(const void *ptr, size_t len);
HOST("sql_exec")
int32_t host_sql_exec(const char *sql, size_t sql_len, const void *params, size_t params_len, uint32_t flags,
                      void *out, size_t cap);
HOST("sql_query")
int32_t host_sql_query(const char *sql, size_t sql_len, const void *params, size_t params_len, void *out,
                       size_t cap);
HOST("delete_self") int32_t host_delete_self(uint32_t flags, void *out, size_t cap);
HOST("alarm_set") void host_alarm_set(int64_t at_ms);
HOST("alarm_get") int64_t host_alarm_get(void);
HOST("alarm_clear") void host_alarm_clear(void);
HOST("actor_call")
int32_t host_actor_call(const char *addr, size_t addr_len, const void *req, size_t req_len, void *out, size_t cap);
HOST("self_address") int32_t host_self_address(void *out, size_t cap);
HOST("ws_send") int32_t host_ws_send(uint64_t conn, uint32_t kind, const void *ptr, size_t len);
HOST("ws_close") void host_ws_close(uint64_t conn, uint32_t code, const char *reason, size_t len);
HOST("ws_connections") int32_t host_ws_connections(void *out, size_t cap);
HOST("env_get") int32_t host_env_get(const char *name, size_t name_len, void *out, size_t cap);
HOST("http_fetch") int32_t host_http_fetch(const void *req, size_t req_len, void *out, size_t cap);

#define FLAG_DURABLE 1u

/* ---- The event arena ----
 * A static block, then malloc'd chunks if an event needs more; all of it is
 * released when the hook returns. Host calls write their results straight
 * into the free tail, so a result that fits costs no copy and one call. */

#ifndef WK_ARENA_SIZE
#define WK_ARENA_SIZE 8192
#endif

typedef struct chunk {
  struct chunk *next;
} chunk;

static uint8_t arena0[WK_ARENA_SIZE] __attribute__((aligned(8)));
static uint8_t *top = arena0, *end = arena0 + WK_ARENA_SIZE;
static chunk *chunks;

static const char out_of_memory[] = "out of memory";

static void set_error(wk_error_source source, int kind, wk_bytes detail);

static uint8_t *align8(uint8_t *p) { return (uint8_t *)(((uintptr_t)p + 7) & ~(uintptr_t)7); }

void *wk_alloc(size_t n) {
  uint8_t *p = align8(top);
  if (p <= end && (size_t)(end - p) >= n) {
    top = p + n;
    return p;
  }
  size_t size = n > WK_ARENA_SIZE ? n : WK_ARENA_SIZE;
  if (size > SIZE_MAX - sizeof(chunk) - 8) {
    set_error(WK_ERR_MEMORY, 0, wk_str(out_of_memory));
    return NULL;
  }
  chunk *c = malloc(sizeof(chunk) + 8 + size); /* memory.grow fails past the host's cap */
  if (c == NULL) {
    set_error(WK_ERR_MEMORY, 0, wk_str(out_of_memory));
    return NULL;
  }
  c->next = chunks;
  chunks = c;
  p = align8((uint8_t *)(c + 1));
  end = p + size;
  top = p + n;
  return p;
}

/* tail is the free space for a host call's result, at least a little (a
 * new chunk if need be), or NULL when memory ran out. One byte is kept back
 * so that a payload can always be NUL-terminated in place. */
static uint8_t *tail(size_t *cap) {
  uint8_t *p = align8(top);
  *cap = 0;
  if (p >= end || end - p < 64) {
    if ((p = wk_alloc(64)) == NULL)
      return NULL;
    top = p; /* reserved, not taken */
  }
  *cap = (size_t)(end - p) - 1;
  return p;
}

static wk_error last;
static const char *last_msg = "";
static const char *fail_msg;

/* take fetches the len-byte pending payload into new arena memory,
 * NUL-terminated; NULL when memory runs out. */
static uint8_t *take(size_t len) {
  uint8_t *p = wk_alloc(len + 1);
  if (p == NULL)
    return NULL;
  if (len > 0 && (size_t)host_take_pending(p) != len) {
    set_error(WK_ERR_HOST, 0, wk_str("the pending payload is missing or not the announced size"));
    return NULL;
  }
  p[len] = 0;
  return p;
}

/* payload returns the |n|-byte result of a host call given out (its tail)
 * and cap, NUL-terminated: in place if it fit, else taken from the host.
 * NULL when memory runs out. */
static uint8_t *payload(int32_t n, uint8_t *out, size_t cap, size_t *size) {
  size_t len = n < 0 ? (size_t)0 - (size_t)(uint32_t)n : (size_t)n;
  *size = len;
  if (out == NULL || len > cap)
    return take(len);
  top = out + len + 1;
  out[len] = 0;
  return out;
}

static void release(void) {
  while (chunks != NULL) {
    chunk *next = chunks->next;
    free(chunks);
    chunks = next;
  }
  top = arena0;
  end = arena0 + WK_ARENA_SIZE;
  last = (wk_error){0};
  last_msg = "";
  fail_msg = NULL;
}

/* ---- Growing buffers ---- */

static bool grow(wk_buf *b, size_t more) {
  if (b->cap - b->len > more) /* keeps a byte for the NUL */
    return true;
  if (more > SIZE_MAX / 4 - b->len) {
    set_error(WK_ERR_MEMORY, 0, wk_str(out_of_memory));
    return false;
  }
  size_t want = b->len + more + 1;
  /* The arena's last allocation extends in place. */
  if (b->ptr != NULL && b->ptr + b->cap == top && (size_t)(end - b->ptr) >= want) {
    top = b->ptr + want;
    b->cap = want;
    return true;
  }
  size_t cap = b->cap * 2 > want ? b->cap * 2 : (want < 64 ? 64 : want);
  uint8_t *p = wk_alloc(cap);
  if (p == NULL)
    return false;
  if (b->len > 0)
    memcpy(p, b->ptr, b->len);
  b->ptr = p;
  b->cap = cap;
  return true;
}

bool wk_buf_write(wk_buf *b, const void *data, size_t len) {
  if (!grow(b, len))
    return false;
  if (len > 0)
    memcpy(b->ptr + b->len, data, len);
  b->len += len;
  b->ptr[b->len] = 0;
  return true;
}

bool wk_buf_str(wk_buf *b, const char *s) { return wk_buf_write(b, s, s ? strlen(s) : 0); }

bool wk_buf_uint(wk_buf *b, uint64_t v) {
  char d[20];
  int i = sizeof d;
  do {
    d[--i] = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0);
  return wk_buf_write(b, d + i, sizeof d - (size_t)i);
}

bool wk_buf_int(wk_buf *b, int64_t v) {
  if (v >= 0)
    return wk_buf_uint(b, (uint64_t)v);
  return wk_buf_write(b, "-", 1) && wk_buf_uint(b, (uint64_t)0 - (uint64_t)v);
}

wk_bytes wk_buf_bytes(wk_buf *b) {
  if (b->ptr == NULL)
    return wk_str("");
  return (wk_bytes){b->ptr, b->len};
}

bool wk_put_u8(wk_buf *b, uint8_t v) { return wk_buf_write(b, &v, 1); }
bool wk_put_u32(wk_buf *b, uint32_t v) { return wk_buf_write(b, &v, 4); } /* Wasm is little-endian */
bool wk_put_u64(wk_buf *b, uint64_t v) { return wk_buf_write(b, &v, 8); }
bool wk_put_bytes(wk_buf *b, wk_bytes v) {
  return wk_put_u32(b, (uint32_t)v.len) && wk_buf_write(b, v.ptr, v.len);
}

/* ---- Bytes ---- */

wk_bytes wk_str(const char *s) {
  if (s == NULL)
    s = "";
  return (wk_bytes){(const uint8_t *)s, strlen(s)};
}

wk_bytes wk_bytes_of(const void *p, size_t n) { return (wk_bytes){p, n}; }

bool wk_eq(wk_bytes b, const char *s) {
  size_t n = strlen(s);
  return b.len == n && memcmp(b.ptr, s, n) == 0;
}

static bool eq_fold(wk_bytes a, const char *s) {
  size_t n = strlen(s);
  if (a.len != n)
    return false;
  for (size_t i = 0; i < n; i++) {
    uint8_t x = a.ptr[i], y = (uint8_t)s[i];
    if (x >= 'A' && x <= 'Z')
      x += 'a' - 'A';
    if (y >= 'A' && y <= 'Z')
      y += 'a' - 'A';
    if (x != y)
      return false;
  }
  return true;
}

/* ---- Decoding (the reader is declared in wasmkeep.h) ---- */

static bool need(wk_reader *r, size_t n) {
  if (r->bad || (size_t)(r->end - r->p) < n) {
    r->bad = true;
    return false;
  }
  return true;
}

uint8_t wk_get_u8(wk_reader *r) { return need(r, 1) ? *r->p++ : 0; }

uint32_t wk_get_u32(wk_reader *r) {
  uint32_t v = 0;
  if (need(r, 4)) {
    memcpy(&v, r->p, 4);
    r->p += 4;
  }
  return v;
}

uint64_t wk_get_u64(wk_reader *r) {
  uint64_t v = 0;
  if (need(r, 8)) {
    memcpy(&v, r->p, 8);
    r->p += 8;
  }
  return v;
}

wk_bytes wk_get_bytes(wk_reader *r) {
  size_t n = wk_get_u32(r);
  if (!need(r, n))
    return wk_str("");
  uint8_t *s = r->p - 4;
  memmove(s, r->p, n);
  s[n] = 0;
  r->p += n;
  return (wk_bytes){s, n};
}

size_t wk_get_count(wk_reader *r, size_t min) {
  size_t n = wk_get_u32(r);
  if (!r->bad && n > (size_t)(r->end - r->p) / min)
    r->bad = true;
  return r->bad ? 0 : n;
}

static bool get_headers(wk_reader *r, const wk_header **hs, size_t *count) {
  size_t n = wk_get_count(r, 8);
  wk_header *h = NULL;
  if (n > 0 && (h = wk_alloc(n * sizeof *h)) == NULL)
    return false;
  for (size_t i = 0; i < n; i++) {
    h[i].name = wk_get_bytes(r);
    h[i].value = wk_get_bytes(r);
  }
  *hs = h;
  *count = n;
  return true;
}

static bool malformed(wk_reader *r, const char *what) {
  if (!r->bad && r->p == r->end)
    return false;
  set_error(WK_ERR_HOST, 0, wk_str(what));
  return true;
}

static bool decode_response(uint8_t *p, size_t n, wk_response *res) {
  wk_reader r = {p, p + n, false};
  *res = (wk_response){0};
  res->status = (int)wk_get_u32(&r);
  if (!get_headers(&r, &res->headers, &res->header_count))
    return false;
  res->body = wk_get_bytes(&r);
  return !malformed(&r, "malformed response from the host");
}

/* ---- Errors ---- */

static const char *const sql_kinds[] = {"syntax",        "constraint",  "bind",    "multiple-statements",
                                        "quota-exceeded", "not-allowed", "internal"};
static const char *const call_kinds[] = {"invalid-address", "reentrant", "too-large", "timeout", "failed"};
static const char *const fetch_kinds[] = {"invalid-request",   "destination-ip-prohibited",
                                          "HTTP-request-denied", "dns-error",
                                          "connection-refused", "timeout",
                                          "tls-error",          "too-large",
                                          "too-many-requests",  "failed"};

#define LEN(a) (sizeof(a) / sizeof((a)[0]))

static const char *kind_name(const char *const *names, size_t n, int kind) {
  return kind >= 0 && (size_t)kind < n ? names[kind] : "unknown";
}

/* set_error records a failure and its text, as the Go SDK words it: "sql
 * syntax: ...", "call timeout", "fetch dns-error: ...". */
static void set_error(wk_error_source source, int kind, wk_bytes detail) {
  last = (wk_error){source, kind, detail};
  const char *prefix = "", *name = "";
  switch (source) {
  case WK_ERR_SQL:
    prefix = "sql ", name = kind_name(sql_kinds, LEN(sql_kinds), kind);
    break;
  case WK_ERR_CALL:
    prefix = "call ", name = kind_name(call_kinds, LEN(call_kinds), kind);
    break;
  case WK_ERR_FETCH:
    prefix = "fetch ", name = kind_name(fetch_kinds, LEN(fetch_kinds), kind);
    break;
  case WK_ERR_HOST:
    prefix = "wasmkeep: ";
    break;
  default: /* WK_ERR_MEMORY: nothing more can be allocated */
    last_msg = (const char *)detail.ptr;
    return;
  }
  wk_buf b = {0};
  bool ok = wk_buf_str(&b, prefix) && wk_buf_str(&b, name) &&
            (detail.len == 0 ||
             ((*name == 0 || wk_buf_write(&b, ": ", 2)) && wk_buf_write(&b, detail.ptr, detail.len)));
  last_msg = ok ? (const char *)b.ptr : name;
}

/* host_error decodes an error payload (a kind byte, then the message). */
static void host_error(wk_error_source source, const uint8_t *p, size_t n) {
  if (n == 0) {
    set_error(WK_ERR_HOST, 0, wk_str("empty error payload from the host"));
    return;
  }
  set_error(source, p[0], (wk_bytes){p + 1, n - 1});
}

const wk_error *wk_last_error(void) { return &last; }
const char *wk_errmsg(void) { return last_msg; }

/* ---- Storage ---- */

wk_value wk_null(void) { return (wk_value){.kind = WK_NULL}; }
wk_value wk_int(int64_t v) { return (wk_value){.kind = WK_INTEGER, .u.i = v}; }
wk_value wk_real(double v) { return (wk_value){.kind = WK_REAL, .u.f = v}; }
wk_value wk_text(const char *s) { return (wk_value){.kind = WK_TEXT, .u.b = wk_str(s)}; }
wk_value wk_text_n(wk_bytes s) { return (wk_value){.kind = WK_TEXT, .u.b = s}; }
wk_value wk_blob(const void *p, size_t n) { return (wk_value){.kind = WK_BLOB, .u.b = {p, n}}; }

bool wk_parse_int(wk_bytes s, int64_t *out) {
  size_t i = 0;
  bool neg = false;
  if (s.len > 0 && (s.ptr[0] == '+' || s.ptr[0] == '-'))
    neg = s.ptr[i++] == '-';
  if (i == s.len)
    return false;
  uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (; i < s.len; i++) {
    if (s.ptr[i] < '0' || s.ptr[i] > '9')
      return false;
    unsigned d = s.ptr[i] - '0';
    if (v > (limit - d) / 10)
      return false;
    v = v * 10 + d;
  }
  *out = neg ? (int64_t)((uint64_t)0 - v) : (int64_t)v;
  return true;
}

int64_t wk_value_int(const wk_value *v) {
  int64_t i = 0;
  switch (v->kind) {
  case WK_INTEGER:
    return v->u.i;
  case WK_REAL:
    if (v->u.f >= -9223372036854775808.0 && v->u.f < 9223372036854775808.0)
      return (int64_t)v->u.f;
    return 0;
  case WK_TEXT:
    return wk_parse_int(v->u.b, &i) ? i : 0;
  default:
    return 0;
  }
}

double wk_value_real(const wk_value *v) {
  switch (v->kind) {
  case WK_INTEGER:
    return (double)v->u.i;
  case WK_REAL:
    return v->u.f;
  case WK_TEXT: {
    wk_buf b = {0}; /* strtod wants a NUL, which a caller's text may lack */
    return wk_buf_write(&b, v->u.b.ptr, v->u.b.len) ? strtod((const char *)b.ptr, NULL) : 0;
  }
  default:
    return 0;
  }
}

wk_bytes wk_value_bytes(const wk_value *v) {
  if (v->kind == WK_TEXT || v->kind == WK_BLOB)
    return v->u.b;
  return wk_str("");
}

const wk_value *wk_at(const wk_rows *rows, size_t r, size_t c) {
  if (r >= rows->rows || c >= rows->columns)
    return NULL;
  return &rows->values[r * rows->columns + c];
}

static bool encode_args(wk_buf *b, const wk_value *args, size_t n) {
  if (!wk_put_u32(b, (uint32_t)n))
    return false;
  for (size_t i = 0; i < n; i++) {
    const wk_value *v = &args[i];
    if (!wk_put_u8(b, (uint8_t)v->kind))
      return false;
    switch (v->kind) {
    case WK_INTEGER:
      if (!wk_put_u64(b, (uint64_t)v->u.i))
        return false;
      break;
    case WK_REAL: {
      uint64_t bits;
      memcpy(&bits, &v->u.f, 8);
      if (!wk_put_u64(b, bits))
        return false;
      break;
    }
    case WK_TEXT:
    case WK_BLOB:
      if (!wk_put_bytes(b, v->u.b))
        return false;
      break;
    default:
      break;
    }
  }
  return true;
}

static bool exec(const char *sql, const wk_value *args, size_t nargs, uint32_t flags, int64_t *changed) {
  wk_buf params = {0};
  if (!encode_args(&params, args, nargs))
    return false;
  size_t cap, size;
  uint8_t *out = tail(&cap);
  int32_t n = host_sql_exec(sql, strlen(sql), params.ptr, params.len, flags, out, cap);
  uint8_t *p = payload(n, out, cap, &size);
  if (p == NULL)
    return false;
  if (n < 0) {
    host_error(WK_ERR_SQL, p, size);
    return false;
  }
  if (size != 8) {
    set_error(WK_ERR_HOST, 0, wk_str("malformed row count from the host"));
    return false;
  }
  if (changed != NULL)
    memcpy(changed, p, 8);
  return true;
}

bool wk_exec(const char *sql, const wk_value *args, size_t nargs, int64_t *changed) {
  return exec(sql, args, nargs, 0, changed);
}

bool wk_exec_durable(const char *sql, const wk_value *args, size_t nargs, int64_t *changed) {
  return exec(sql, args, nargs, FLAG_DURABLE, changed);
}

static bool get_value(wk_reader *r, wk_value *v) {
  v->kind = (wk_kind)wk_get_u8(r);
  switch (v->kind) {
  case WK_NULL:
    break;
  case WK_INTEGER:
    v->u.i = (int64_t)wk_get_u64(r);
    break;
  case WK_REAL: {
    uint64_t bits = wk_get_u64(r);
    memcpy(&v->u.f, &bits, 8);
    break;
  }
  case WK_TEXT:
  case WK_BLOB:
    v->u.b = wk_get_bytes(r);
    break;
  default:
    r->bad = true;
  }
  return !r->bad;
}

bool wk_query(const char *sql, const wk_value *args, size_t nargs, wk_rows *rows) {
  *rows = (wk_rows){0};
  wk_buf params = {0};
  if (!encode_args(&params, args, nargs))
    return false;
  size_t cap, size;
  uint8_t *out = tail(&cap);
  int32_t n = host_sql_query(sql, strlen(sql), params.ptr, params.len, out, cap);
  uint8_t *p = payload(n, out, cap, &size);
  if (p == NULL)
    return false;
  if (n < 0) {
    host_error(WK_ERR_SQL, p, size);
    return false;
  }
  wk_reader r = {p, p + size, false};
  size_t cols = wk_get_count(&r, 4);
  wk_bytes *names = cols > 0 ? wk_alloc(cols * sizeof *names) : NULL;
  if (cols > 0 && names == NULL)
    return false;
  for (size_t i = 0; i < cols; i++)
    names[i] = wk_get_bytes(&r);
  size_t nrows = wk_get_u32(&r);
  /* Each value takes at least its kind byte. */
  if (!r.bad && cols > 0 && nrows > (size_t)(r.end - r.p) / cols)
    r.bad = true;
  size_t nvals = r.bad ? 0 : nrows * cols;
  wk_value *vals = nvals > 0 ? wk_alloc(nvals * sizeof *vals) : NULL;
  if (nvals > 0 && vals == NULL)
    return false;
  for (size_t i = 0; i < nvals && get_value(&r, &vals[i]); i++) {
  }
  if (malformed(&r, "malformed rows from the host"))
    return false;
  *rows = (wk_rows){cols, cols > 0 ? nrows : 0, names, vals};
  return true;
}

bool wk_query_int(const char *sql, const wk_value *args, size_t nargs, int64_t def, int64_t *out) {
  wk_rows rows;
  if (!wk_query(sql, args, nargs, &rows))
    return false;
  const wk_value *v = wk_at(&rows, 0, 0);
  *out = v != NULL ? wk_value_int(v) : def;
  return true;
}

static bool delete_self(uint32_t flags) {
  size_t cap, size;
  uint8_t *out = tail(&cap);
  int32_t n = host_delete_self(flags, out, cap);
  if (n >= 0)
    return true;
  uint8_t *p = payload(n, out, cap, &size);
  if (p != NULL)
    host_error(WK_ERR_SQL, p, size);
  return false;
}

bool wk_delete_self(void) { return delete_self(0); }
bool wk_delete_self_durable(void) { return delete_self(FLAG_DURABLE); }

/* ---- Alarms ---- */

void wk_alarm_set(int64_t at_ms) { host_alarm_set(at_ms); }

bool wk_alarm_get(int64_t *at_ms) {
  int64_t at = host_alarm_get();
  if (at < 0)
    return false;
  *at_ms = at;
  return true;
}

void wk_alarm_clear(void) { host_alarm_clear(); }

int64_t wk_now_ms(void) {
  __wasi_timestamp_t ns = 0;
  if (__wasi_clock_time_get(__WASI_CLOCKID_REALTIME, 1000000, &ns) != 0)
    return 0; /* both engines provide the clock (docs/abi.md section 6) */
  return (int64_t)(ns / 1000000);
}

/* ---- Actors and outbound HTTP ---- */

static bool encode_request(wk_buf *b, const wk_request *req) {
  wk_bytes method = req->method.len > 0 ? req->method : wk_str("GET");
  if (!wk_put_bytes(b, method) || !wk_put_bytes(b, req->path) || !wk_put_u32(b, (uint32_t)req->header_count))
    return false;
  for (size_t i = 0; i < req->header_count; i++)
    if (!wk_put_bytes(b, req->headers[i].name) || !wk_put_bytes(b, req->headers[i].value))
      return false;
  return wk_put_bytes(b, req->body);
}

/* answer finishes actor_call and http_fetch: a Response or an error. */
static bool answer(int32_t n, uint8_t *out, size_t cap, wk_error_source source, wk_response *res) {
  size_t size;
  uint8_t *p = payload(n, out, cap, &size);
  if (p == NULL)
    return false;
  if (n < 0) {
    host_error(source, p, size);
    return false;
  }
  return decode_response(p, size, res);
}

bool wk_call(const char *address, const wk_request *req, wk_response *res) {
  *res = (wk_response){0};
  wk_buf b = {0};
  if (!encode_request(&b, req))
    return false;
  size_t cap;
  uint8_t *out = tail(&cap);
  return answer(host_actor_call(address, strlen(address), b.ptr, b.len, out, cap), out, cap, WK_ERR_CALL, res);
}

bool wk_http_fetch(const wk_request *req, uint32_t step_timeout_ms, wk_response *res) {
  *res = (wk_response){0};
  wk_buf b = {0};
  if (!encode_request(&b, req) || !wk_put_u32(&b, step_timeout_ms))
    return false;
  size_t cap;
  uint8_t *out = tail(&cap);
  return answer(host_http_fetch(b.ptr, b.len, out, cap), out, cap, WK_ERR_FETCH, res);
}

wk_address wk_self_address(void) {
  wk_address a = {wk_str(""), wk_str(""), wk_str("")};
  size_t cap, size;
  uint8_t *out = tail(&cap);
  int32_t n = host_self_address(out, cap);
  uint8_t *p = payload(n, out, cap, &size);
  if (p == NULL)
    return a;
  wk_reader r = {p, p + size, false};
  a.tenant = wk_get_bytes(&r);
  a.class_name = wk_get_bytes(&r);
  a.name = wk_get_bytes(&r);
  malformed(&r, "malformed address from the host");
  return a;
}

/* ---- WebSockets ---- */

static bool ws_send(uint64_t conn, uint32_t kind, wk_bytes data) {
  int32_t code = host_ws_send(conn, kind, data.ptr, data.len);
  if (code == WK_SEND_OK)
    return true;
  last = (wk_error){WK_ERR_SEND, code, wk_str("")};
  last_msg = code == WK_SEND_UNKNOWN_CONNECTION ? "websocket: unknown connection"
             : code == WK_SEND_BACKPRESSURE      ? "websocket: backpressure, message dropped"
                                                 : "websocket: send error";
  return false;
}

bool wk_send(uint64_t conn, wk_bytes text) { return ws_send(conn, 0, text); }
bool wk_send_binary(uint64_t conn, wk_bytes data) { return ws_send(conn, 1, data); }

void wk_close(uint64_t conn, int code, const char *reason) {
  wk_bytes r = wk_str(reason);
  host_ws_close(conn, (uint32_t)code, (const char *)r.ptr, r.len);
}

long wk_connections(const uint64_t **ids) {
  *ids = NULL;
  size_t cap, size;
  uint8_t *out = tail(&cap);
  uint8_t *p = payload(host_ws_connections(out, cap), out, cap, &size);
  if (p == NULL)
    return -1;
  uint32_t count = 0;
  if (size >= 4)
    memcpy(&count, p, 4);
  if (size < 4 || (size - 4) / 8 != count || (size - 4) % 8 != 0) {
    set_error(WK_ERR_HOST, 0, wk_str("malformed connection list from the host"));
    return -1;
  }
  memmove(p, p + 4, size - 4); /* p is 8-aligned: the ids become an array */
  *ids = (const uint64_t *)(void *)p;
  return (long)count;
}

/* ---- Configuration ---- */

bool wk_env(const char *name, wk_bytes *value) {
  size_t cap, size;
  uint8_t *out = tail(&cap);
  int32_t n = host_env_get(name, strlen(name), out, cap);
  if (n < 0)
    return false; /* not set: the only error env_get has */
  uint8_t *p = payload(n, out, cap, &size);
  if (p == NULL)
    return false;
  *value = (wk_bytes){p, size};
  return true;
}

/* ---- Responses ---- */

struct wk_writer {
  int status;
  wk_buf headers; /* an array of wk_header */
  wk_buf body;
};

static wk_writer writer;

void wk_status(wk_writer *w, int status) { w->status = status; }

static wk_header *headers_of(wk_writer *w, size_t *n) {
  *n = w->headers.len / sizeof(wk_header);
  return (wk_header *)(void *)w->headers.ptr;
}

/* copy_str copies a C string into the arena. */
static bool copy_str(const char *s, wk_bytes *out) {
  wk_buf b = {0};
  if (!wk_buf_str(&b, s))
    return false;
  *out = wk_buf_bytes(&b);
  return true;
}

bool wk_add_header(wk_writer *w, const char *name, const char *value) {
  wk_header h;
  if (!copy_str(name, &h.name) || !copy_str(value, &h.value))
    return false;
  /* The array's alignment: wk_alloc's 8 bytes, and it grows by whole
   * elements. */
  return wk_buf_write(&w->headers, &h, sizeof h);
}

bool wk_set_header(wk_writer *w, const char *name, const char *value) {
  size_t n;
  wk_header *hs = headers_of(w, &n);
  size_t keep = 0;
  for (size_t i = 0; i < n; i++)
    if (!eq_fold(hs[i].name, name))
      hs[keep++] = hs[i];
  w->headers.len = keep * sizeof(wk_header);
  return wk_add_header(w, name, value);
}

bool wk_write(wk_writer *w, const void *data, size_t len) { return wk_buf_write(&w->body, data, len); }
bool wk_write_str(wk_writer *w, const char *s) { return wk_buf_str(&w->body, s); }
bool wk_write_int(wk_writer *w, int64_t v) { return wk_buf_int(&w->body, v); }

bool wk_http_error(wk_writer *w, int status, const char *msg) {
  wk_status(w, status);
  return wk_set_header(w, "Content-Type", "text/plain; charset=utf-8") &&
         wk_set_header(w, "X-Content-Type-Options", "nosniff") && wk_write_str(w, msg) && wk_write(w, "\n", 1);
}

bool wk_header_get(const wk_header *hs, size_t n, const char *name, wk_bytes *value) {
  for (size_t i = 0; i < n; i++)
    if (eq_fold(hs[i].name, name)) {
      *value = hs[i].value;
      return true;
    }
  return false;
}

static int unhex(uint8_t c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  c |= 0x20;
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* unescape percent-decodes s into the arena; in a query "+" is a space. A
 * "%" without two hex digits stays as it is. */
static bool unescape(wk_bytes s, bool query, wk_bytes *out) {
  uint8_t *p = wk_alloc(s.len + 1);
  if (p == NULL)
    return false;
  size_t n = 0;
  for (size_t i = 0; i < s.len; i++) {
    int hi, lo;
    if (s.ptr[i] == '%' && i + 2 < s.len && (hi = unhex(s.ptr[i + 1])) >= 0 && (lo = unhex(s.ptr[i + 2])) >= 0) {
      p[n++] = (uint8_t)(hi << 4 | lo);
      i += 2;
    } else {
      p[n++] = query && s.ptr[i] == '+' ? ' ' : s.ptr[i];
    }
  }
  p[n] = 0;
  *out = (wk_bytes){p, n};
  return true;
}

wk_bytes wk_url_path(wk_bytes target) {
  const uint8_t *q = memchr(target.ptr, '?', target.len);
  wk_bytes path = {target.ptr, q != NULL ? (size_t)(q - target.ptr) : target.len};
  if (memchr(path.ptr, '%', path.len) == NULL)
    return path;
  return unescape(path, false, &path) ? path : wk_str("");
}

bool wk_url_param(wk_bytes path, const char *name, wk_bytes *value) {
  const uint8_t *q = memchr(path.ptr, '?', path.len);
  if (q == NULL)
    return false;
  const uint8_t *stop_at = path.ptr + path.len;
  for (const uint8_t *p = q + 1; p < stop_at;) {
    const uint8_t *amp = memchr(p, '&', (size_t)(stop_at - p));
    const uint8_t *stop = amp != NULL ? amp : stop_at;
    const uint8_t *eq = memchr(p, '=', (size_t)(stop - p));
    wk_bytes key, val = {stop, 0};
    if (eq != NULL)
      val = (wk_bytes){eq + 1, (size_t)(stop - eq - 1)};
    if (unescape((wk_bytes){p, (size_t)((eq != NULL ? eq : stop) - p)}, true, &key) && wk_eq(key, name))
      return unescape(val, true, value);
    p = stop + 1;
  }
  return false;
}

/* encode_response encodes the writer's response for respond. */
static bool encode_response(wk_writer *w, wk_buf *b) {
  size_t n;
  wk_header *hs = headers_of(w, &n);
  wk_bytes ignored;
  if (w->body.len > 0 && !wk_header_get(hs, n, "Content-Type", &ignored)) {
    if (!wk_add_header(w, "Content-Type", "text/plain; charset=utf-8"))
      return false;
    hs = headers_of(w, &n);
  }
  if (!wk_put_u32(b, (uint32_t)(w->status != 0 ? w->status : 200)) || !wk_put_u32(b, (uint32_t)n))
    return false;
  for (size_t i = 0; i < n; i++)
    if (!wk_put_bytes(b, hs[i].name) || !wk_put_bytes(b, hs[i].value))
      return false;
  return wk_put_bytes(b, wk_buf_bytes(&w->body));
}

/* ---- Exports (docs/abi.md section 1) ---- */

#define EXPORT(name) __attribute__((export_name(name)))

/* The exports are external (a static function is not exported); these
 * prototypes say they are meant to be. */
void wasmkeep_abi_v1(void);
int32_t wasmkeep_on_init(void);
int32_t wasmkeep_on_alarm(void);
int32_t wasmkeep_on_request(int32_t n);
int32_t wasmkeep_on_websocket_open(uint64_t conn, int32_t n);
int32_t wasmkeep_on_websocket_message(uint64_t conn, int32_t n);
int32_t wasmkeep_on_websocket_close(uint64_t conn, int32_t code, int32_t n);

int wk_fail(const char *msg) {
  wk_bytes copy;
  fail_msg = copy_str(msg && *msg ? msg : "the hook failed", &copy) ? (const char *)copy.ptr : out_of_memory;
  return 1;
}

/* done ends a hook: the failure's message goes to the host, and the
 * arena is released. */
static int32_t done(int rc) {
  if (rc != 0) {
    const char *msg = fail_msg != NULL ? fail_msg : *last_msg ? last_msg : "the hook failed without a message";
    host_hook_error(msg, strlen(msg));
  }
  release();
  return rc != 0;
}

EXPORT("wasmkeep_abi_v1") void wasmkeep_abi_v1(void) {}

EXPORT("wasmkeep_on_init") int32_t wasmkeep_on_init(void) { return done(wk_init ? wk_init() : 0); }

EXPORT("wasmkeep_on_alarm") int32_t wasmkeep_on_alarm(void) {
  if (!wk_alarm)
    return done(wk_fail("wasmkeep: an alarm is due but the actor defines no wk_alarm"));
  return done(wk_alarm());
}

EXPORT("wasmkeep_on_request") int32_t wasmkeep_on_request(int32_t n) {
  if (!wk_fetch)
    return done(wk_fail("wasmkeep: no handler: define wk_fetch"));
  uint8_t *p = take((size_t)n);
  if (p == NULL)
    return done(1);
  wk_reader r = {p, p + n, false};
  wk_request req = {0};
  req.method = wk_get_bytes(&r);
  req.path = wk_get_bytes(&r);
  if (!get_headers(&r, &req.headers, &req.header_count))
    return done(1);
  req.body = wk_get_bytes(&r);
  if (malformed(&r, "malformed request from the host"))
    return done(1);
  writer = (wk_writer){0};
  int rc = wk_fetch(&req, &writer);
  if (rc != 0)
    return done(rc);
  wk_buf resp = {0};
  if (!encode_response(&writer, &resp))
    return done(1);
  switch (host_respond(resp.ptr, resp.len)) {
  case 0:
    return done(0);
  case 3:
    return done(wk_fail("wasmkeep: the host refused the response: a header name or value is not valid HTTP"));
  default:
    return done(wk_fail("wasmkeep: respond failed"));
  }
}

EXPORT("wasmkeep_on_websocket_open") int32_t wasmkeep_on_websocket_open(uint64_t conn, int32_t n) {
  if (!wk_ws_open)
    return done(wk_fail("this actor accepts no WebSockets"));
  uint8_t *p = take((size_t)n);
  if (p == NULL)
    return done(1);
  return done(wk_ws_open(conn, (wk_bytes){p, (size_t)n}));
}

EXPORT("wasmkeep_on_websocket_message") int32_t wasmkeep_on_websocket_message(uint64_t conn, int32_t n) {
  uint8_t *p = take((size_t)n);
  if (p == NULL)
    return done(1);
  if (!wk_ws_message || n < 1)
    return done(0);
  return done(wk_ws_message(conn, (wk_message){p[0] == 1, {p + 1, (size_t)n - 1}}));
}

EXPORT("wasmkeep_on_websocket_close")
int32_t wasmkeep_on_websocket_close(uint64_t conn, int32_t code, int32_t n) {
  uint8_t *p = take((size_t)n);
  if (p == NULL)
    return done(1);
  return done(wk_ws_close ? wk_ws_close(conn, code, (wk_bytes){p, (size_t)n}) : 0);
}
