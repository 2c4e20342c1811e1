/* psd's deferred pulls: Pulls and PushPulls waiting for a version or the staleness
 * gate, bounded in count (in total and per connection), in memory and in time, and
 * released when their connection closes or their worker is removed. */
#ifndef PS_PENDING_H
#define PS_PENDING_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

struct ps_server;
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

typedef struct {
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

/* Queues a pull from the connection (identity, fd) for vars[0..n) (copied). Returns
 * PS_OK, PS_EBUSY (a limit reached; err names the flag) or PS_ENOMEM. */
int ps__pending_add(struct ps_server *s, const void *identity, size_t identity_len, int fd,
                    ps_var *const *vars, size_t n, const ps_pending_info *info, char *err,
                    size_t errlen);
/* PS_OK when a pull of n variables from this connection could be deferred now, else
 * PS_EBUSY (counted, err names the flag): a PushPull asks before its push is applied,
 * so a refused one changes nothing. */
int ps__pending_room(struct ps_server *s, const void *identity, size_t identity_len, size_t n,
                     char *err, size_t errlen);
/* Unlinks p and frees it (and its peer when that was its last pull); sends nothing. */
void ps__pending_remove(struct ps_server *s, ps_pending_pull *p);
/* The connection on socket fd closed: its deferred pulls are dropped unanswered. */
void ps__pending_release_fd(struct ps_server *s, int fd);
/* Worker w was removed: its deferred pulls are answered EREJOIN. */
void ps__pending_drop_worker(struct ps_server *s, uint32_t w);
/* Answers ETIMEDOUT every pull past its deadline. */
void ps__pending_expire(struct ps_server *s);
/* Frees every deferred pull without answering (after the loop ended). */
void ps__pending_free(struct ps_server *s);

#endif
