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

/* Every worker of the job is expected from the start (a sync step must not close
 * before the late starters pushed): each has one timeout from `now` to show up.
 * PS_OK or PS_ENOMEM. */
int ps_members_init(ps_members *ms, uint32_t n, uint64_t timeout_ns, uint64_t tick_ns,
                    uint64_t now);
void ps_members_free(ps_members *ms);
/* 1 when w is a worker index of the job. */
int ps_members_valid(const ps_members *ms, uint32_t w);
/* 1 when w is in the expected set. */
int ps_members_live(const ps_members *ms, uint32_t w);
/* w showed a sign of life (a request naming it, or a heartbeat). */
void ps_members_seen(ps_members *ms, uint32_t w, uint64_t now);
/* w said Hello: it (re)joins the expected set. 1 when it was not in it. */
int ps_members_join(ps_members *ms, uint32_t w, uint64_t now);
/* w said Goodbye: it leaves the expected set, finished. 1 when it was in it. */
int ps_members_leave(ps_members *ms, uint32_t w);
/* Removes the workers silent for longer than the timeout; gone[w] is set for
 * each (gone has n entries, cleared first). Returns how many were removed.
 * The owner's own stall is not the workers' silence: when this call comes more
 * than two ticks after the last one, the time beyond one tick is not counted
 * against anyone (their heartbeats of that time are still unread). */
uint32_t ps_members_expire(ps_members *ms, uint64_t now, unsigned char *gone);
/* Async: records that w pushed at `clock`; returns how many clocks the newest
 * push of any worker is ahead of it (its staleness). */
uint64_t ps_members_note_clock(ps_members *ms, uint32_t w, uint64_t clock);
/* Async: the smallest clock among live workers (UINT64_MAX when none is live). */
uint64_t ps_members_min_clock(const ps_members *ms);

#endif
