/* Chat-room in C: one actor per room (/actor/chat/<room>), as the Go
 * chat-room (examples/chat-room). Every client that connects over WebSocket
 * gets the room's recent history, every message is kept in the room's
 * SQLite database and broadcast to everyone connected, and leaving is
 * announced. The host keeps the sockets while the room hibernates. GET
 * returns the history as text. */
#include "wasmkeep.h"

/* HISTORY_LEN is how many past messages a newcomer receives. */
#define HISTORY_LEN 50

int wk_init(void) {
  return !wk_exec("CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY, body TEXT NOT NULL)", WK_NO_ARGS,
                  NULL);
}

int wk_ws_open(uint64_t conn, wk_bytes path) {
  (void)path;
  wk_rows rows;
  if (!wk_query("SELECT body FROM (SELECT id, body FROM messages ORDER BY id DESC LIMIT ?) ORDER BY id",
                WK_ARGS(wk_int(HISTORY_LEN)), &rows))
    return 1;
  for (size_t i = 0; i < rows.rows; i++)
    wk_send(conn, wk_value_bytes(wk_at(&rows, i, 0))); /* queued: the client sees it once connected */
  return 0;
}

/* say keeps a line in the history and sends it to everyone in the room. A
 * client too slow to keep up misses the line (backpressure), not the
 * others. */
static int say(wk_buf *line) {
  wk_bytes text = wk_buf_bytes(line);
  if (!wk_exec("INSERT INTO messages (body) VALUES (?)", WK_ARGS(wk_text_n(text)), NULL))
    return 1;
  const uint64_t *conns;
  long n = wk_connections(&conns);
  for (long i = 0; i < n; i++)
    wk_send(conns[i], text);
  return n < 0;
}

/* space_at is the length of the white space (Go's unicode.IsSpace) that is
 * exactly the n bytes at p, or 0. */
static size_t space_at(const uint8_t *p, size_t n) {
  if (n == 1 && (p[0] == ' ' || (p[0] >= '\t' && p[0] <= '\r')))
    return 1;
  if (n == 2 && p[0] == 0xC2 && (p[1] == 0x85 || p[1] == 0xA0))
    return 2;
  if (n == 3 && (p[0] & 0xF0) == 0xE0 && (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80) {
    unsigned c = (p[0] & 0x0Fu) << 12 | (p[1] & 0x3Fu) << 6 | (p[2] & 0x3Fu);
    if (c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
        c == 0x205F || c == 0x3000)
      return 3;
  }
  return 0;
}

/* trim_space drops leading and trailing white space, as Go's
 * strings.TrimSpace. */
static wk_bytes trim_space(wk_bytes s) {
  for (bool more = true; more && s.len > 0;) {
    more = false;
    for (size_t k = 1; k <= 3 && k <= s.len; k++)
      if (space_at(s.ptr, k) == k) {
        s.ptr += k, s.len -= k, more = true;
        break;
      }
  }
  for (bool more = true; more && s.len > 0;) {
    more = false;
    for (size_t k = 1; k <= 3 && k <= s.len; k++)
      if (space_at(s.ptr + s.len - k, k) == k) {
        s.len -= k, more = true;
        break;
      }
  }
  return s;
}

int wk_ws_message(uint64_t conn, wk_message msg) {
  wk_bytes text = trim_space(msg.data);
  wk_buf line = {0};
  if (!wk_buf_str(&line, "#") || !wk_buf_uint(&line, conn) || !wk_buf_str(&line, ": ") ||
      !wk_buf_write(&line, text.ptr, text.len))
    return 1;
  return say(&line);
}

int wk_ws_close(uint64_t conn, int code, wk_bytes reason) {
  (void)code, (void)reason;
  wk_buf line = {0};
  if (!wk_buf_str(&line, "#") || !wk_buf_uint(&line, conn) || !wk_buf_str(&line, " left"))
    return 1;
  return say(&line);
}

int wk_fetch(const wk_request *req, wk_writer *w) {
  (void)req;
  wk_rows rows;
  if (!wk_query("SELECT body FROM messages ORDER BY id", WK_NO_ARGS, &rows))
    return !wk_http_error(w, 500, wk_errmsg());
  for (size_t i = 0; i < rows.rows; i++) {
    wk_bytes body = wk_value_bytes(wk_at(&rows, i, 0));
    if (!wk_write(w, body.ptr, body.len) || !wk_write(w, "\n", 1))
      return 1;
  }
  return 0;
}
