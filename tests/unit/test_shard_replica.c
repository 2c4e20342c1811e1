/* A shard's log replayed by a second shard (ps-server/shard/shard.c: the log
 * callback and ps_shard_replay), with no sockets and simulated time: after a
 * seeded random run of pushes, row pushes, retries, goodbyes, hellos and a
 * removal by the clock, the follower holds the same bytes as the leader
 * (values, optimizer slots and update counts, table rows, version), sync and
 * async; a follower that diverged says so instead of applying. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"
#include "optim.h"
#include "rows.h"
#include "shard.h"
#include "testutil.h"

#define MS 1000000ull
#define WORKERS 3
#define DIM 4
#define MAX_EVENTS 4096

/* A deep copy of one log entry. */
typedef struct {
    ps_shard_event e;
    char *name;
    uint64_t shape[8];
    float *values;
    char **names;
    float **grads;
    uint64_t *ids;
    ps_table_cfg table;
} saved_event;

typedef struct {
    uint64_t now;
    ps_shard *self; /* the leader, to size the gradients it logs */
    saved_event *ev;
    size_t n;
} world;

static uint64_t sim_clock(void *ctx) {
    return ((world *)ctx)->now;
}
static void no_answer(void *ctx, ps_pending_pull *p) {
    (void)ctx, (void)p;
}
static void no_fail(void *ctx, ps_pending_pull *p, int code, const char *msg) {
    (void)ctx, (void)p, (void)code, (void)msg;
}

static float *dup_floats(const float *x, size_t n) {
    float *y = malloc((n ? n : 1) * sizeof *y);
    ck_assert_ptr_nonnull(y);
    if (n) memcpy(y, x, n * sizeof *y);
    return y;
}

static void keep(void *ctx, const ps_shard_event *e) {
    world *w = ctx;
    ck_assert_uint_lt(w->n, MAX_EVENTS);
    saved_event *s = &w->ev[w->n++];
    memset(s, 0, sizeof *s);
    s->e = *e;
    if (e->name) s->e.name = s->name = strdup(e->name);
    if (e->kind == PS_EV_CREATE_VAR) {
        size_t numel = 1;
        for (size_t d = 0; d < e->rank; d++)
            numel *= (size_t)(s->shape[d] = e->shape[d]);
        s->e.shape = s->shape;
        s->e.values = s->values = dup_floats(e->values, numel);
    } else if (e->kind == PS_EV_CREATE_TABLE) {
        s->table = *e->table;
        s->e.table = &s->table;
    } else if (e->kind == PS_EV_PUSH) {
        s->names = calloc(e->n, sizeof *s->names);
        s->grads = calloc(e->n, sizeof *s->grads);
        for (size_t i = 0; i < e->n; i++) {
            s->names[i] = strdup(e->names[i]);
            s->grads[i] = dup_floats(e->grads[i], ps_store_find(&w->self->store, e->names[i])->numel);
        }
        s->e.names = (const char *const *)s->names;
        s->e.grads = (const float *const *)s->grads;
    } else if (e->kind == PS_EV_PUSH_ROWS) {
        s->ids = malloc((e->n ? e->n : 1) * sizeof *s->ids);
        memcpy(s->ids, e->ids, e->n * sizeof *s->ids);
        s->e.ids = s->ids;
        s->e.values = s->values = dup_floats(e->values, e->n * DIM);
    }
}

static void forget(world *w) {
    for (size_t k = 0; k < w->n; k++) {
        saved_event *s = &w->ev[k];
        for (size_t i = 0; s->names && i < s->e.n; i++)
            free(s->names[i]), free(s->grads[i]);
        free(s->name), free(s->values), free(s->names), free(s->grads), free(s->ids);
    }
    free(w->ev);
}

static void open_shard(ps_shard *sh, world *w, int async, int logged) {
    ps_shard_config cfg = {
        .async = async,
        .workers = WORKERS,
        .staleness = -1,
        .worker_timeout_ns = 100 * MS,
        .tick_ns = 25 * MS,
        .pending = {100, 10, 1 << 20, 1000 * MS},
        .max_table_bytes = 1 << 20,
    };
    ps_shard_out out = {w, no_answer, no_fail, logged ? keep : NULL};
    ck_assert_int_eq(ps_shard_init(sh, &cfg, sim_clock, w, &out), PS_OK);
}

static double uniform(uint64_t *rng) {
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*rng >> 11) / 9007199254740992.0;
}

