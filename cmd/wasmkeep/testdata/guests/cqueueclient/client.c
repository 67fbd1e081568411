/* A test actor for the C queue client (sdk/c/wasmkeep_queue.h), with the
 * same routes and answers as the Go one (testdata/guests/queueclient): a
 * producer and pull consumer of the queue ?q=class/name, and a push consumer
 * that records each delivery and acts on the body ("retry", "after:<ms>",
 * "crash": trap on the first attempt, "fail": fail the batch always, by
 * returning false where the Go actor panics, anything else ack). A client
 * error is "error <kind> <status>: <message>". */
#include "wasmkeep.h"
#include "wasmkeep_queue.h"

#include <string.h>

int wk_init(void) {
  return !wk_exec("CREATE TABLE IF NOT EXISTS deliveries (seq INTEGER PRIMARY KEY, queue TEXT, id INTEGER, "
                  "attempt INTEGER, body BLOB)",
                  WK_NO_ARGS, NULL);
}

static const wk_request *request;

static int64_t num(const char *name) {
  wk_bytes v;
  int64_t n = 0;
  if (wk_url_param(request->path, name, &v))
    wk_parse_int(v, &n);
  return n;
}

/* split cuts s at each sep into at most max parts; it returns their number. */
static size_t split(wk_bytes s, uint8_t sep, wk_bytes *parts, size_t max) {
  size_t n = 0, start = 0;
  for (size_t i = 0; i <= s.len && n < max; i++)
    if (i == s.len || s.ptr[i] == sep) {
      parts[n++] = wk_bytes_of(s.ptr + start, i - start);
      start = i + 1;
    }
  return n;
}

static size_t lines(wk_bytes s) {
  size_t n = 1;
  for (size_t i = 0; i < s.len; i++)
    n += s.ptr[i] == '\n';
  return n;
}

static bool has_prefix(wk_bytes s, const char *p, wk_bytes *rest) {
  size_t n = strlen(p);
  if (s.len < n || memcmp(s.ptr, p, n) != 0)
    return false;
  *rest = wk_bytes_of(s.ptr + n, s.len - n);
  return true;
}

static wk_queue_outcome outcome(wk_bytes s) {
  wk_bytes ms;
  int64_t n = 0;
  if (wk_eq(s, "retry"))
    return wk_queue_retry_outcome();
  if (has_prefix(s, "after:", &ms) && wk_parse_int(ms, &n))
    return wk_queue_retry_after((uint64_t)n);
  return wk_queue_ack_outcome();
}

/* consume records a delivery, then acts on its body. */
static bool consume(const char *queue, const wk_queue_message *m, wk_queue_outcome *o, void *ctx) {
  (void)ctx;
  if (!wk_exec("INSERT INTO deliveries (queue, id, attempt, body) VALUES (?, ?, ?, ?)",
               WK_ARGS(wk_text(queue), wk_int((int64_t)m->id), wk_int(m->attempt), wk_text_n(m->body)), NULL))
    __builtin_trap();
  if (wk_eq(m->body, "crash") && m->attempt == 1)
    __builtin_trap(); /* the consumer crashes */
  if (wk_eq(m->body, "fail"))
    return false; /* fails the batch, as C's handlers do where Go's panic */
  *o = outcome(m->body);
  return true;
}

static void put_message_line(wk_buf *out, uint64_t id, uint64_t attempt, wk_bytes rest) {
  wk_buf_uint(out, id);
  wk_buf_str(out, " ");
  wk_buf_uint(out, attempt);
  wk_buf_str(out, " ");
  wk_buf_write(out, rest.ptr, rest.len);
}

