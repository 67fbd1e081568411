/* WasmKeep C SDK: the queue client, and the helper for push consumers. It
 * speaks docs/sdk-protocols.md ("Queues") to a queue class built with the Go
 * SDK (sdk/go/queue); sdk/c/README.md ("Queue client") is the guide.
 *
 * Memory: as everywhere in the SDK, what a call hands back (messages, dead
 * letters, an error's message) lives in the event arena until the hook
 * returns: there is nothing to free. A client borrows its address. */
#ifndef WASMKEEP_QUEUE_H
#define WASMKEEP_QUEUE_H

#include "wasmkeep.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A queue: {.address = "queue/emails"} ("class/name"). */
typedef struct {
  const char *address;
} wk_queue;

/* The most messages one send, lease, settle or delivery carries. */
#define WK_QUEUE_MAX_BATCH 1000

typedef enum {
  WK_QUEUE_STORAGE = 1, /* the queue's database failed (500) */
  WK_QUEUE_CALL = 2,    /* the call itself failed: a send may have applied */
  WK_QUEUE_REFUSED = 3, /* another status, or a reply this client cannot read (status 200) */
} wk_queue_error_kind;

typedef struct {
  wk_queue_error_kind kind;
  int status;       /* the queue's answer, for WK_QUEUE_REFUSED */
  wk_bytes message; /* at most 400 bytes of the answer, or the call's error */
} wk_queue_error;

/* "storage", "call" or "refused". */
const char *wk_queue_error_kind_name(wk_queue_error_kind kind);

/* A leased or delivered message; (id, attempt) names its lease. */
typedef struct {
  uint64_t id;
  uint32_t attempt; /* 1 the first time */
  int64_t enqueued_at; /* ms since the Unix epoch */
  wk_bytes body;
} wk_queue_message;

typedef struct {
  const wk_queue_message *items;
  size_t len;
} wk_queue_messages;

typedef enum { WK_QUEUE_ACK = 0, WK_QUEUE_RETRY = 1, WK_QUEUE_RETRY_AFTER = 2 } wk_queue_outcome_kind;

/* What a consumer makes of a message; a zeroed outcome is an ack. */
typedef struct {
  wk_queue_outcome_kind kind;
  uint64_t delay_ms; /* for WK_QUEUE_RETRY_AFTER */
} wk_queue_outcome;

wk_queue_outcome wk_queue_ack_outcome(void);
wk_queue_outcome wk_queue_retry_outcome(void); /* after the queue's backoff */
wk_queue_outcome wk_queue_retry_after(uint64_t ms);

typedef struct {
  uint64_t id;
  uint32_t attempt;
  wk_queue_outcome outcome;
} wk_queue_settlement;

typedef struct {
  uint64_t ready, delayed, in_flight, dead;
} wk_queue_stats;

typedef struct {
  uint64_t id;
  uint32_t attempts;
  int64_t enqueued_at, failed_at;
  wk_bytes reason, body;
} wk_queue_dead_letter;

typedef struct {
  const wk_queue_dead_letter *items;
  size_t len;
} wk_queue_dead_letters;

/* Each call is one actors.call. Functions return false (or -1) on failure
 * and fill *err if err is not NULL. */

/* wk_queue_send queues body; *id (if not NULL) gets its id once it is
 * durable. wk_queue_send_delayed makes it visible after delay_ms. */
bool wk_queue_send(const wk_queue *q, wk_bytes body, uint64_t *id, wk_queue_error *err);
bool wk_queue_send_delayed(const wk_queue *q, wk_bytes body, uint64_t delay_ms, uint64_t *id, wk_queue_error *err);
/* wk_queue_send_batch queues n bodies (at most WK_QUEUE_MAX_BATCH) in one
 * write, all or none; ids (if not NULL) holds n of them. n == 0 makes no
 * call. */
bool wk_queue_send_batch(const wk_queue *q, const wk_bytes *bodies, size_t n, uint64_t *ids, wk_queue_error *err);

/* wk_queue_lease takes up to max visible messages (0: the queue's batch
 * size), oldest visible first, hidden for visibility_ms (0: the queue's
 * visibility timeout). */
bool wk_queue_lease(const wk_queue *q, uint32_t max, uint64_t visibility_ms, wk_queue_messages *out,
                    wk_queue_error *err);

/* wk_queue_ack deletes m, wk_queue_retry makes it visible again after
 * *delay_ms (NULL: the queue's backoff; on its last attempt it is
 * dead-lettered). 1: done; 0: the lease is no longer current (it ran out,
 * or the message was settled or leased again), nothing changed; -1: failed. */
int wk_queue_ack(const wk_queue *q, const wk_queue_message *m, wk_queue_error *err);
int wk_queue_retry(const wk_queue *q, const wk_queue_message *m, const uint64_t *delay_ms, wk_queue_error *err);
/* wk_queue_settle applies n outcomes (at most WK_QUEUE_MAX_BATCH) in one
 * call; current (if not NULL) holds n flags: whether each lease was current
 * (items the reply leaves out are not). */
bool wk_queue_settle(const wk_queue *q, const wk_queue_settlement *items, size_t n, bool *current,
                     wk_queue_error *err);

bool wk_queue_get_stats(const wk_queue *q, wk_queue_stats *out, wk_queue_error *err);
/* Up to limit dead letters (0: 100, at most WK_QUEUE_MAX_BATCH), oldest id
 * first, with the reason each failed. */
bool wk_queue_get_dead_letters(const wk_queue *q, uint32_t limit, wk_queue_dead_letters *out, wk_queue_error *err);

/* ---- Push consumers ---- */

/* A delivery handler gives each message's outcome (queue is the queue's
 * "class/name"); returning false fails the whole batch (500), which the
 * queue retries after its backoff. It must not call the queue delivering. */
typedef bool (*wk_queue_handler)(const char *queue, const wk_queue_message *m, wk_queue_outcome *outcome,
                                 void *ctx);

/* wk_queue_is_delivery: req is a queue's push delivery. */
bool wk_queue_is_delivery(const wk_request *req);
/* wk_queue_handle_delivery answers it, calling fn once per message in
 * order; return its result from wk_fetch. Requests without
 * x-wasmkeep-caller get 403, malformed ones 400. */
int wk_queue_handle_delivery(const wk_request *req, wk_writer *w, wk_queue_handler fn, void *ctx);

#ifdef __cplusplus
}
#endif
#endif
