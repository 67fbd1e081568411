/* The workflow client: see wasmkeep_workflow.h. */
#include "wasmkeep_workflow.h"

#include <string.h>

wk_workflow wk_workflow_client(const char *class_name) { return (wk_workflow){class_name}; }

static bool fail(wk_workflow_error *err, wk_workflow_error_kind kind, int status, wk_bytes msg) {
  if (err == NULL)
    return false;
  /* The first 400 bytes, without surrounding white space, NUL-terminated. */
  size_t n = msg.len < 400 ? msg.len : 400;
  const uint8_t *p = msg.ptr;
  while (n > 0 && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
    p++, n--;
  while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\n' || p[n - 1] == '\r' || p[n - 1] == '\t'))
    n--;
  char *m = wk_alloc(n + 1);
  if (m != NULL) {
    memcpy(m, p, n);
    m[n] = 0;
  }
  *err = (wk_workflow_error){kind, status, m != NULL ? m : "out of memory"};
  return false;
}

/* call sends op with body to the instance and gives the body of its 200. */
static bool call(const wk_workflow *c, wk_bytes id, const char *op, wk_buf *body, wk_bytes *reply,
                 wk_workflow_error *err) {
  wk_buf addr = {0}, path = {0};
  bool ok = wk_buf_str(&addr, c->class_name) && wk_buf_write(&addr, "/", 1);
  for (size_t i = 0; ok && i < id.len; i++) /* "%" is the one byte to escape: "/" cannot name an actor */
    ok = id.ptr[i] == '%' ? wk_buf_str(&addr, "%25") : wk_buf_write(&addr, &id.ptr[i], 1);
  ok = ok && wk_buf_str(&path, "/wasmkeep-workflow/v1/") && wk_buf_str(&path, op);
  if (!ok)
    return fail(err, WK_WORKFLOW_CALL, 0, wk_str("out of memory"));
  wk_request req = {.method = wk_str("POST"), .path = wk_buf_bytes(&path)};
  if (body != NULL)
    req.body = wk_buf_bytes(body);
  wk_response res;
  if (!wk_call((const char *)wk_buf_bytes(&addr).ptr, &req, &res))
    return fail(err, WK_WORKFLOW_CALL, 0, wk_str(wk_errmsg()));
  switch (res.status) {
  case 200:
    *reply = res.body;
    return true;
  case 404:
    return fail(err, WK_WORKFLOW_UNKNOWN, 0, res.body);
  case 409:
    return fail(err, WK_WORKFLOW_FINISHED, 0, res.body);
  }
  return fail(err, WK_WORKFLOW_REFUSED, res.status, res.body);
}

static bool decode_status(wk_bytes b, wk_workflow_status *s, wk_workflow_error *err) {
  wk_reader r = {(uint8_t *)b.ptr, (uint8_t *)b.ptr + b.len, false};
  wk_workflow_status st = {0};
  uint32_t state = wk_get_u32(&r);
  st.state = (wk_workflow_state)state;
  st.wake_at = wk_get_u64(&r);
  st.waiting_count = wk_get_count(&r, 4);
  wk_bytes *names = st.waiting_count > 0 ? wk_alloc(st.waiting_count * sizeof *names) : NULL;
  if (st.waiting_count > 0 && names == NULL)
    return fail(err, WK_WORKFLOW_REFUSED, 200, wk_str("out of memory"));
  for (size_t i = 0; i < st.waiting_count; i++)
    names[i] = wk_get_bytes(&r);
  st.waiting_for = names;
  st.has_output = wk_get_u32(&r) != 0;
  st.output = wk_get_bytes(&r);
  st.error = wk_get_bytes(&r);
  st.positions = wk_get_u64(&r);
  if (r.bad || r.p != r.end || state > WK_WORKFLOW_CANCELLED)
    return fail(err, WK_WORKFLOW_REFUSED, 200, wk_str("malformed status"));
  if (s != NULL)
    *s = st;
  return true;
}

bool wk_workflow_start(const wk_workflow *c, wk_bytes id, wk_bytes input, wk_workflow_status *s,
                       wk_workflow_error *err) {
  wk_buf body = {0};
  wk_bytes reply;
  if (!wk_put_bytes(&body, input))
    return fail(err, WK_WORKFLOW_CALL, 0, wk_str("out of memory"));
  return call(c, id, "start", &body, &reply, err) && decode_status(reply, s, err);
}

bool wk_workflow_get_status(const wk_workflow *c, wk_bytes id, wk_workflow_status *s, wk_workflow_error *err) {
  wk_bytes reply;
  return call(c, id, "status", NULL, &reply, err) && decode_status(reply, s, err);
}

bool wk_workflow_send_event(const wk_workflow *c, wk_bytes id, wk_bytes name, wk_bytes payload,
                            wk_workflow_error *err) {
  wk_buf body = {0};
  wk_bytes reply;
  if (!wk_put_bytes(&body, name) || !wk_put_bytes(&body, payload))
    return fail(err, WK_WORKFLOW_CALL, 0, wk_str("out of memory"));
  return call(c, id, "event", &body, &reply, err);
}

bool wk_workflow_cancel(const wk_workflow *c, wk_bytes id, wk_workflow_status *s, wk_workflow_error *err) {
  wk_bytes reply;
  return call(c, id, "cancel", NULL, &reply, err) && decode_status(reply, s, err);
}
