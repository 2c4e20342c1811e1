/* A raw DEALER for integration tests: requests built by hand (byte by byte
 * or from a Ps__Header), replies decoded and checked, no client library. */
#ifndef PS_TEST_RAW_H
#define PS_TEST_RAW_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "wire.h"

typedef struct {
    void *ctx, *sock;
} raw_conn;

/* Connects to psd at endpoint ("host:port", or "ipc://PATH" as is). */
void raw_open(raw_conn *r, const char *endpoint);
void raw_close(raw_conn *r);
/* Sends n frames (copied) as one message. */
void raw_send(raw_conn *r, const void *const *data, const size_t *lens, size_t n);
/* Sends [packed h][payloads...]; h is sent with the protocol_version it has. */
void raw_send_hdr(raw_conn *r, const Ps__Header *h, const void *const *pl, const size_t *pl_lens,
                  size_t n_pl);
/* Receives one reply within timeout_ms: its decoded header (caller frees), or NULL when none
 * came. The payload frames go to *f when f is non-NULL (caller closes), else are dropped. */
Ps__Header *raw_recv(raw_conn *r, int timeout_ms, ps_frames *f);
/* Waits up to timeout_ms for an Error reply and checks its code, name, message and echoed
 * request id. */
void raw_expect_error(raw_conn *r, uint64_t request_id, int code, int timeout_ms);
/* As raw_expect_error, and the message must contain want (NULL: any non-empty one). */
void raw_expect_error_text(raw_conn *r, uint64_t request_id, int code, const char *want,
                           int timeout_ms);

/* A fake shard: a ROUTER bound to 127.0.0.1 (a port the system picks) whose thread decodes
 * each request and hands it to fn (undecodable messages are dropped). */
typedef struct raw_router raw_router;
/* Called on the router's thread with the peer's routing id, the decoded header and all
 * frames (frames[0] the id, frames[1] the header, then the payloads). Returns 1 when it
 * keeps req (and frees it later with ps__header__free_unpacked), else 0 (the router frees
 * it). The frames are closed after it returns. */
typedef int (*raw_router_fn)(raw_router *r, const zmq_msg_t *id, Ps__Header *req, ps_frames *f,
                             void *user);
struct raw_router {
    void *ctx, *sock;
    char endpoint[64]; /* "127.0.0.1:PORT" */
    pthread_t thread;
    atomic_int stop;
    int running;
    raw_router_fn fn;
    void *user;
};
/* Binds r and starts its thread; fails the test when it cannot. */
void raw_router_start(raw_router *r, raw_router_fn fn, void *user);
/* Stops the thread and closes the socket (no-op when not running). */
void raw_router_stop(raw_router *r);
/* Sends h (protocol version and request_id set here) and n payloads to the peer id. */
void raw_router_reply(raw_router *r, const zmq_msg_t *id, uint64_t request_id, Ps__Header *h,
                      const ps_payload *pl, size_t n);

/* A message encoded by hand, for bytes protobuf-c would not send (its pack stops a
 * string at its first NUL). */
typedef struct {
    uint8_t b[1024];
    size_t n;
} raw_pb;
void raw_pb_varint(raw_pb *p, uint64_t v);
/* Appends length-delimited field `field` holding data[0..len). */
void raw_pb_bytes(raw_pb *p, unsigned field, const void *data, size_t len);
/* A TensorMeta of a float32 tensor of shape [2] named name[0..len). */
raw_pb raw_pb_meta2(const char *name, size_t len);
/* Sends Header { protocol_version, request_id, body field `field` = body } followed by
 * n_payloads frames, each the 2 floats at payload. */
void raw_send_body(raw_conn *r, uint64_t request_id, unsigned field, const raw_pb *body,
                   size_t n_payloads, const float *payload);

#endif
