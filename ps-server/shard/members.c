/* A shard's membership (see members.h). */
#include "members.h"

#include <stdlib.h>
#include <string.h>

#include "ps_error.h"

int ps_members_init(ps_members *ms, uint32_t n, int expect_all, uint64_t timeout_ns,
                    uint64_t tick_ns, uint64_t now) {
    memset(ms, 0, sizeof *ms);
    ms->m = calloc(n ? n : 1, sizeof *ms->m);
    if (!ms->m) return PS_ENOMEM;
    ms->n = n;
    ms->timeout_ns = timeout_ns;
    ms->tick_ns = tick_ns;
    ms->checked_ns = now;
    for (uint32_t w = 0; w < n; w++) {
        ms->m[w].live = (unsigned char)!!expect_all;
        ms->m[w].last_seen_ns = now;
        ms->m[w].conn = -1;
    }
    ms->live = expect_all ? n : 0;
    return PS_OK;
}

void ps_members_free(ps_members *ms) {
    free(ms->m);
    ms->m = NULL;
}

int ps_members_valid(const ps_members *ms, uint32_t w) {
    return w < ms->n;
}

int ps_members_live(const ps_members *ms, uint32_t w) {
    return w < ms->n && ms->m[w].live;
}

void ps_members_seen(ps_members *ms, uint32_t w, uint64_t now) {
    if (w < ms->n) ms->m[w].last_seen_ns = now;
}

int ps_members_join(ps_members *ms, uint32_t w, uint64_t now, int conn) {
    ps_member *m = &ms->m[w];
    m->last_seen_ns = now;
    m->conn = conn;
    m->done = 0;
    if (m->live) return 0;
    m->live = 1;
    ms->live++;
    return 1;
}

int ps_members_leave(ps_members *ms, uint32_t w) {
    ps_member *m = &ms->m[w];
    m->done = 1;
    if (!m->live) return 0;
    m->live = 0;
    ms->live--;
    return 1;
}

int ps_members_remove(ps_members *ms, uint32_t w) {
    ps_member *m = &ms->m[w];
    if (!m->live) return 0;
    m->live = 0;
    ms->live--;
    ms->removed++;
    return 1;
}

static void forgive_stall(ps_members *ms, uint64_t now) {
    uint64_t gap = now - ms->checked_ns;
    ms->checked_ns = now;
    if (gap <= 2 * ms->tick_ns) return;
    uint64_t shift = gap - ms->tick_ns;
    ms->stalls++;
    for (uint32_t w = 0; w < ms->n; w++) {
        ps_member *m = &ms->m[w];
        m->last_seen_ns = m->last_seen_ns + shift < now ? m->last_seen_ns + shift : now;
    }
}

uint32_t ps_members_expire(ps_members *ms, uint64_t now, unsigned char *gone) {
    uint32_t removed = 0;
    memset(gone, 0, ms->n);
    forgive_stall(ms, now);
    for (uint32_t w = 0; w < ms->n; w++) {
        ps_member *m = &ms->m[w];
        if (m->live && now - m->last_seen_ns > ms->timeout_ns && ps_members_remove(ms, w)) {
            gone[w] = 1;
            removed++;
        }
    }
    return removed;
}

uint32_t ps_members_disconnect(ps_members *ms, int conn, unsigned char *gone) {
    uint32_t removed = 0;
    memset(gone, 0, ms->n);
    if (conn < 0) return 0;
    for (uint32_t w = 0; w < ms->n; w++) {
        ps_member *m = &ms->m[w];
        if (m->conn != conn) continue;
        m->conn = -1; /* the number may come back for another connection */
        if (ps_members_remove(ms, w)) {
            gone[w] = 1;
            removed++;
        }
    }
    return removed;
}

int ps_members_is_retry(const ps_members *ms, uint32_t w, int rows, uint64_t session,
                        uint64_t seq) {
    const ps_member *m = &ms->m[w];
    if (rows) return seq && session == m->rows_session && seq <= m->rows_last_seq;
    return seq && session == m->session && seq <= m->last_seq;
}

void ps_members_applied(ps_members *ms, uint32_t w, int rows, uint64_t session, uint64_t seq) {
    if (!seq) return;
    ps_member *m = &ms->m[w];
    *(rows ? &m->rows_session : &m->session) = session;
    *(rows ? &m->rows_last_seq : &m->last_seq) = seq;
}

uint64_t ps_members_note_clock(ps_members *ms, uint32_t w, uint64_t clock) {
    uint64_t newest = 0, staleness = 0;
    for (uint32_t i = 0; i < ms->n; i++)
        if (ms->m[i].clock > newest) newest = ms->m[i].clock;
    /* m[].clock counts pushes, so the newest pushed clock is newest - 1 */
    if (newest > 0 && newest - 1 > clock) staleness = newest - 1 - clock;
    if (clock + 1 > ms->m[w].clock) ms->m[w].clock = clock + 1;
    return staleness;
}

uint64_t ps_members_min_clock(const ps_members *ms) {
    uint64_t min = UINT64_MAX;
    for (uint32_t w = 0; w < ms->n; w++)
        if (ms->m[w].live && ms->m[w].clock < min) min = ms->m[w].clock;
    return min;
}
