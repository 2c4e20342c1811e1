/* psd's membership glue: the expected set (shard/members.h) on the loop's clock,
 * with its log lines, and what a change of it unblocks: the sync step-closing
 * rule (--replicas-to-aggregate capped by the live workers) and the async
 * bounded-staleness gate. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "ps_error.h"
#include "server.h"

int ps__members_init(ps_server *s) {
    uint64_t tick = ps__members_tick_ms(s) * 1000000ull;
    return ps_members_init(&s->members, (uint32_t)s->cfg.workers,
                           (uint64_t)s->cfg.worker_timeout_ms * 1000000ull, tick, ps__now_ns());
}

void ps__member_seen(ps_server *s, uint32_t w) {
    ps_members_seen(&s->members, w, ps__now_ns());
}

/* Answers what a change of the expected set may have unblocked. */
static void membership_changed(ps_server *s) {
    if (s->cfg.mode == PS_MODE_SYNC)
        ps__sync_try_close_step(s);
    else if (s->pending.head)
        ps__server_answer_pending(s);
}

void ps__member_join(ps_server *s, uint32_t w) {
    if (ps_members_join(&s->members, w, ps__now_ns()))
        PS_INFO("worker %u rejoined (%u live)", w, s->members.live);
}

void ps__member_leave(ps_server *s, uint32_t w) {
    if (!ps_members_leave(&s->members, w)) return;
    PS_INFO("worker %u finished (%u live)", w, s->members.live);
    membership_changed(s);
}

uint64_t ps__members_tick_ms(const ps_server *s) {
    uint64_t tick = (uint64_t)s->cfg.worker_timeout_ms / 4;
    if (tick > (uint64_t)s->cfg.max_pull_wait_ms / 4) tick = (uint64_t)s->cfg.max_pull_wait_ms / 4;
    return tick < 10 ? 10 : tick > 1000 ? 1000 : tick;
}

void ps__members_expire(ps_server *s) {
    uint64_t now = ps__now_ns(), stalls = s->members.stalls;
    unsigned char *gone = calloc((size_t)s->cfg.workers, 1);
    if (!gone) return; /* the next tick tries again */
    uint32_t removed = ps_members_expire(&s->members, now, gone);
    if (s->members.stalls != stalls)
        PS_DEBUG("loop stalled for more than two membership ticks: not counted as worker silence");
    for (uint32_t w = 0; removed && w < s->members.n; w++)
        if (gone[w])
            PS_WARN("worker %u removed: silent for %llu ms (more than --worker-timeout %ld); %u "
                    "live",
                    w, (unsigned long long)((now - s->members.m[w].last_seen_ns) / 1000000ull),
                    s->cfg.worker_timeout_ms, s->members.live);
    if (removed) {
        membership_changed(s);
        /* what the change did not answer waits for a worker that is gone */
        for (uint32_t w = 0; w < s->members.n; w++)
            if (gone[w]) ps_pending_drop_worker(&s->pending, w, ps__pending_answer_error, s);
    }
    free(gone);
}

uint64_t ps__members_min_clock(const ps_server *s) {
    return ps_members_min_clock(&s->members);
}

uint32_t ps__members_needed(const ps_server *s) {
    return ps_step_needed(&s->step, (uint32_t)s->cfg.replicas, s->members.live);
}

int ps__staleness_allows(const ps_server *s, int has_worker, uint64_t clock) {
    if (s->cfg.mode != PS_MODE_ASYNC || s->cfg.staleness < 0 || !has_worker) return 1;
    uint64_t min = ps__members_min_clock(s);
    return min == UINT64_MAX || clock <= min + (uint64_t)s->cfg.staleness;
}
