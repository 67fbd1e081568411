/* Rate-limiter in C, as the Go rate-limiter (examples/rate-limiter): one
 * fixed window per key, one actor per key (/actor/limit/<key>). POST
 * consumes one request of the window and answers how many are left, or 429
 * once none is; GET answers how many are left. An alarm closes each window;
 * a key idle for a whole window deletes itself. LIMIT (default 10) and
 * WINDOW_MS (default 10000) in the class's --env file size the window. */
#include "wasmkeep.h"

int wk_init(void) {
  return !(wk_exec("CREATE TABLE IF NOT EXISTS quota (id INTEGER PRIMARY KEY CHECK (id = 1), used INTEGER NOT NULL)",
                   WK_NO_ARGS, NULL) &&
           wk_exec("INSERT OR IGNORE INTO quota VALUES (1, 0)", WK_NO_ARGS, NULL));
}

/* positive reads a positive integer from the class's configuration, which
 * may change between events; NULL, or the message of a bad value. */
static const char *positive(const char *name, int64_t def, int64_t *out) {
  wk_bytes s;
  *out = def;
  if (!wk_env(name, &s))
    return NULL;
  if (wk_parse_int(s, out) && *out > 0)
    return NULL;
  wk_buf msg = {0};
  if (!wk_buf_str(&msg, name) || !wk_buf_str(&msg, " must be a positive integer"))
    return wk_errmsg();
  return (const char *)msg.ptr;
}

static const char *config(int64_t *limit, int64_t *window_ms) {
  const char *err = positive("LIMIT", 10, limit);
  return err != NULL ? err : positive("WINDOW_MS", 10000, window_ms);
}

static bool used_now(int64_t *used) { return wk_query_int("SELECT used FROM quota", WK_NO_ARGS, 0, used); }

int wk_fetch(const wk_request *req, wk_writer *w) {
  int64_t limit, window;
  const char *err = config(&limit, &window);
  if (err != NULL)
    return !wk_http_error(w, 500, err);
  /* Any request creates the key's database, even a refused one: the first
   * of a window sets the alarm that closes it, so an idle key always
   * deletes itself. */
  int64_t now = wk_now_ms(), end;
  if (!wk_alarm_get(&end)) {
    end = now + window;
    wk_alarm_set(end);
  }
  int64_t used;
  if (!used_now(&used))
    return !wk_http_error(w, 500, wk_errmsg());
  if (wk_eq(req->method, "POST")) {
    if (used >= limit) {
      int64_t secs = (end - now + 999) / 1000;
      wk_buf retry = {0};
      if (!wk_buf_int(&retry, secs > 1 ? secs : 1) || !wk_set_header(w, "Retry-After", (const char *)retry.ptr))
        return 1;
      return !wk_http_error(w, 429, "rate limit exceeded");
    }
    if (!wk_exec("UPDATE quota SET used = used + 1", WK_NO_ARGS, NULL))
      return !wk_http_error(w, 500, wk_errmsg());
    used++;
  } else if (!wk_eq(req->method, "GET")) {
    wk_set_header(w, "Allow", "GET, POST");
    return !wk_http_error(w, 405, "method not allowed");
  }
  return !(wk_write_int(w, limit - used) && wk_write(w, "\n", 1));
}

/* wk_alarm ends the window. A key that used none of it deletes itself; any
 * other starts the next window at once, so that its alarm can tell whether
 * the key stays idle. */
int wk_alarm(void) {
  int64_t limit, window, used;
  const char *err = config(&limit, &window);
  if (err != NULL)
    return wk_fail(err);
  if (!used_now(&used))
    return 1;
  if (used == 0)
    return !wk_delete_self();
  if (!wk_exec("UPDATE quota SET used = 0", WK_NO_ARGS, NULL))
    return 1;
  wk_alarm_set(wk_now_ms() + window);
  return 0;
}