int wk_fetch(const wk_request *req, wk_writer *w) {
  if (wk_queue_is_delivery(req))
    return wk_queue_handle_delivery(req, w, consume, NULL);
  request = req;
  wk_bytes address = wk_str("");
  wk_url_param(req->path, "q", &address);
  wk_queue q = {.address = (const char *)address.ptr};
  wk_bytes path = wk_url_path(req->path);
  wk_buf out = {0};
  wk_queue_error err;
  bool ok = true;
  if (wk_eq(path, "/send")) {
    uint64_t id = 0;
    ok = wk_queue_send_delayed(&q, req->body, (uint64_t)num("delay"), &id, &err);
    wk_buf_uint(&out, id);
  } else if (wk_eq(path, "/batch")) {
    size_t n = lines(req->body);
    wk_bytes *bodies = wk_alloc(n * sizeof *bodies);
    uint64_t *ids = wk_alloc(n * sizeof *ids);
    if (bodies == NULL || ids == NULL)
      return wk_fail("out of memory");
    split(req->body, '\n', bodies, n);
    if ((ok = wk_queue_send_batch(&q, bodies, n, ids, &err)))
      for (size_t i = 0; i < n; i++) {
        if (i > 0)
          wk_buf_str(&out, " ");
        wk_buf_uint(&out, ids[i]);
      }
  } else if (wk_eq(path, "/lease")) {
    wk_queue_messages ms;
    if ((ok = wk_queue_lease(&q, (uint32_t)num("max"), (uint64_t)num("vis"), &ms, &err)))
      for (size_t i = 0; i < ms.len; i++) {
        put_message_line(&out, ms.items[i].id, ms.items[i].attempt, ms.items[i].body);
        wk_buf_str(&out, "\n");
      }
  } else if (wk_eq(path, "/ack") || wk_eq(path, "/retry")) {
    wk_queue_message m = {.id = (uint64_t)num("id"), .attempt = (uint32_t)num("attempt")};
    wk_bytes v;
    uint64_t after = (uint64_t)num("after");
    int current = wk_eq(path, "/ack") ? wk_queue_ack(&q, &m, &err)
                                      : wk_queue_retry(&q, &m, wk_url_param(req->path, "after", &v) ? &after : NULL, &err);
    ok = current >= 0;
    wk_buf_str(&out, current == 1 ? "current" : "stale");
  } else if (wk_eq(path, "/settle")) {
    size_t n = lines(req->body);
    wk_bytes *ls = wk_alloc(n * sizeof *ls);
    wk_queue_settlement *items = wk_alloc(n * sizeof *items);
    bool *current = wk_alloc(n * sizeof *current);
    if (ls == NULL || items == NULL || current == NULL)
      return wk_fail("out of memory");
    split(req->body, '\n', ls, n);
    for (size_t i = 0; i < n; i++) {
      wk_bytes f[3] = {{0}};
      int64_t id = 0, attempt = 0;
      split(ls[i], ' ', f, 3);
      wk_parse_int(f[0], &id);
      wk_parse_int(f[1], &attempt);
      items[i] = (wk_queue_settlement){(uint64_t)id, (uint32_t)attempt, outcome(f[2])};
    }
    if ((ok = wk_queue_settle(&q, items, n, current, &err)))
      for (size_t i = 0; i < n; i++) {
        if (i > 0)
          wk_buf_str(&out, " ");
        wk_buf_str(&out, current[i] ? "1" : "0");
      }
  } else if (wk_eq(path, "/stats")) {
    wk_queue_stats s;
    if ((ok = wk_queue_get_stats(&q, &s, &err))) {
      wk_buf_str(&out, "ready ");
      wk_buf_uint(&out, s.ready);
      wk_buf_str(&out, " delayed ");
      wk_buf_uint(&out, s.delayed);
      wk_buf_str(&out, " inflight ");
      wk_buf_uint(&out, s.in_flight);
      wk_buf_str(&out, " dead ");
      wk_buf_uint(&out, s.dead);
    }
  } else if (wk_eq(path, "/dead")) {
    wk_queue_dead_letters ds;
    if ((ok = wk_queue_get_dead_letters(&q, (uint32_t)num("limit"), &ds, &err)))
      for (size_t i = 0; i < ds.len; i++) {
        put_message_line(&out, ds.items[i].id, ds.items[i].attempts, ds.items[i].reason);
        wk_buf_str(&out, " | ");
        wk_buf_write(&out, ds.items[i].body.ptr, ds.items[i].body.len);
        wk_buf_str(&out, "\n");
      }
  } else if (wk_eq(path, "/deliveries")) {
    wk_rows rows;
    if (!wk_query("SELECT queue, id, attempt, body FROM deliveries ORDER BY seq", WK_NO_ARGS, &rows))
      return !wk_http_error(w, 500, wk_errmsg());
    for (size_t i = 0; i < rows.rows; i++) {
      wk_bytes name = wk_value_bytes(wk_at(&rows, i, 0));
      wk_buf_write(&out, name.ptr, name.len);
      wk_buf_str(&out, " ");
      put_message_line(&out, (uint64_t)wk_value_int(wk_at(&rows, i, 1)), (uint64_t)wk_value_int(wk_at(&rows, i, 2)),
                       wk_value_bytes(wk_at(&rows, i, 3)));
      wk_buf_str(&out, "\n");
    }
  } else {
    return !wk_http_error(w, 404, "no such route");
  }
  if (!ok) {
    out = (wk_buf){0};
    wk_buf_str(&out, "error ");
    wk_buf_str(&out, wk_queue_error_kind_name(err.kind));
    wk_buf_str(&out, " ");
    wk_buf_int(&out, err.status);
    wk_buf_str(&out, ": ");
    wk_buf_write(&out, err.message.ptr, err.message.len);
  }
  return !wk_write(w, out.ptr == NULL ? (const void *)"" : out.ptr, out.len);
}
