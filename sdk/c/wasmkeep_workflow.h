/* WasmKeep C SDK: the workflow client. Starts and follows the instances of
 * a workflow class served with the Go SDK's runner (sdk/go/workflow), over
 * its protocol (docs/sdk-protocols.md, "Workflows"). sdk/c/README.md,
 * "Workflow client", is the guide.
 *
 * Every call is a wk_call to the instance's actor, class/id, that only
 * reads or records: the workflow runs in its own events. What a call hands
 * out (a status, an error's message) lives in the event arena, like
 * everything the SDK hands out: nothing to free. */
#ifndef WASMKEEP_WORKFLOW_H
#define WASMKEEP_WORKFLOW_H
#include "wasmkeep.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A client of the workflow class class_name. */
typedef struct {
  const char *class_name;
} wk_workflow;

wk_workflow wk_workflow_client(const char *class_name);

typedef enum {
  WK_WORKFLOW_RUNNING = 0,
  WK_WORKFLOW_WAITING = 1,
  WK_WORKFLOW_COMPLETED = 2,
  WK_WORKFLOW_FAILED = 3,
  WK_WORKFLOW_CANCELLED = 4,
} wk_workflow_state;

typedef struct {
  wk_workflow_state state;
  uint64_t wake_at;           /* ms since the Unix epoch; 0: none */
  const wk_bytes *waiting_for; /* the events a waiting instance waits for */
  size_t waiting_count;
  bool has_output; /* a completed instance's output (which may be empty) */
  wk_bytes output;
  wk_bytes error; /* a failed instance's error; len 0: none */
  uint64_t positions;
} wk_workflow_status;

typedef enum {
  WK_WORKFLOW_UNKNOWN = 1,  /* 404: never started, or past its retention */
  WK_WORKFLOW_FINISHED = 2, /* 409: an event to a finished instance */
  WK_WORKFLOW_CALL = 3,     /* the call failed: the instance may or may not have recorded it */
  WK_WORKFLOW_REFUSED = 4,  /* any other answer, with its status (200: a malformed status) */
} wk_workflow_error_kind;

typedef struct {
  wk_workflow_error_kind kind;
  int status;          /* WK_WORKFLOW_REFUSED's HTTP status, else 0 */
  const char *message; /* NUL-terminated */
} wk_workflow_error;

/* Each call returns false on failure and fills err if not NULL. Ids, event
 * names and payloads are bytes; an id is an actor name (no "/"). */

/* wk_workflow_start records a new instance with its input, or, if the
 * instance exists, changes nothing; either way *s (if not NULL) gets its
 * status. */
bool wk_workflow_start(const wk_workflow *c, wk_bytes id, wk_bytes input, wk_workflow_status *s,
                       wk_workflow_error *err);
bool wk_workflow_get_status(const wk_workflow *c, wk_bytes id, wk_workflow_status *s, wk_workflow_error *err);
/* wk_workflow_send_event delivers an event; each wait takes the oldest of
 * its name not taken yet. */
bool wk_workflow_send_event(const wk_workflow *c, wk_bytes id, wk_bytes name, wk_bytes payload,
                            wk_workflow_error *err);
/* wk_workflow_cancel stops the instance at once (a finished one is left as
 * it is); *s (if not NULL) gets its status. */
bool wk_workflow_cancel(const wk_workflow *c, wk_bytes id, wk_workflow_status *s, wk_workflow_error *err);

#ifdef __cplusplus
}
#endif
#endif
