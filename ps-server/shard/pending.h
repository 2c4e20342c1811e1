/* A shard's deferred pulls: Pulls and PushPulls waiting for a version or the
 * staleness gate, bounded in count (in total and per connection), in memory and
 * in time, and released when their connection closes or their worker is
 * removed. No I/O: answering one is the owner's (a callback), and the time is
 * given to every call that needs it. The limits are psd's flags, named in the
 * refusals. */
#ifndef PS_PENDING_H
#define PS_PENDING_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

struct ps_peer;

/* One deferred pull. It keeps only what its reply needs (the request id and the
 * variables it names, which are never removed), not the request it came in. */
typedef struct ps_pending_pull {
    struct ps_pending_pull *prev, *next;           /* every deferred pull, oldest first */
    struct ps_pending_pull *peer_prev, *peer_next; /* its connection's */
    struct ps_peer *peer;                          /* who asked (identity, connection) */
    uint64_t request_id;
    uint64_t min_version;
    uint64_t clock;       /* has_worker: the staleness gate applies at this clock */
    uint64_t deadline_ns; /* answered ETIMEDOUT after this (--max-pull-wait-ms) */
    uint32_t worker;      /* has_worker: the worker that asked */
    unsigned char has_worker, push_pull;
    unsigned char applied, dropped; /* PushPull: its push's outcome, for the reply */
    size_t bytes;                   /* charged against --max-pending-mb */
    struct ps_table_entry *table;   /* a PullRows: the table, and the ids (owned) it asks for */
    uint64_t *ids;
    size_t n_ids;
    size_t n_vars;
    ps_var *vars[]; /* the values it wants back, in order */
} ps_pending_pull;

/* A connection with deferred pulls (exists only while it has some). */
typedef struct ps_peer {
    struct ps_peer *hnext; /* hash chain */
    ps_pending_pull *pulls;
    size_t n_pulls;
    int fd; /* the connection's socket (ZMQ_SRCFD), matched against disconnect events */
    size_t identity_len;
    unsigned char identity[]; /* the ROUTER routing id */
} ps_peer;

#define PS_PEER_BUCKETS 1024

/* --max-pending-pulls, --max-pending-per-peer, --max-pending-mb, --max-pull-wait-ms */
typedef struct {
    size_t max_pulls, max_per_peer, max_bytes;
    uint64_t wait_ns;
} ps_pending_limits;

typedef struct {
    ps_pending_limits limits;
    ps_pending_pull *head, *tail;
    size_t n, bytes, n_peers;
    ps_peer *buckets[PS_PEER_BUCKETS];
    uint64_t refused;   /* EBUSY: a limit was reached */
    uint64_t timed_out; /* ETIMEDOUT after --max-pull-wait-ms */
    uint64_t released;  /* dropped: connection closed, or answered EREJOIN: worker removed */
} ps_pending;

/* What a deferred pull waits for and answers with. */
typedef struct {
    uint64_t request_id, min_version, clock;
    int has_worker, push_pull, applied, dropped;
    uint32_t worker;
    /* a PullRows (vars empty): its table and ids (copied while it waits) */
    void *table;
    const uint64_t *ids;
    size_t n_ids;
} ps_pending_info;

/* Answers p with an error (code, msg); the pending list removes p afterwards. */
typedef void ps_pending_answer_fn(void *ctx, ps_pending_pull *p, int code, const char *msg);

void ps_pending_init(ps_pending *q, const ps_pending_limits *limits);
/* Queues a pull from the connection (identity, fd) for vars[0..n) (copied), with its
 * deadline from `now`. Returns PS_OK, PS_EBUSY (a limit reached; err names the flag)
 * or PS_ENOMEM. */
int ps_pending_add(ps_pending *q, const void *identity, size_t identity_len, int fd,
                   ps_var *const *vars, size_t n, const ps_pending_info *info, uint64_t now,
                   char *err, size_t errlen);
/* PS_OK when a pull of n variables from this connection could be deferred now, else
 * PS_EBUSY (counted, err names the flag): a PushPull asks before its push is applied,
 * so a refused one changes nothing. */
int ps_pending_room(ps_pending *q, const void *identity, size_t identity_len, size_t n,
                    char *err, size_t errlen);
/* Unlinks p and frees it (and its peer when that was its last pull); answers nothing. */
void ps_pending_remove(ps_pending *q, ps_pending_pull *p);
/* The connection on socket fd closed: its deferred pulls are dropped unanswered.
 * Returns how many. */
size_t ps_pending_release_fd(ps_pending *q, int fd);
/* Worker w was removed: each of its deferred pulls is answered EREJOIN through fn. */
void ps_pending_drop_worker(ps_pending *q, uint32_t w, ps_pending_answer_fn *fn, void *ctx);
/* Answers ETIMEDOUT through fn every pull whose deadline is at or before now. */
void ps_pending_expire(ps_pending *q, uint64_t now, ps_pending_answer_fn *fn, void *ctx);
/* Frees every deferred pull without answering. */
void ps_pending_free(ps_pending *q);

#endif
