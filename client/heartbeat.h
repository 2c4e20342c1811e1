/* A worker's heartbeat: a thread with its own DEALER sockets that tells every
 * shard "worker i is alive" at a fixed interval, so a long computation (or
 * an evaluation on the chief) never looks like a dead worker to psd. A
 * replicated shard's beats go to the replica the client uses (ps_heartbeat_follow). */
#ifndef PS_HEARTBEAT_H
#define PS_HEARTBEAT_H

#include <stddef.h>

#include "curve_keys.h"

typedef struct ps_heartbeat ps_heartbeat;

/* Starts the thread: one DEALER per endpoint ("tcp://host:port") in a ZeroMQ
 * context of the heartbeat's own (its I/O thread is not shared with the
 * training loop's sockets), each a CURVE client with `curve` (copied; NULL:
 * plaintext). Returns PS_OK with *out owned by the caller (ps_heartbeat_stop),
 * or an error. */
int ps_heartbeat_start(const char *const *endpoints, size_t n, unsigned worker_index,
                       unsigned interval_ms, const ps_curve_client *curve, ps_heartbeat **out);
/* Points shard i's heartbeats at endpoint (copied): the replica now serving the shard.
 * The thread reconnects before its next beat. No-op for NULL hb, an i out of range, or the
 * endpoint it already uses. */
void ps_heartbeat_follow(ps_heartbeat *hb, size_t i, const char *endpoint);
/* Stops and joins the thread, closes its sockets; NULL is ignored. */
void ps_heartbeat_stop(ps_heartbeat *hb);

#endif
