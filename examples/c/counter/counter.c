/* Counter in C: one integer per actor name, kept in the actor's own SQLite
 * database. GET answers it, POST adds one and answers the new value; POST to
 * the actor's /durable does so with exec-durable. The same HTTP API as the
 * Go counter (examples/counter). */
#include "wasmkeep.h"

int wk_init(void) {
  return !wk_exec("CREATE TABLE IF NOT EXISTS counter (id INTEGER PRIMARY KEY, value INTEGER NOT NULL)",
                  WK_NO_ARGS, NULL);
}

int wk_fetch(const wk_request *req, wk_writer *w) {
  if (wk_eq(req->method, "POST")) {
    /* POST .../durable answers once the write is on disk, as a Durable
     * Object's write does; bench/ compares both kinds with workerd. */
    static const char add[] = "INSERT INTO counter VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET value = value + 1";
    bool durable = wk_eq(wk_url_path(req->path), "/durable");
    if (!(durable ? wk_exec_durable(add, WK_NO_ARGS, NULL) : wk_exec(add, WK_NO_ARGS, NULL)))
      return !wk_http_error(w, 500, wk_errmsg());
  } else if (!wk_eq(req->method, "GET")) {
    wk_set_header(w, "Allow", "GET, POST");
    return !wk_http_error(w, 405, "method not allowed");
  }
  int64_t n;
  if (!wk_query_int("SELECT ifnull(max(value), 0) FROM counter", WK_NO_ARGS, 0, &n))
    return !wk_http_error(w, 500, wk_errmsg());
  return !(wk_write_int(w, n) && wk_write(w, "\n", 1));
}
