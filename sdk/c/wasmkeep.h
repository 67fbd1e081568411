/* WasmKeep C SDK: write an actor in C against the guest ABI v1
 * (docs/abi.md). Build it with sdk/c/wkcc; sdk/c/README.md is the guide.
 *
 * Memory: everything the SDK hands out (a request, rows, a response, a
 * string from wk_env, an error message, wk_alloc) lives in the event arena
 * and stays valid until the hook that received it returns; then the arena is
 * reset. The SDK never keeps a pointer the caller gave it past the call.
 * Every string and byte array the SDK hands out is NUL-terminated one byte
 * past its length, so text can be used as a C string.
 *
 * Errors: functions that can fail return false (or a negative value) and
 * set the last error (wk_last_error, wk_errmsg). A hook returns 0 for
 * success; anything else fails the event with the message given to wk_fail,
 * or else with wk_errmsg(). */
#ifndef WASMKEEP_H
#define WASMKEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The ABI major version this SDK implements (it exports wasmkeep_abi_v1). */
#define WASMKEEP_ABI_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Bytes and strings ---- */

/* A byte string that the holder does not own: a pointer and a length. */
typedef struct {
  const uint8_t *ptr;
  size_t len;
} wk_bytes;

/* wk_str views a C string (NULL is the empty string); wk_bytes_of views n
 * bytes. Neither copies. */
wk_bytes wk_str(const char *s);
wk_bytes wk_bytes_of(const void *p, size_t n);
/* wk_eq compares bytes with a C string. */
bool wk_eq(wk_bytes b, const char *s);
/* wk_parse_int parses the whole of s as a decimal integer with an optional
 * sign (as Go's strconv.ParseInt(s, 10, 64)); false if it is not one or
 * overflows. */
bool wk_parse_int(wk_bytes s, int64_t *out);

/* ---- Hooks: define the ones the actor needs ----
 * Each returns 0 for success, anything else for failure (see wk_fail).
 * An undefined hook behaves as the ABI says: without wk_fetch every request
 * fails, without wk_ws_open every WebSocket is refused (1008), and the other
 * missing hooks succeed doing nothing (an alarm without wk_alarm fails, so
 * it is retried). */

typedef struct {
  wk_bytes name, value;
} wk_header;

/* An HTTP request: to this actor (wk_fetch, where path is what follows
 * /actor/<class>/<name>, with the query) or from it (wk_call, where path
 * starts with "/"; wk_http_fetch, where it is the absolute URL). */
typedef struct {
  wk_bytes method; /* empty: GET, when sending */
  wk_bytes path;
  const wk_header *headers;
  size_t header_count;
  wk_bytes body;
} wk_request;

/* The answer of wk_call or wk_http_fetch. */
typedef struct {
  int status;
  const wk_header *headers;
  size_t header_count;
  wk_bytes body;
} wk_response;

/* The response a request hook builds. Its memory is the SDK's. */
typedef struct wk_writer wk_writer;

typedef struct {
  bool binary; /* false: text */
  wk_bytes data;
} wk_message;

int wk_fetch(const wk_request *req, wk_writer *w); /* a request */
int wk_init(void);                                  /* once per module version, before the first event */
int wk_alarm(void);                                 /* the alarm is due; must be idempotent */
int wk_ws_open(uint64_t conn, wk_bytes path);       /* failing refuses the socket */
int wk_ws_message(uint64_t conn, wk_message msg);
int wk_ws_close(uint64_t conn, int code, wk_bytes reason);

/* wk_fail sets the message of the failing hook and returns 1, for
 * `return wk_fail("...")`. For requests and wk_init the client gets it in
 * the 500's body as "actor error: <msg>". */
int wk_fail(const char *msg);

/* ---- Building the response (wk_fetch) ----
 * Without any call the answer is 200 with an empty body. A non-empty body
 * without a Content-Type is sent as text/plain; charset=utf-8. Header names
 * and values are copied. Writers return false only when memory runs out. */
void wk_status(wk_writer *w, int status); /* the last call counts */
/* wk_set_header replaces any header of that name (any case); wk_add_header
 * adds one more (Set-Cookie). */
bool wk_set_header(wk_writer *w, const char *name, const char *value);
bool wk_add_header(wk_writer *w, const char *name, const char *value);
bool wk_write(wk_writer *w, const void *data, size_t len);
bool wk_write_str(wk_writer *w, const char *s);
bool wk_write_int(wk_writer *w, int64_t v);
/* wk_http_error answers status with msg and a newline as a plain-text body, as
 * Go's http.Error does. */
bool wk_http_error(wk_writer *w, int status, const char *msg);

/* wk_url_path is the path of a request's path and query, without the query
 * and percent-decoded (Go's URL.Path): "/a%20b?x=1" gives "/a b". Without a
 * "%" it is a view of target, else arena memory (empty if memory runs out). */