/* The leader's run: two variables (Adam, momentum), a dynamic table (Adagrad, an
 * LRU cap), then seeded steps in which each live worker pushes with probability
 * 0.9 (sometimes twice: a retry), rows too, and the membership changes. */
static void run_leader(ps_shard *sh, world *w, uint64_t seed) {
    uint64_t rng = seed;
    char err[200];
    uint64_t s1[2] = {3, 5}, s2[1] = {7};
    float i1[15], i2[7];
    for (int i = 0; i < 15; i++)
        i1[i] = (float)uniform(&rng) - 0.5f;
    for (int i = 0; i < 7; i++)
        i2[i] = (float)uniform(&rng);
    ps_opt_spec adam = ps_opt_spec_default(PS_OPT_ADAM), mom = ps_opt_spec_default(PS_OPT_MOMENTUM);
    ps_var *v[2];
    ps_shard_claim_job(sh, "job-1");
    ck_assert_int_eq(ps_shard_create_var(sh, "a", 2, s1, i1, &adam, &v[0]), PS_OK);
    ck_assert_int_eq(ps_shard_create_var(sh, "b", 1, s2, i2, &mom, &v[1]), PS_OK);
    ps_table_cfg tc = {.dim = DIM,
                       .opt = ps_row_opt_default(PS_ROW_ADAGRAD, 0.1f),
                       .seed = 9,
                       .key = ps_rows_table_key("emb"),
                       .init_lo = -0.1f,
                       .init_hi = 0.1f,
                       .max_rows = 20};
    struct ps_table_entry *t;
    ck_assert_int_eq(ps_shard_create_table(sh, "emb", 0, &tc, &t), PS_OK);
    for (uint32_t k = 0; k < WORKERS; k++)
        ps_shard_hello(sh, k, -1);
    uint64_t seq = 0;
    unsigned char gone[WORKERS];
    for (int step = 0; step < 60; step++) {
        for (uint32_t k = 0; k < WORKERS; k++) {
            if (!ps_members_live(&sh->members, k) || uniform(&rng) > 0.9) continue;
            if (k == 2 && step >= 20 && step < 40) continue; /* silent: the clock removes it */
            float g1[15], g2[7], rows[8 * DIM];
            uint64_t ids[8];
            for (int i = 0; i < 15; i++)
                g1[i] = (float)uniform(&rng) - 0.5f;
            for (int i = 0; i < 7; i++)
                g2[i] = (float)uniform(&rng) - 0.5f;
            for (int i = 0; i < 8; i++)
                ids[i] = (uint64_t)(uniform(&rng) * 40); /* more ids than the cap */
            for (int i = 0; i < 8 * DIM; i++)
                rows[i] = (float)uniform(&rng) - 0.5f;
            const float *g[2] = {g1, g2};
            int dropped;
            uint64_t rows_dropped;
            ck_assert_int_eq(ps_shard_push_rows(sh, t, k, sh->step.version, 2000 + k, seq + 1, ids,
                                                8, rows, &dropped, &rows_dropped, err, sizeof err),
                             PS_OK);
            if (!sh->cfg.async && uniform(&rng) < 0.3) { /* rows only: they end its step */
                if (!dropped) ps_shard_end_step(sh, k);
                continue;
            }
            ps_shard_push_plan pl;
            uint64_t at = sh->step.version;
            seq++;
            int tries = uniform(&rng) < 0.1 ? 2 : 1; /* a re-send of the same push */
            for (int r = 0; r < tries; r++) {
                ck_assert_int_eq(
                    ps_shard_push_admit(sh, k, at, 1000 + k, seq, &pl, err, sizeof err), PS_OK);
                ps_shard_push_commit(sh, k, (uint64_t)step, 0, v, g, 2, &pl);
            }
        }
        double u = uniform(&rng);
        w->now += 25 * MS;
        for (uint32_t k = 0; k < WORKERS; k++)
            if (k != 2 || step < 20 || step >= 40) ps_shard_seen(sh, k);
        if (u < 0.05) ps_shard_goodbye(sh, (uint32_t)(uniform(&rng) * 2)); /* not worker 2 */
        if (u > 0.9)
            for (uint32_t k = 0; k < WORKERS; k++)
                if (!ps_members_live(&sh->members, k)) ps_shard_hello(sh, k, -1);
        ps_shard_tick(sh, gone); /* worker 2 stays silent: removed by the clock */
    }
}

