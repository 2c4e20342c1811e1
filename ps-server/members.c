/* The expected set of workers: who is live, who is silent for too long, who
 * finished; the sync step-closing rule (--replicas-to-aggregate capped by the
 * live workers) and the async bounded-staleness gate that depend on it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "ps_error.h"
#include "server.h"

int ps__members_init(ps_server *s) {
    s->members = calloc((size_t)s->cfg.workers, sizeof *s->members);
    if (!s->members) return PS_ENOMEM;
    /* Every worker of the job is expected from the start: a step must not
     * close before the late starters pushed. They have one timeout to show up. */
    uint64_t now = ps__now_ns();
    for (long w = 0; w < s->cfg.workers; w++) {
        s->members[w].live = 1;
        s->members[w].last_seen_ns = now;
    }
    s->live_count = (uint32_t)s->cfg.workers;
    s->expire_checked_ns = now;
    return PS_OK;
}

void ps__member_seen(ps_server *s, uint32_t w) {
    if (w < (uint32_t)s->cfg.workers) s->members[w].last_seen_ns = ps__now_ns();
}

/* Answers what a change of the expected set may have unblocked. */
static void membership_changed(ps_server *s) {
    if (s->cfg.mode == PS_MODE_SYNC)
        ps__sync_try_close_step(s);
    else if (s->pending.head)
        ps__server_answer_pending(s);
}

void ps__member_join(ps_server *s, uint32_t w) {
    ps_member *m = &s->members[w];
    m->last_seen_ns = ps__now_ns();
    m->done = 0;
    if (m->live) return;
    m->live = 1;
    s->live_count++;
    PS_INFO("worker %u rejoined (%u live)", w, s->live_count);
}

void ps__member_leave(ps_server *s, uint32_t w) {
    ps_member *m = &s->members[w];
    m->done = 1;
    if (!m->live) return;
    m->live = 0;
    s->live_count--;
    PS_INFO("worker %u finished (%u live)", w, s->live_count);
    membership_changed(s);
}

uint64_t ps__members_tick_ms(const ps_server *s) {
    uint64_t tick = (uint64_t)s->cfg.worker_timeout_ms / 4;
    if (tick > (uint64_t)s->cfg.max_pull_wait_ms / 4) tick = (uint64_t)s->cfg.max_pull_wait_ms / 4;
    return tick < 10 ? 10 : tick > 1000 ? 1000 : tick;
}

/* psd's own stall is not the workers' silence: when the loop did not get here
 * for much longer than a tick (a long checkpoint, an overloaded machine), the
 * heartbeats of that time are still unread in the socket's queue. The time
 * beyond one tick is not counted against anyone. */
static void forgive_stall(ps_server *s, uint64_t now) {
    uint64_t tick = ps__members_tick_ms(s) * 1000000ull;
    uint64_t gap = now - s->expire_checked_ns;
    s->expire_checked_ns = now;
    if (gap <= 2 * tick) return;
    uint64_t shift = gap - tick;
    s->stats.loop_stalls++;
    PS_DEBUG("loop stalled for %llu ms: not counted as worker silence",
             (unsigned long long)(gap / 1000000ull));
    for (long w = 0; w < s->cfg.workers; w++) {
        ps_member *m = &s->members[w];
        m->last_seen_ns = m->last_seen_ns + shift < now ? m->last_seen_ns + shift : now;
    }
}

void ps__members_expire(ps_server *s) {
    uint64_t now = ps__now_ns(), limit = (uint64_t)s->cfg.worker_timeout_ms * 1000000ull;
    int changed = 0;
    unsigned char *gone = NULL;
    forgive_stall(s, now);
    for (long w = 0; w < s->cfg.workers; w++) {
        ps_member *m = &s->members[w];
        if (!m->live || now - m->last_seen_ns <= limit) continue;
        m->live = 0;
        s->live_count--;
        s->stats.workers_removed++;
        changed = 1;
        if (!gone) gone = calloc((size_t)s->cfg.workers, 1);
        if (gone) gone[w] = 1;
        PS_WARN("worker %ld removed: silent for %llu ms (more than --worker-timeout %ld); %u live",
                w, (unsigned long long)((now - m->last_seen_ns) / 1000000ull),
                s->cfg.worker_timeout_ms, s->live_count);
    }
    if (!changed) return;
    membership_changed(s);
    /* what the change did not answer waits for a worker that is gone */
    for (long w = 0; gone && w < s->cfg.workers; w++)
        if (gone[w] && s->pending.head) ps__pending_drop_worker(s, (uint32_t)w);
    free(gone);
}

uint64_t ps__members_min_clock(const ps_server *s) {
    uint64_t min = UINT64_MAX;
    for (long w = 0; w < s->cfg.workers; w++)
        if (s->members[w].live && s->members[w].clock < min) min = s->members[w].clock;
    return min;
}

uint32_t ps__members_needed(const ps_server *s) {
    uint32_t need = s->cfg.replicas ? (uint32_t)s->cfg.replicas : (uint32_t)s->cfg.workers;
    if (need > s->live_count) need = s->live_count;
    return need ? need : 1;
}

int ps__staleness_allows(const ps_server *s, int has_worker, uint64_t clock) {
    if (s->cfg.mode != PS_MODE_ASYNC || s->cfg.staleness < 0 || !has_worker) return 1;
    uint64_t min = ps__members_min_clock(s);
    return min == UINT64_MAX || clock <= min + (uint64_t)s->cfg.staleness;
}