wk_bytes wk_url_path(wk_bytes target);
/* wk_url_param gives the first value of the query parameter name in path
 * (a request's path and query), percent-decoded and with "+" as a space, or
 * false if there is none. */
bool wk_url_param(wk_bytes path, const char *name, wk_bytes *value);

/* wk_header_get returns the first header named name (any case), or false. */
bool wk_header_get(const wk_header *hs, size_t n, const char *name, wk_bytes *value);

/* ---- The event arena ----
 * wk_alloc returns n bytes (8-aligned) valid until the hook returns, or
 * NULL when memory runs out. A wk_buf grows in the arena. */
void *wk_alloc(size_t n);

typedef struct {
  uint8_t *ptr;
  size_t len, cap;
} wk_buf;

bool wk_buf_write(wk_buf *b, const void *data, size_t len);
bool wk_buf_str(wk_buf *b, const char *s);
bool wk_buf_int(wk_buf *b, int64_t v);
bool wk_buf_uint(wk_buf *b, uint64_t v);
/* wk_buf_bytes views the buffer's contents (NUL-terminated). */
wk_bytes wk_buf_bytes(wk_buf *b);

/* ---- The ABI's encoding (docs/abi.md, section 5) ----
 * Little-endian fixed-width integers; bytes are a u32 length, then the
 * bytes; a list is a u32 count, then the elements. The SDK's protocols
 * between actors (docs/sdk-protocols.md) use it too. Writers return false
 * only when memory runs out. */
bool wk_put_u8(wk_buf *b, uint8_t v);
bool wk_put_u32(wk_buf *b, uint32_t v);
bool wk_put_u64(wk_buf *b, uint64_t v);
bool wk_put_bytes(wk_buf *b, wk_bytes v);

/* A wk_reader walks a payload in arena memory (a wk_call answer's body is),
 * which it changes: bytes are NUL-terminated in place, moved over their own
 * 4-byte length, which leaves room for the NUL before the next field. The
 * first failure sticks in bad, and reads after it give zeros. */
typedef struct {
  uint8_t *p, *end;
  bool bad;
} wk_reader;

uint8_t wk_get_u8(wk_reader *r);
uint32_t wk_get_u32(wk_reader *r);
uint64_t wk_get_u64(wk_reader *r);
wk_bytes wk_get_bytes(wk_reader *r);
/* wk_get_count reads a list's count, failing when fewer than count * min
 * bytes remain, so a corrupt count cannot ask for a huge array. */
size_t wk_get_count(wk_reader *r, size_t min);

/* ---- Errors ---- */

typedef enum {
  WK_ERR_NONE = 0,
  WK_ERR_SQL,    /* kind: wk_sql_error_kind */
  WK_ERR_CALL,   /* kind: wk_call_error_kind */
  WK_ERR_FETCH,  /* kind: wk_fetch_error_kind */
  WK_ERR_SEND,   /* kind: wk_send_error */
  WK_ERR_MEMORY, /* linear memory ran out (the host caps it) */
  WK_ERR_HOST,   /* the host answered something this SDK cannot decode */
} wk_error_source;

typedef enum {
  WK_SQL_SYNTAX = 0,
  WK_SQL_CONSTRAINT = 1,
  WK_SQL_BIND = 2,
  WK_SQL_MULTIPLE_STATEMENTS = 3,
  WK_SQL_QUOTA_EXCEEDED = 4,
  WK_SQL_NOT_ALLOWED = 5,
  WK_SQL_INTERNAL = 6,
} wk_sql_error_kind;

typedef enum {
  WK_CALL_INVALID_ADDRESS = 0,
  WK_CALL_REENTRANT = 1,
  WK_CALL_TOO_LARGE = 2,
  WK_CALL_TIMEOUT = 3,
  WK_CALL_FAILED = 4,
} wk_call_error_kind;

typedef enum {
  WK_FETCH_INVALID_REQUEST = 0,
  WK_FETCH_DESTINATION_IP_PROHIBITED = 1,
  WK_FETCH_HTTP_REQUEST_DENIED = 2,
  WK_FETCH_DNS_ERROR = 3,
  WK_FETCH_CONNECTION_REFUSED = 4,
  WK_FETCH_TIMEOUT = 5,
  WK_FETCH_TLS_ERROR = 6,
  WK_FETCH_TOO_LARGE = 7,
  WK_FETCH_TOO_MANY_REQUESTS = 8,
  WK_FETCH_FAILED = 9,
} wk_fetch_error_kind;

typedef enum {
  WK_SEND_OK = 0,
  WK_SEND_UNKNOWN_CONNECTION = 1,
  WK_SEND_BACKPRESSURE = 2, /* the message was dropped */
} wk_send_error;

typedef struct {
  wk_error_source source;
  int kind;        /* within source */
  wk_bytes detail; /* the host's message, e.g. SQLite's */
} wk_error;

/* The last failure of this event, or source WK_ERR_NONE. */
const wk_error *wk_last_error(void);
/* wk_errmsg is the last failure as text, e.g. "sql syntax: near "SELEC":
 * syntax error", or "" if none. */
