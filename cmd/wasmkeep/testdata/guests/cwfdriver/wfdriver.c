/* The C twin of testdata/guests/wfdriver: the same routes, driving
 * workflow instances with the C client (wasmkeep_workflow.h). */
#include "wasmkeep.h"
#include "wasmkeep_workflow.h"

int wk_init(void) {
  return !wk_exec("CREATE TABLE IF NOT EXISTS counts (key TEXT PRIMARY KEY, n INTEGER NOT NULL)", WK_NO_ARGS, NULL);
}

static const char *state_names[] = {"running", "waiting", "completed", "failed", "cancelled"};

static bool line(wk_writer *w, const wk_workflow_status *s) {
  bool ok = wk_write_str(w, state_names[s->state]) && wk_write_str(w, s->wake_at != 0 ? " wake=yes" : " wake=no") &&
            wk_write_str(w, " waiting=");
  for (size_t i = 0; ok && i < s->waiting_count; i++)
    ok = (i == 0 || wk_write_str(w, ",")) && wk_write(w, s->waiting_for[i].ptr, s->waiting_for[i].len);
  ok = ok && wk_write_str(w, " positions=") && wk_write_int(w, (int64_t)s->positions) && wk_write_str(w, " output=");
  ok = ok && (s->has_output ? wk_write(w, s->output.ptr, s->output.len) : wk_write_str(w, "-"));
  return ok && wk_write_str(w, " error=") && wk_write(w, s->error.ptr, s->error.len) && wk_write_str(w, "\n");
}

static const char *kind_names[] = {"", "unknown", "finished", "call", "refused"};

static int failed(wk_writer *w, const wk_workflow_error *err) {
  wk_buf b = {0};
  if (!(wk_buf_str(&b, kind_names[err->kind]) && wk_buf_str(&b, ": ") && wk_buf_str(&b, err->message)))
    return wk_fail("out of memory");
  return !wk_http_error(w, 502, (const char *)wk_buf_bytes(&b).ptr);
}

static int count(const wk_request *req, wk_writer *w) {
  wk_bytes key = wk_str("");
  wk_url_param(req->path, "key", &key);
  if (wk_eq(req->method, "POST") &&
      !wk_exec_durable("INSERT INTO counts (key, n) VALUES (?, 1) ON CONFLICT (key) DO UPDATE SET n = n + 1",
                       WK_ARGS(wk_text_n(key)), NULL))
    return !wk_http_error(w, 500, wk_errmsg());
  int64_t n;
  if (!wk_query_int("SELECT n FROM counts WHERE key = ?", WK_ARGS(wk_text_n(key)), 0, &n))
    return !wk_http_error(w, 500, wk_errmsg());
  return !(wk_write_int(w, n) && wk_write_str(w, "\n"));
}

int wk_fetch(const wk_request *req, wk_writer *w) {
  wk_bytes route = wk_url_path(req->path), class_name = wk_str(""), id = wk_str(""), name = wk_str("");
  if (wk_eq(route, "/count"))
    return count(req, w);
  wk_url_param(req->path, "class", &class_name); /* decoded values are NUL-terminated */
  wk_url_param(req->path, "id", &id);
  wk_url_param(req->path, "name", &name);
  wk_workflow c = wk_workflow_client((const char *)class_name.ptr);
  wk_workflow_status s;
  wk_workflow_error err;
  bool ok;
  if (wk_eq(route, "/start"))
    ok = wk_workflow_start(&c, id, req->body, &s, &err);
  else if (wk_eq(route, "/status") || wk_eq(route, "/result"))
    ok = wk_workflow_get_status(&c, id, &s, &err);
  else if (wk_eq(route, "/cancel"))
    ok = wk_workflow_cancel(&c, id, &s, &err);
  else if (wk_eq(route, "/event")) {
    if (!wk_workflow_send_event(&c, id, name, req->body, &err))
      return failed(w, &err);
    return !wk_write_str(w, "ok\n");
  } else
    return !wk_http_error(w, 404, "no such route");
  if (!ok)
    return failed(w, &err);
  if (!wk_eq(route, "/result"))
    return !line(w, &s);
  /* Go's Client.Result, over the status. */
  switch (s.state) {
  case WK_WORKFLOW_COMPLETED:
    return !(wk_write_str(w, "done ") && wk_write(w, s.output.ptr, s.output.len) && wk_write_str(w, "\n"));
  case WK_WORKFLOW_FAILED:
    wk_status(w, 502);
    return !(wk_write_str(w, "failed: ") && wk_write(w, s.error.ptr, s.error.len) && wk_write_str(w, "\n"));
  case WK_WORKFLOW_CANCELLED:
    return !wk_http_error(w, 502, "cancelled: cancelled");
  default:
    return !wk_write_str(w, "pending\n");
  }
}
