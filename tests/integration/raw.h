/* A raw DEALER for integration tests: requests built by hand (byte by byte
 * or from a Ps__Header), replies decoded and checked, no client library. */
#ifndef PS_TEST_RAW_H
#define PS_TEST_RAW_H

#include <stddef.h>
#include <stdint.h>

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

#endif
