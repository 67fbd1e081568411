/* WasmKeep C SDK: the queue client (wasmkeep_queue.h), speaking
 * docs/sdk-protocols.md ("Queues"). */
#include "wasmkeep_queue.h"

#include <string.h>

#define PREFIX "/wasmkeep-queue/v1/"

const char *wk_queue_error_kind_name(wk_queue_error_kind kind) {
  switch (kind) {
  case WK_QUEUE_STORAGE:
    return "storage";
  case WK_QUEUE_CALL:
    return "call";
  case WK_QUEUE_REFUSED:
    return "refused";
  }
  return "unknown";
}

wk_queue_outcome wk_queue_ack_outcome(void) { return (wk_queue_outcome){WK_QUEUE_ACK, 0}; }
wk_queue_outcome wk_queue_retry_outcome(void) { return (wk_queue_outcome){WK_QUEUE_RETRY, 0}; }
wk_queue_outcome wk_queue_retry_after(uint64_t ms) { return (wk_queue_outcome){WK_QUEUE_RETRY_AFTER, ms}; }

static bool fail(wk_queue_error *err, wk_queue_error_kind kind, int status, wk_bytes message) {
  if (err != NULL)
    *err = (wk_queue_error){kind, status, message};
  return false;
}

/* A reply this client cannot read. */
static bool malformed(wk_queue_error *err, const char *op) {
  wk_buf b = {0};
  wk_buf_str(&b, "malformed reply to ");
  wk_buf_str(&b, op);
  return fail(err, WK_QUEUE_REFUSED, 200, wk_buf_bytes(&b));
}

/* call POSTs body to the queue's op and points r at the 200's body. */
static bool call(const wk_queue *q, const char *op, wk_buf *body, wk_reader *r, wk_queue_error *err) {
  wk_buf path = {0};
  if (!wk_buf_str(&path, PREFIX) || !wk_buf_str(&path, op))
    return fail(err, WK_QUEUE_CALL, 0, wk_str(wk_errmsg()));
  wk_request req = {.method = wk_str("POST"), .path = wk_buf_bytes(&path), .body = wk_buf_bytes(body)};
  wk_response res;
  if (!wk_call(q->address, &req, &res))
    return fail(err, WK_QUEUE_CALL, 0, wk_str(wk_errmsg()));
  if (res.status == 200) {
    /* The answer is arena memory, which the reader may change. */
    *r = (wk_reader){(uint8_t *)res.body.ptr, (uint8_t *)res.body.ptr + res.body.len, false};
    return true;
  }
  size_t n = res.body.len < 400 ? res.body.len : 400;
  while (n > 0 && res.body.ptr[n - 1] == '\n')
    n--;
  wk_buf m = {0};
  wk_buf_write(&m, res.body.ptr, n);
  if (res.status == 500)
    return fail(err, WK_QUEUE_STORAGE, 0, wk_buf_bytes(&m));
  return fail(err, WK_QUEUE_REFUSED, res.status, wk_buf_bytes(&m));
}

static bool done(wk_reader *r) { return !r->bad && r->p == r->end; }

static bool out_of_memory(wk_queue_error *err) { return fail(err, WK_QUEUE_CALL, 0, wk_str("out of memory")); }

static bool send(const wk_queue *q, const wk_bytes *bodies, size_t n, uint64_t delay_ms, uint64_t *ids,
                 wk_queue_error *err) {
  wk_buf b = {0};
  bool ok = wk_put_u64(&b, delay_ms) && wk_put_u32(&b, (uint32_t)n);
  for (size_t i = 0; ok && i < n; i++)
    ok = wk_put_bytes(&b, bodies[i]);
  wk_reader r;
  if (!ok)
    return out_of_memory(err);
  if (!call(q, "send", &b, &r, err))
    return false;
  size_t got = wk_get_count(&r, 8);
  for (size_t i = 0; i < got; i++) {
    uint64_t id = wk_get_u64(&r);
    if (ids != NULL && i < n)
      ids[i] = id;
  }
  if (!done(&r) || got != n)
    return malformed(err, "send");
  return true;
}

