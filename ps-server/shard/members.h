/* A shard's membership: which workers of the job are in the expected set, when
 * each was last heard from, each one's clock (async: pushes received). No I/O
 * and no clock of its own: every call that needs the time is given it (ns on
 * a monotonic clock), so tests drive it with simulated time. */
#ifndef PS_SHARD_MEMBERS_H
#define PS_SHARD_MEMBERS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t last_seen_ns; /* last request or heartbeat */
    uint64_t clock;        /* async: pushes received from it */
    int conn;              /* the connection its last Hello came on (-1: none known) */
    uint64_t session;      /* the client session of its last applied push with a seq */
    uint64_t last_seq;     /* that push's seq: one at or below it is a retry */
    uint64_t rows_session, rows_last_seq; /* the same for its row pushes */
    unsigned char live;    /* in the expected set */
    unsigned char done;    /* said Goodbye (finished its job) */
} ps_member;

typedef struct {
    ps_member *m; /* [n] */
    uint32_t n;   /* workers of the job */
    uint32_t live;
    uint64_t timeout_ns; /* silent longer than this: removed */
    uint64_t tick_ns;    /* how often the owner calls ps_members_expire */
    uint64_t checked_ns; /* the last ps_members_expire (a longer gap: the owner stalled) */
    uint64_t removed;    /* workers removed for silence, so far */
    uint64_t stalls;     /* expire calls late by more than a tick (not held against workers) */
} ps_members;

/* With expect_all, every worker of the job is expected from the start (a sync step
 * must not close before the late starters pushed): each has one timeout from
 * `now` to show up. Without, none is: each slot becomes live with its worker's
 * Hello (an elastic job). PS_OK or PS_ENOMEM. */
int ps_members_init(ps_members *ms, uint32_t n, int expect_all, uint64_t timeout_ns,
                    uint64_t tick_ns, uint64_t now);
void ps_members_free(ps_members *ms);
/* 1 when w is a worker index of the job. */
int ps_members_valid(const ps_members *ms, uint32_t w);
/* 1 when w is in the expected set. */
int ps_members_live(const ps_members *ms, uint32_t w);
/* w showed a sign of life (a request naming it, or a heartbeat). */
void ps_members_seen(ps_members *ms, uint32_t w, uint64_t now);
/* w said Hello on connection `conn` (-1: unknown): it (re)joins the expected set.
 * 1 when it was not in it. */
int ps_members_join(ps_members *ms, uint32_t w, uint64_t now, int conn);
/* w said Goodbye: it leaves the expected set, finished. 1 when it was in it. */
int ps_members_leave(ps_members *ms, uint32_t w);
/* Removes w from the expected set, counted as removed (a backup replaying its
 * primary's removal). 1 when it was in it. */
int ps_members_remove(ps_members *ms, uint32_t w);
/* Removes the workers silent for longer than the timeout; gone[w] is set for
 * each (gone has n entries, cleared first). Returns how many were removed.
 * The owner's own stall is not the workers' silence: when this call comes more
 * than two ticks after the last one, the time beyond one tick is not counted
 * against anyone (their heartbeats of that time are still unread). */
uint32_t ps_members_expire(ps_members *ms, uint64_t now, unsigned char *gone);
/* Connection `conn` closed: the live workers whose Hello came on it leave the
 * expected set at once (gone[w] set for each, gone cleared first), counted as
 * removed. Returns how many. A worker that said Goodbye is not live, so a clean
 * exit is not a removal. */
uint32_t ps_members_disconnect(ps_members *ms, int conn, unsigned char *gone);
/* 1 when w's push (session, seq) was applied already: a retry (seq 0: never); `rows`
 * picks its row pushes' sequence, which is separate. */
int ps_members_is_retry(const ps_members *ms, uint32_t w, int rows, uint64_t session,
                        uint64_t seq);
/* w's push (session, seq) was applied (seq 0: nothing recorded). */
void ps_members_applied(ps_members *ms, uint32_t w, int rows, uint64_t session, uint64_t seq);
/* Async: records that w pushed at `clock`; returns how many clocks the newest
 * push of any worker is ahead of it (its staleness). */
uint64_t ps_members_note_clock(ps_members *ms, uint32_t w, uint64_t clock);
/* Async: the smallest clock among live workers (UINT64_MAX when none is live). */
uint64_t ps_members_min_clock(const ps_members *ms);

#endif
