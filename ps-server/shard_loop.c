/* psd's side of the shard's membership: the shard (shard/shard.h) on the loop's
 * clock, with the tick's period from the flags and the log lines of what the
 * tick changed. */
#include <stdint.h>
#include <stdlib.h>

#include "log.h"
#include "ps_error.h"
#include "replica.h"
#include "server.h"

static uint64_t loop_clock(void *ctx) {
    (void)ctx;
    return ps__now_ns();
}

int ps__shard_init(ps_server *s) {
    const ps_server_config *c = &s->cfg;
    ps_shard_config sc = {
        .async = c->mode == PS_MODE_ASYNC,
        .workers = (uint32_t)c->workers,
        .to_aggregate = (uint32_t)c->replicas,
        .workers_min = (uint32_t)c->workers_min,
        .staleness = c->staleness,
        .shard = c->shard,
        .worker_timeout_ns = (uint64_t)c->worker_timeout_ms * 1000000ull,
        .tick_ns = ps__members_tick_ms(s) * 1000000ull,
        .pending = {(size_t)c->max_pending_pulls, (size_t)c->max_pending_per_peer,
                    (size_t)c->max_pending_mb << 20, (uint64_t)c->max_pull_wait_ms * 1000000ull},
        .max_table_bytes = (uint64_t)c->max_table_mb << 20,
    };
    ps_shard_out out = {s, ps__pending_answer, ps__pending_answer_error,
                        c->group_replicas > 1 ? ps__repl_log : NULL};
    return ps_shard_init(&s->shard, &sc, loop_clock, NULL, &out);
}

void ps__log_quorum(ps_server *s) {
    int below = ps_shard_below_min(&s->shard);
    if (below == s->below_min) return;
    s->below_min = below;
    if (below)
        PS_WARN("%u live worker(s), fewer than --workers-min %ld: steps wait for workers to "
                "join (a pull waits at most --max-pull-wait-ms %ld)",
                s->shard.members.live, s->cfg.workers_min, s->cfg.max_pull_wait_ms);
    else
        PS_INFO("%u live workers, at least --workers-min %ld: steps close again",
                s->shard.members.live, s->cfg.workers_min);
}

uint64_t ps__members_tick_ms(const ps_server *s) {
    uint64_t tick = (uint64_t)s->cfg.worker_timeout_ms / 4;
    if (tick > (uint64_t)s->cfg.max_pull_wait_ms / 4) tick = (uint64_t)s->cfg.max_pull_wait_ms / 4;
    return tick < 10 ? 10 : tick > 1000 ? 1000 : tick;
}

void ps__members_expire(ps_server *s) {
    ps_shard *sh = &s->shard;
    uint64_t stalls = sh->members.stalls;
    unsigned char *gone = calloc(sh->members.n ? sh->members.n : 1, 1);
    if (!gone) return; /* the next tick tries again */
    uint64_t now = ps__now_ns();
    uint32_t removed = ps_shard_tick(sh, gone);
    if (sh->members.stalls != stalls)
        PS_DEBUG("loop stalled for more than two membership ticks: not counted as worker silence");
    for (uint32_t w = 0; removed && w < sh->members.n; w++)
        if (gone[w])
            PS_WARN("worker %u removed: silent for %llu ms (more than --worker-timeout %ld); %u "
                    "live",
                    w, (unsigned long long)((now - sh->members.m[w].last_seen_ns) / 1000000ull),
                    s->cfg.worker_timeout_ms, sh->members.live);
    free(gone);
    ps__log_quorum(s);
    if (sh->stats.apply_nomem != s->nomem_logged) { /* at most one line a tick */
        PS_ERROR("out of memory applying updates: %llu gradient(s) dropped so far",
                 (unsigned long long)sh->stats.apply_nomem);
        s->nomem_logged = sh->stats.apply_nomem;
    }
}

void ps__server_disconnected(ps_server *s, int fd) {
    ps_shard *sh = &s->shard;
    unsigned char *gone = calloc(sh->members.n ? sh->members.n : 1, 1);
    if (!gone) { /* the pulls at least; the workers then time out */
        size_t dropped = ps_pending_release_fd(&sh->pending, fd);
        if (dropped) PS_DEBUG("a connection closed: %zu waiting pull(s) of it dropped", dropped);
        return;
    }
    size_t pulls;
    uint32_t removed = ps_shard_disconnected(sh, fd, gone, &pulls);
    if (pulls) PS_DEBUG("a connection closed: %zu waiting pull(s) of it dropped", pulls);
    for (uint32_t w = 0; removed && w < sh->members.n; w++)
        if (gone[w])
            PS_WARN("worker %u removed: its connection closed without a Goodbye; %u live", w,
                    sh->members.live);
    free(gone);
    ps__log_quorum(s);
    ps__repl_disconnected(s, fd);
}