static void expect_same_bytes(const ps_shard *a, const ps_shard *b) {
    ck_assert_uint_eq(a->step.version, b->step.version);
    ck_assert_uint_eq(a->store.n, b->store.n);
    for (size_t i = 0; i < a->store.n; i++) {
        const ps_var *x = a->store.vars[i], *y = ps_store_find(&b->store, x->name);
        ck_assert_ptr_nonnull(y);
        ck_assert_uint_eq(x->updates, y->updates);
        ck_assert_int_eq(memcmp(x->w, y->w, x->numel * sizeof(float)), 0);
        for (int k = 0; k < ps_optim_num_slots(x->opt.kind); k++)
            ck_assert_int_eq(memcmp(x->slots[k], y->slots[k], x->numel * sizeof(float)), 0);
    }
    const struct ps_table_entry *ta = ps_tables_find(&a->tables, "emb");
    const struct ps_table_entry *tb = ps_tables_find(&b->tables, "emb");
    ck_assert_ptr_nonnull(tb);
    uint64_t ids[40];
    float ra[40 * DIM], rb[40 * DIM];
    for (int i = 0; i < 40; i++)
        ids[i] = (uint64_t)i;
    ps_table_pull(ta->t, ids, 40, ra);
    ps_table_pull(tb->t, ids, 40, rb);
    ck_assert_int_eq(memcmp(ra, rb, sizeof ra), 0);
    ps_table_counts ca, cb;
    ps_table_stats_get(ta->t, &ca);
    ps_table_stats_get(tb->t, &cb);
    ck_assert_uint_eq(ca.rows, cb.rows);
    ck_assert_uint_eq(ca.evicted, cb.evicted);
    ck_assert_uint_eq(a->members.live, b->members.live);
    ck_assert_str_eq(a->job_id, b->job_id);
}

static void follow(int async, uint64_t seed) {
    world wl = {.now = 1000 * MS}, wf = {.now = 5 * MS};
    wl.ev = calloc(MAX_EVENTS, sizeof *wl.ev);
    ps_shard leader, follower;
    open_shard(&leader, &wl, async, 1);
    wl.self = &leader;
    open_shard(&follower, &wf, async, 0);
    run_leader(&leader, &wl, seed);
    ck_assert_uint_gt(leader.step.version, 20); /* the run did something */
    ck_assert_uint_gt(leader.stats.retried_pushes, 0);
    ck_assert_uint_gt(leader.members.removed, 0);
    char err[200];
    for (size_t k = 0; k < wl.n; k++)
        ck_assert_msg(ps_shard_replay(&follower, &wl.ev[k].e, err, sizeof err) == PS_OK,
                      "entry %zu: %s", k, err);
    expect_same_bytes(&leader, &follower);
    ps_shard_free(&leader);
    ps_shard_free(&follower);
    forget(&wl);
}

START_TEST(a_follower_of_a_sync_shard_holds_the_same_bytes) {
    for (uint64_t seed = 1; seed <= 4; seed++)
        follow(0, seed);
}
END_TEST

START_TEST(a_follower_of_an_async_shard_holds_the_same_bytes) {
    for (uint64_t seed = 1; seed <= 4; seed++)
        follow(1, seed);
}
END_TEST

START_TEST(a_follower_that_diverged_refuses) {
    world wl = {.now = 1000 * MS}, wf = {.now = 0};
    wl.ev = calloc(MAX_EVENTS, sizeof *wl.ev);
    ps_shard leader, follower;
    open_shard(&leader, &wl, 0, 1);
    wl.self = &leader;
    open_shard(&follower, &wf, 0, 0);
    run_leader(&leader, &wl, 7);
    char err[200];
    /* an entry lost on the way: a later one no longer fits */
    int refused = 0;
    for (size_t k = 0; k < wl.n && !refused; k++) {
        if (k == 12) continue;
        refused = ps_shard_replay(&follower, &wl.ev[k].e, err, sizeof err) != PS_OK;
    }
    ck_assert_msg(refused, "a follower that missed an entry applied the rest");
    ck_assert_ptr_nonnull(strstr(err, "cannot follow"));
    ps_shard_free(&leader);
    ps_shard_free(&follower);
    forget(&wl);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("shard_replica");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, a_follower_of_a_sync_shard_holds_the_same_bytes);
    tcase_add_test(tc, a_follower_of_an_async_shard_holds_the_same_bytes);
    tcase_add_test(tc, a_follower_that_diverged_refuses);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(make_suite());
}