const char *wk_errmsg(void);

/* ---- Storage: the actor's SQLite database ---- */

typedef enum { WK_NULL = 0, WK_INTEGER = 1, WK_REAL = 2, WK_TEXT = 3, WK_BLOB = 4 } wk_kind;

typedef struct {
  wk_kind kind;
  union {
    int64_t i;
    double f;
    wk_bytes b; /* text and blob */
  } u;
} wk_value;

wk_value wk_null(void);
wk_value wk_int(int64_t v);
wk_value wk_real(double v);
wk_value wk_text(const char *s);
wk_value wk_text_n(wk_bytes s);
wk_value wk_blob(const void *p, size_t n);

/* Conversions as SQLite does them: wk_value_int gives an integer, a real
 * truncated, or a text parsed as a decimal integer (0 otherwise);
 * wk_value_bytes gives text and blob bytes (empty otherwise). */
int64_t wk_value_int(const wk_value *v);
double wk_value_real(const wk_value *v);
wk_bytes wk_value_bytes(const wk_value *v);

/* A query's result, decoded whole; values row by row. */
typedef struct {
  size_t columns, rows;
  const wk_bytes *names; /* columns of them */
  const wk_value *values; /* rows * columns of them */
} wk_rows;

/* wk_at is the value at row r, column c (NULL outside the result). */
const wk_value *wk_at(const wk_rows *rows, size_t r, size_t c);

/* Parameter lists: wk_exec(sql, WK_ARGS(wk_int(1), wk_text("a")), NULL). */
#define WK_ARGS(...) \
  ((const wk_value[]){__VA_ARGS__}), (sizeof((const wk_value[]){__VA_ARGS__}) / sizeof(wk_value))
#define WK_NO_ARGS NULL, 0

/* wk_exec runs one statement without rows; *changed (if not NULL) gets the
 * number of rows changed. wk_exec_durable returns once the write is durable
 * (in a transaction it takes only COMMIT). wk_query returns the rows. */
bool wk_exec(const char *sql, const wk_value *args, size_t nargs, int64_t *changed);
bool wk_exec_durable(const char *sql, const wk_value *args, size_t nargs, int64_t *changed);
bool wk_query(const char *sql, const wk_value *args, size_t nargs, wk_rows *rows);
/* wk_query_int runs a query and gives the first column of its first row as
 * an integer, or def when there is no row. */
bool wk_query_int(const char *sql, const wk_value *args, size_t nargs, int64_t def, int64_t *out);

/* wk_delete_self deletes this actor (database and alarm) when the event
 * ends; wk_delete_self_durable does it now, after which storage calls in the
 * event fail with WK_SQL_NOT_ALLOWED. */
bool wk_delete_self(void);
bool wk_delete_self_durable(void);

/* ---- Alarms: one pending alarm, in milliseconds since the Unix epoch ---- */
void wk_alarm_set(int64_t at_ms);
bool wk_alarm_get(int64_t *at_ms); /* false: none pending */
void wk_alarm_clear(void);
/* wk_now_ms is the real time in milliseconds since the Unix epoch. */
int64_t wk_now_ms(void);

/* ---- Actors ---- */

typedef struct {
  wk_bytes tenant, class_name, name; /* name decoded */
} wk_address;

/* wk_call sends req to "class/name" in this tenant and waits for the
 * answer; a callee's 500 is a response, not an error (WK_ERR_CALL). */
bool wk_call(const char *address, const wk_request *req, wk_response *res);
wk_address wk_self_address(void);

/* ---- Outbound HTTP ----
 * req->path is the absolute http or https URL; step_timeout_ms bounds each
 * step (0: 30 s, at most 60 s). Redirects are answered, not followed.
 * Failures are WK_ERR_FETCH. */
bool wk_http_fetch(const wk_request *req, uint32_t step_timeout_ms, wk_response *res);

/* ---- WebSockets ---- */

/* wk_send and wk_send_binary queue a message and never wait: false with
 * WK_ERR_SEND (unknown connection, or backpressure: dropped). */
bool wk_send(uint64_t conn, wk_bytes text);
bool wk_send_binary(uint64_t conn, wk_bytes data);
/* wk_close closes conn with code 1000 or 3000-4999 (another fails the
 * event) after what is queued on it. */
void wk_close(uint64_t conn, int code, const char *reason);
/* wk_connections sets *ids to the open connections, oldest first, and
 * returns their number, or -1 when memory runs out. */
long wk_connections(const uint64_t **ids);

/* ---- Configuration ---- */

/* wk_env gives the class's value of name (NUL-terminated), or false if it
 * is not set: its deployed configuration, the app's secrets in the bucket,
 * the node's --env, last wins. Values change between events, never during
 * one. */
bool wk_env(const char *name, wk_bytes *value);

#ifdef __cplusplus
}
#endif
#endif