bool wk_queue_send(const wk_queue *q, wk_bytes body, uint64_t *id, wk_queue_error *err) {
  return send(q, &body, 1, 0, id, err);
}

bool wk_queue_send_delayed(const wk_queue *q, wk_bytes body, uint64_t delay_ms, uint64_t *id, wk_queue_error *err) {
  return send(q, &body, 1, delay_ms, id, err);
}

bool wk_queue_send_batch(const wk_queue *q, const wk_bytes *bodies, size_t n, uint64_t *ids, wk_queue_error *err) {
  return n == 0 || send(q, bodies, n, 0, ids, err);
}

/* Messages: u64 id, u32 attempt, u64 enqueued_at, bytes body. */
static bool get_messages(wk_reader *r, wk_queue_messages *out) {
  size_t n = wk_get_count(r, 8 + 4 + 8 + 4);
  wk_queue_message *ms = NULL;
  if (n > 0 && (ms = wk_alloc(n * sizeof *ms)) == NULL)
    return false;
  for (size_t i = 0; i < n; i++) {
    ms[i].id = wk_get_u64(r);
    ms[i].attempt = wk_get_u32(r);
    ms[i].enqueued_at = (int64_t)wk_get_u64(r);
    ms[i].body = wk_get_bytes(r);
  }
  *out = (wk_queue_messages){ms, n};
  return true;
}

bool wk_queue_lease(const wk_queue *q, uint32_t max, uint64_t visibility_ms, wk_queue_messages *out,
                    wk_queue_error *err) {
  *out = (wk_queue_messages){0};
  wk_buf b = {0};
  wk_reader r;
  if (!wk_put_u32(&b, max) || !wk_put_u64(&b, visibility_ms))
    return out_of_memory(err);
  if (!call(q, "lease", &b, &r, err))
    return false;
  if (!get_messages(&r, out))
    return out_of_memory(err);
  if (!done(&r)) {
    *out = (wk_queue_messages){0};
    return malformed(err, "lease");
  }
  return true;
}

static bool put_settlements(wk_buf *b, const wk_queue_settlement *items, size_t n) {
  bool ok = wk_put_u32(b, (uint32_t)n);
  for (size_t i = 0; ok && i < n; i++)
    ok = wk_put_u64(b, items[i].id) && wk_put_u32(b, items[i].attempt) && wk_put_u8(b, (uint8_t)items[i].outcome.kind) &&
         wk_put_u64(b, items[i].outcome.delay_ms);
  return ok;
}

bool wk_queue_settle(const wk_queue *q, const wk_queue_settlement *items, size_t n, bool *current,
                     wk_queue_error *err) {
  for (size_t i = 0; current != NULL && i < n; i++)
    current[i] = false;
  if (n == 0)
    return true;
  wk_buf b = {0};
  wk_reader r;
  if (!put_settlements(&b, items, n))
    return out_of_memory(err);
  if (!call(q, "settle", &b, &r, err))
    return false;
  size_t got = wk_get_count(&r, 1);
  for (size_t i = 0; i < got; i++) {
    bool c = wk_get_u8(&r) == 1;
    if (current != NULL && i < n)
      current[i] = c;
  }
  if (!done(&r)) {
    for (size_t i = 0; current != NULL && i < n; i++)
      current[i] = false;
    return malformed(err, "settle");
  }
  return true;
}

static int settle_one(const wk_queue *q, const wk_queue_message *m, wk_queue_outcome o, wk_queue_error *err) {
  wk_queue_settlement s = {m->id, m->attempt, o};
  bool current;
  if (!wk_queue_settle(q, &s, 1, &current, err))
    return -1;
  return current ? 1 : 0;
}

int wk_queue_ack(const wk_queue *q, const wk_queue_message *m, wk_queue_error *err) {
  return settle_one(q, m, wk_queue_ack_outcome(), err);
}

