/* A replicated shard (--replicas 2; docs/ARCHITECTURE.md, "Replicated shards"):
 * the primary streams the shard's log (shard.h, ps_shard_event) to its backup
 * and holds every reply until the backup has applied what the reply shows; the
 * backup applies the stream (ps_shard_replay) and takes over when the primary
 * falls silent. The fail-over rule is shard/lease.h's. One thread: psd's loop. */
#ifndef PS_REPLICA_H
#define PS_REPLICA_H

#include <stddef.h>
#include <stdint.h>

#include "lease.h"
#include "ps.pb-c.h"
#include "shard.h"
#include "wire.h"

struct ps_server;
struct ps_request;

typedef struct ps_repl ps_repl;

/* From the flags (s->repl stays NULL with --replicas 1). PS_OK, or PS_EINVAL /
 * PS_ENOMEM / PS_EIO with the reason. */
int ps__repl_init(struct ps_server *s, char *err, size_t errlen);
/* On the loop: the lease timer and, on a backup, the socket to the primary. */
int ps__repl_start(struct ps_server *s);
void ps__repl_stop(struct ps_server *s);
void ps__repl_free(struct ps_server *s);

/* 1 when this psd serves requests (no replication, or the primary). */
int ps__repl_serving(const struct ps_server *s);
/* The reason a request is refused here (ENOTPRIMARY), naming the primary. */
void ps__repl_not_primary(const struct ps_server *s, char *err, size_t errlen);
/* Fills the Welcome's replica fields. */
void ps__repl_welcome(const struct ps_server *s, Ps__Welcome *w);
/* The shard's log callback (ps_shard_out.log; ctx is the server). */
void ps__repl_log(void *server, const ps_shard_event *e);
/* Called for every reply: 1 when the replication took it (held until the backup
 * applied what it shows, or dropped by a primary that lost its lease), 0: send
 * it now. Payloads with a free_fn are taken either way when it returns 1. */
int ps__repl_hold(struct ps_server *s, const void *identity, size_t identity_len,
                  const Ps__Header *hdr, const ps_payload *payloads, size_t n_payloads);
/* After each request: a follower waiting for a snapshot gets it once no sync
 * step is open. */
void ps__repl_after_request(struct ps_server *s);
/* The connection on fd closed (the monitor). */
void ps__repl_disconnected(struct ps_server *s, int fd);
/* Requests from a backup's socket to this primary. */
int ps__handle_follow(struct ps_server *s, struct ps_request *r, char *err, size_t errlen);
int ps__handle_replicate_ack(struct ps_server *s, struct ps_request *r, char *err, size_t errlen);

#endif
