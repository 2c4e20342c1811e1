/* psd: one libuv loop owns all of a shard's state; a ZeroMQ ROUTER is watched
 * through ZMQ_FD (edge-triggered) and every request goes through one dispatch
 * table. No locks: only the loop thread touches the server. */
#ifndef PS_SERVER_H
#define PS_SERVER_H

#include <stdint.h>
#include <uv.h>

#include "config.h"
#include "store.h"
#include "wire.h"

/* A pull waiting for a version that does not exist yet (sync mode). */
typedef struct ps_pending_pull {
    struct ps_pending_pull *next;
    void *identity; /* owned copy of the ROUTER identity */
    size_t identity_len;
    Ps__Header *req; /* owned */
} ps_pending_pull;

typedef struct {
    uint64_t requests, errors, pushes_applied, stale_pushes, updates_applied;
    uint64_t bytes_in, bytes_out, dropped_replies;
} ps_server_stats;

typedef struct ps_server {
    ps_server_config cfg;
    uv_loop_t *loop;
    uv_poll_t poll; /* on ZMQ_FD */
    uv_signal_t sigterm, sigint;
    int handles_open;
    void *zctx, *router;
    char endpoint[256]; /* "host:port" actually bound */
    ps_store store;
    uint64_t version;      /* sync: completed steps; async: applied pushes */
    unsigned char *pushed; /* sync: worker w pushed for the open step */
    uint32_t pushes_in_step;
    ps_pending_pull *pending; /* deferred pulls, oldest first */
    size_t n_pending;
    ps_server_stats stats;
    uint64_t start_ns;
    int stopping;
    float *scratch; /* for misaligned payload frames */
    size_t scratch_cap;
} ps_server;

/* A decoded request as the handlers see it. Payload frames are read in place. */
typedef struct {
    const void *identity;
    size_t identity_len;
    Ps__Header *hdr;
    zmq_msg_t *payloads;
    size_t n_payloads;
} ps_request;

/* Sets up the server state and binds the ROUTER. Returns PS_OK, PS_EADDRINUSE
 * or PS_EINVAL/PS_EIO with a reason in err. Does not start the loop. */
int ps_server_init(ps_server *s, uv_loop_t *loop, const ps_server_config *cfg, char *err,
                   size_t errlen);
/* Starts watching the socket and the signals; runs the loop until shutdown. */
int ps_server_run(ps_server *s);
/* Begins a graceful stop: answers pending pulls with ESHUTDOWN and closes handles. */
void ps_server_stop(ps_server *s);
/* Frees everything ps_server_init made (after the loop has ended). */
void ps_server_free(ps_server *s);

/* Handles one received message (frame 0 = identity): checks, dispatches and
 * replies. Never exits the process; bad input gets an error reply. */
void ps__server_dispatch(ps_server *s, ps_frames *f);
/* Sends a reply with `hdr` (its version and request id are filled in here). */
int ps__server_reply(ps_server *s, const void *identity, size_t identity_len, uint64_t request_id,
                     Ps__Header *hdr, const ps_payload *payloads, size_t n_payloads);
/* Sends an Error reply. */
void ps__server_reply_error(ps_server *s, const void *identity, size_t identity_len,
                            uint64_t request_id, int code, const char *msg);
/* Handlers; each replies itself on success, or returns an error for the dispatcher to send. */
int ps__handle_hello(ps_server *s, ps_request *r, char *err, size_t errlen);
int ps__handle_create_vars(ps_server *s, ps_request *r, char *err, size_t errlen);
int ps__handle_pull(ps_server *s, ps_request *r, char *err, size_t errlen);
int ps__handle_push(ps_server *s, ps_request *r, char *err, size_t errlen);
int ps__handle_stats(ps_server *s, ps_request *r, char *err, size_t errlen);
int ps__handle_shutdown(ps_server *s, ps_request *r, char *err, size_t errlen);
/* Answers the deferred pulls whose version now exists. */
void ps__server_answer_pending(ps_server *s);
/* Nanoseconds on a monotonic clock. */
uint64_t ps__now_ns(void);

#endif