int wk_queue_retry(const wk_queue *q, const wk_queue_message *m, const uint64_t *delay_ms, wk_queue_error *err) {
  return settle_one(q, m, delay_ms == NULL ? wk_queue_retry_outcome() : wk_queue_retry_after(*delay_ms), err);
}

bool wk_queue_get_stats(const wk_queue *q, wk_queue_stats *out, wk_queue_error *err) {
  *out = (wk_queue_stats){0};
  wk_buf b = {0};
  wk_reader r;
  if (!call(q, "stats", &b, &r, err))
    return false;
  wk_queue_stats s;
  s.ready = wk_get_u64(&r);
  s.delayed = wk_get_u64(&r);
  s.in_flight = wk_get_u64(&r);
  s.dead = wk_get_u64(&r);
  if (!done(&r))
    return malformed(err, "stats");
  *out = s;
  return true;
}

bool wk_queue_get_dead_letters(const wk_queue *q, uint32_t limit, wk_queue_dead_letters *out, wk_queue_error *err) {
  *out = (wk_queue_dead_letters){0};
  wk_buf b = {0};
  wk_reader r;
  if (!wk_put_u32(&b, limit))
    return out_of_memory(err);
  if (!call(q, "dead", &b, &r, err))
    return false;
  size_t n = wk_get_count(&r, 8 + 4 + 8 + 8 + 4 + 4);
  wk_queue_dead_letter *ds = NULL;
  if (n > 0 && (ds = wk_alloc(n * sizeof *ds)) == NULL)
    return out_of_memory(err);
  for (size_t i = 0; i < n; i++) {
    ds[i].id = wk_get_u64(&r);
    ds[i].attempts = wk_get_u32(&r);
    ds[i].enqueued_at = (int64_t)wk_get_u64(&r);
    ds[i].failed_at = (int64_t)wk_get_u64(&r);
    ds[i].reason = wk_get_bytes(&r);
    ds[i].body = wk_get_bytes(&r);
  }
  if (!done(&r))
    return malformed(err, "dead");
  *out = (wk_queue_dead_letters){ds, n};
  return true;
}

/* ---- Push consumers ---- */

bool wk_queue_is_delivery(const wk_request *req) {
  return wk_eq(req->method, "POST") && wk_eq(wk_url_path(req->path), PREFIX "deliver");
}

int wk_queue_handle_delivery(const wk_request *req, wk_writer *w, wk_queue_handler fn, void *ctx) {
  wk_bytes caller;
  if (!wk_header_get(req->headers, req->header_count, "x-wasmkeep-caller", &caller) || caller.len == 0)
    return !wk_http_error(w, 403, "queue: deliveries come only from queues (x-wasmkeep-caller is missing)");
  /* The reader changes what it reads: work on a copy of the body. */
  uint8_t *body = wk_alloc(req->body.len + 1);
  if (body == NULL)
    return wk_fail("queue: out of memory");
  memcpy(body, req->body.ptr, req->body.len);
  wk_reader r = {body, body + req->body.len, false};
  wk_bytes queue = wk_get_bytes(&r);
  wk_queue_messages ms;
  if (!get_messages(&r, &ms))
    return wk_fail("queue: out of memory");
  if (!done(&r))
    return !wk_http_error(w, 400, "queue: malformed delivery");
  wk_queue_settlement *out = NULL;
  if (ms.len > 0 && (out = wk_alloc(ms.len * sizeof *out)) == NULL)
    return wk_fail("queue: out of memory");
  for (size_t i = 0; i < ms.len; i++) {
    out[i] = (wk_queue_settlement){ms.items[i].id, ms.items[i].attempt, wk_queue_ack_outcome()};
    if (!fn((const char *)queue.ptr, &ms.items[i], &out[i].outcome, ctx))
      return wk_fail("queue: the delivery handler failed");
  }
  wk_buf b = {0};
  if (!put_settlements(&b, out, ms.len))
    return wk_fail("queue: out of memory");
  wk_set_header(w, "content-type", "application/octet-stream");
  return !wk_write(w, b.ptr == NULL ? (const void *)"" : b.ptr, b.len);
}
