/* The shard state machine (ps-server/shard/shard.c) with no sockets and
 * simulated time: a sync step closes on the last push and releases the pulls
 * waiting for it, with the mean applied; a retried push is applied once; a
 * silent worker is removed by the clock, which closes the step without it and
 * answers its own waiting pull EREJOIN; a pull past its deadline fails; the
 * async staleness gate holds the fast worker until the slow one pushes; a pull
 * beyond the open step is ESTALE; a stop answers every waiting pull. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ps_error.h"
#include "shard.h"
#include "testutil.h"

#define MS 1000000ull

/* The simulated clock and what the shard answered through its callbacks. */
typedef struct {
    uint64_t now;
    uint64_t answered[16];
    uint64_t failed[16];
    int fail_code[16];
    int n_answered, n_failed;
} world;

static uint64_t sim_clock(void *ctx) {
    return ((world *)ctx)->now;
}

static void on_answer(void *ctx, ps_pending_pull *p) {
    world *w = ctx;
    w->answered[w->n_answered++] = p->request_id;
}

static void on_fail(void *ctx, ps_pending_pull *p, int code, const char *msg) {
    world *w = ctx;
    (void)msg;
    w->failed[w->n_failed] = p->request_id;
    w->fail_code[w->n_failed++] = code;
}

/* A shard of `workers` workers (timeout 100 ms, tick 25 ms, pulls wait 1 s at
 * most) holding one SGD variable "w" of 4 floats, all 1. */
static uint32_t setup_workers_min; /* 0, or the next setup's --workers-min */

static ps_var *setup(ps_shard *sh, world *wd, int async, uint32_t workers, long staleness) {
    memset(wd, 0, sizeof *wd);
    wd->now = 1000 * MS;
    ps_shard_config cfg = {
        .async = async,
        .workers = workers,
        .staleness = staleness,
        .workers_min = setup_workers_min,
        .worker_timeout_ns = 100 * MS,
        .tick_ns = 25 * MS,
        .pending = {100, 10, 1 << 20, 1000 * MS},
        .max_table_bytes = 1 << 20,
    };
    ps_shard_out out = {wd, on_answer, on_fail};
    ck_assert_int_eq(ps_shard_init(sh, &cfg, sim_clock, wd, &out), PS_OK);
    uint64_t shape[1] = {4};
    float init[4] = {1, 1, 1, 1};
    ps_opt_spec sgd = ps_opt_spec_default(PS_OPT_SGD);
    sgd.lr = 0.5f;
    ps_var *v;
    ck_assert_int_eq(ps_store_create(&sh->store, "w", 1, shape, init, &sgd, &v), PS_OK);
    return v;
}

/* Worker w pushes g (4 floats) for `step` at `clock`; returns the admit code. */
static int push(ps_shard *sh, ps_var *v, uint32_t w, uint64_t step, uint64_t clock,
                const float *g, ps_shard_push_plan *pl) {
    char err[200];
    int rc = ps_shard_push_admit(sh, w, step, 0, 0, pl, err, sizeof err);
    if (rc == PS_OK) ps_shard_push_commit(sh, w, clock, 0, &v, &g, 1, pl);
    return rc;
}

/* A pull of "w" from worker w (connection fd = 10 + w) for min_version. */
static int pull(ps_shard *sh, ps_var *v, uint32_t w, uint64_t request_id, uint64_t min_version,
                uint64_t clock) {
    char err[200], id[8];
    snprintf(id, sizeof id, "peer%u", w);
    ps_shard_pull_req p = {.request_id = request_id,
                           .min_version = min_version,
                           .clock = clock,
                           .has_worker = 1,
                           .worker = w};
    return ps_shard_pull(sh, id, strlen(id), 10 + (int)w, &p, &v, 1, err, sizeof err);
}

START_TEST(a_sync_step_closes_on_the_last_push_and_releases_its_pulls) {
    ps_shard sh;
    world wd;
    ps_var *v = setup(&sh, &wd, 0, 2, -1);
    ps_shard_push_plan pl;
    const float g0[4] = {1, 2, 3, 4}, g1[4] = {3, 2, 1, 0};
    ck_assert_int_eq(push(&sh, v, 0, 0, 0, g0, &pl), PS_OK);
    ck_assert(!pl.applied && !pl.dropped);
    ck_assert_int_eq(pull(&sh, v, 0, 7, 1, 0), 0); /* deferred: step 0 is open */
    ck_assert_int_eq(pull(&sh, v, 0, 8, 0, 0), 1); /* version 0 exists: now */
    ck_assert_int_eq(wd.n_answered, 0);
    ck_assert_int_eq(push(&sh, v, 1, 0, 0, g1, &pl), PS_OK);
    ck_assert(pl.applied);
    ck_assert_uint_eq(sh.step.version, 1);
    ck_assert_int_eq(wd.n_answered, 1);
    ck_assert_uint_eq(wd.answered[0], 7);
    for (int i = 0; i < 4; i++) /* w - lr * mean(g0, g1) = 1 - 0.5 * 2 */
        ck_assert_float_eq(v->w[i], 0.0f);
    ck_assert_uint_eq(sh.stats.updates_applied, 1);
    ck_assert_uint_eq(sh.stats.pushes_applied, 2);
    ps_shard_free(&sh);
}
END_TEST

START_TEST(a_retried_push_is_applied_once) {
    ps_shard sh;
    world wd;
    ps_var *v = setup(&sh, &wd, 0, 2, -1);
    ps_shard_push_plan pl;
    const float g[4] = {2, 2, 2, 2};
    ck_assert_int_eq(push(&sh, v, 0, 0, 0, g, &pl), PS_OK);
    ck_assert_int_eq(push(&sh, v, 0, 0, 0, g, &pl), PS_OK); /* the retry */
    ck_assert(pl.dropped);
    ck_assert_uint_eq(sh.stats.dropped_pushes, 1);
    ck_assert_uint_eq(sh.step.version, 0); /* one push of two: still open */
    ck_assert_int_eq(push(&sh, v, 1, 0, 0, g, &pl), PS_OK);
    ck_assert_uint_eq(sh.step.version, 1);
    ck_assert_float_eq(v->w[0], 0.0f); /* the mean of two, not three */
    /* a push for the closed step: dropped too; one for a step ahead: ESTALE */
    ck_assert_int_eq(push(&sh, v, 1, 0, 0, g, &pl), PS_OK);
    ck_assert(pl.dropped);
    ck_assert_int_eq(push(&sh, v, 1, 5, 0, g, &pl), PS_ESTALE);
    ps_shard_free(&sh);
}
END_TEST

START_TEST(the_clock_removes_a_silent_worker_and_the_step_closes_without_it) {
    ps_shard sh;
    world wd;
    ps_var *v = setup(&sh, &wd, 0, 2, -1);
    ps_shard_push_plan pl;
    unsigned char gone[2];
    const float g[4] = {2, 2, 2, 2};
    ck_assert_int_eq(pull(&sh, v, 1, 9, 1, 0), 0); /* worker 1 waits, then goes silent */
    ck_assert_int_eq(push(&sh, v, 0, 0, 0, g, &pl), PS_OK);
    ck_assert_int_eq(pull(&sh, v, 0, 7, 1, 0), 0);
    for (int i = 0; i < 4; i++) { /* worker 0 keeps talking; 100 ms is not more than */
        wd.now += 25 * MS;
        ps_shard_seen(&sh, 0);
        ck_assert_uint_eq(ps_shard_tick(&sh, gone), 0);
    }
    ck_assert_uint_eq(sh.step.version, 0);
    wd.now += 25 * MS;
    ps_shard_seen(&sh, 0);
    ck_assert_uint_eq(ps_shard_tick(&sh, gone), 1);
    ck_assert(gone[1]);
    /* the step closed with worker 0's push alone, and both pulls were answered:
     * worker 0's with the values, worker 1's (it waited for the same version) too */
    ck_assert_uint_eq(sh.step.version, 1);
    ck_assert_float_eq(v->w[0], 0.0f);
    ck_assert_int_eq(wd.n_answered, 2);
    ck_assert_int_eq(wd.n_failed, 0);
    /* a push from the removed worker: EREJOIN until it says Hello */
    ck_assert_int_eq(push(&sh, v, 1, 1, 0, g, &pl), PS_EREJOIN);
    ck_assert_int_eq(ps_shard_hello(&sh, 1, -1), 1);
    ck_assert_int_eq(push(&sh, v, 1, 1, 0, g, &pl), PS_OK);
    ps_shard_free(&sh);
}
END_TEST

START_TEST(a_removed_workers_waiting_pull_is_answered_rejoin) {
    ps_shard sh;
    world wd;
    ps_var *v = setup(&sh, &wd, 0, 3, -1);
    ps_shard_push_plan pl;
    unsigned char gone[3];
    const float g[4] = {2, 2, 2, 2};
    /* workers 0 and 1 pushed, worker 2 waits for step 1 and goes silent: the step
     * closes without it, so its pull is answered; a pull for step 2 stays */
    ck_assert_int_eq(push(&sh, v, 0, 0, 0, g, &pl), PS_OK);
    ck_assert_int_eq(push(&sh, v, 1, 0, 0, g, &pl), PS_OK);
    ck_assert_int_eq(pull(&sh, v, 2, 5, 1, 0), 0);
    wd.now += 101 * MS;
    ps_shard_seen(&sh, 0);
    ps_shard_seen(&sh, 1);
    ck_assert_uint_eq(ps_shard_tick(&sh, gone), 0); /* a stall: forgiven */
    for (int i = 0; i < 4; i++) {
        wd.now += 25 * MS;
        ps_shard_seen(&sh, 0);
        ps_shard_seen(&sh, 1);
        ps_shard_tick(&sh, gone);
    }
    ck_assert_uint_eq(sh.members.live, 2);
    ck_assert_uint_eq(sh.step.version, 1);
    ck_assert_int_eq(wd.n_answered, 1);
    /* now one that waits for a step that cannot close while its worker is gone */
    ck_assert_int_eq(ps_shard_hello(&sh, 2, -1), 1);
    ck_assert_int_eq(pull(&sh, v, 2, 6, 2, 1), 0);
    for (int i = 0; i < 6; i++) {
        wd.now += 25 * MS;
        ps_shard_seen(&sh, 0);
        ps_shard_tick(&sh, gone);
    }
    ck_assert_int_eq(wd.n_failed, 1);
    ck_assert_uint_eq(wd.failed[0], 6);
    ck_assert_int_eq(wd.fail_code[0], PS_EREJOIN);
    ps_shard_free(&sh);
}
END_TEST

START_TEST(a_killed_worker_is_removed_when_its_connection_closes) {
    ps_shard sh;
    world wd;
    ps_var *v = setup(&sh, &wd, 0, 3, -1);
    ps_shard_push_plan pl;
    unsigned char gone[3];
    size_t pulls;
    const float g[4] = {2, 2, 2, 2};
    for (uint32_t w = 0; w < 3; w++)
        ps_shard_hello(&sh, w, 10 + (int)w); /* pull() uses connection 10 + w */
    ck_assert_int_eq(push(&sh, v, 0, 0, 0, g, &pl), PS_OK);
    ck_assert_int_eq(push(&sh, v, 1, 0, 0, g, &pl), PS_OK);
    ck_assert_int_eq(pull(&sh, v, 0, 4, 1, 0), 0);
    ck_assert_int_eq(pull(&sh, v, 2, 5, 1, 0), 0);
    /* worker 2 is killed: the kernel closes its connection, no time passes */
    ck_assert_uint_eq(ps_shard_disconnected(&sh, 12, gone, &pulls), 1);
    ck_assert(gone[2]);
    ck_assert_uint_eq(pulls, 1); /* its own pull: dropped, nobody to answer */
    ck_assert_uint_eq(sh.step.version, 1); /* the step closed with the two others */
    ck_assert_int_eq(wd.n_answered, 1);
    ck_assert_uint_eq(wd.answered[0], 4);
    ck_assert_uint_eq(sh.members.removed, 1);
    ps_shard_free(&sh);
}
END_TEST

START_TEST(a_retried_async_push_is_applied_once) {
    ps_shard sh;
    world wd;
    ps_var *v = setup(&sh, &wd, 1, 1, -1);
    ps_shard_push_plan pl;
    char err[200];
    const float g[4] = {1, 1, 1, 1};
    const float *gp = g;
    uint64_t seqs[] = {1, 1, 2, 2, 3};
    for (int k = 0; k < 5; k++) {
        ck_assert_int_eq(ps_shard_push_admit(&sh, 0, 0, 77, seqs[k], &pl, err, sizeof err), PS_OK);
        ck_assert_int_eq(pl.retry, (k == 1 || k == 3));
        ps_shard_push_commit(&sh, 0, (uint64_t)k, 0, &v, &gp, 1, &pl);
    }
    ck_assert_uint_eq(sh.step.version, 3);
    ck_assert_uint_eq(sh.stats.retried_pushes, 2);
    ck_assert_float_eq(v->w[0], 1.0f - 3 * 0.5f);
    /* a push that failed its checks after admission was not applied: its re-send is */
    ck_assert_int_eq(ps_shard_push_admit(&sh, 0, 0, 77, 4, &pl, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_shard_push_admit(&sh, 0, 0, 77, 4, &pl, err, sizeof err), PS_OK);
    ck_assert(!pl.retry);
    ps_shard_free(&sh);
}
END_TEST

START_TEST(an_elastic_job_waits_for_its_minimum_and_takes_a_late_joiner) {
    ps_shard sh;
    world wd;
    setup_workers_min = 2;
    ps_var *v = setup(&sh, &wd, 0, 3, -1); /* 3 slots, at least 2 live */
    setup_workers_min = 0;
    ps_shard_push_plan pl;
    unsigned char gone[3];
    size_t pulls;
    const float g[4] = {2, 2, 2, 2};
    ck_assert_uint_eq(sh.members.live, 0); /* nobody until their Hello */
    ck_assert(ps_shard_below_min(&sh));
    ps_shard_hello(&sh, 0, 10);
    ck_assert_int_eq(push(&sh, v, 0, 0, 0, g, &pl), PS_OK);
    ck_assert_uint_eq(sh.step.version, 0); /* one live of at least two: it waits */
    ck_assert_int_eq(push(&sh, v, 2, 0, 0, g, &pl), PS_EREJOIN); /* slot 2 has not joined */
    ps_shard_hello(&sh, 1, 11);
    ck_assert(!ps_shard_below_min(&sh));
    ck_assert_uint_eq(sh.step.version, 0);
    ck_assert_int_eq(push(&sh, v, 1, 0, 0, g, &pl), PS_OK);
    ck_assert_uint_eq(sh.step.version, 1); /* two of two live */
    /* a third worker joins the running job: from the next step on, steps need it */
    ps_shard_hello(&sh, 2, 12);
    ck_assert_int_eq(push(&sh, v, 0, 1, 0, g, &pl), PS_OK);
    ck_assert_int_eq(push(&sh, v, 1, 1, 0, g, &pl), PS_OK);
    ck_assert_uint_eq(sh.step.version, 1);
    ck_assert_int_eq(push(&sh, v, 2, 1, 0, g, &pl), PS_OK);
    ck_assert_uint_eq(sh.step.version, 2);
    /* two leave: below the minimum, the step waits for a worker to come back */
    ck_assert_uint_eq(ps_shard_disconnected(&sh, 12, gone, &pulls), 1);
    ck_assert_int_eq(ps_shard_goodbye(&sh, 1), 1);
    ck_assert(ps_shard_below_min(&sh));
    ck_assert_int_eq(push(&sh, v, 0, 2, 0, g, &pl), PS_OK);
    ck_assert_uint_eq(sh.step.version, 2);
    ps_shard_hello(&sh, 1, 13);
    ck_assert_uint_eq(sh.step.version, 2); /* worker 1 has not pushed for it yet */
    ck_assert_int_eq(push(&sh, v, 1, 2, 0, g, &pl), PS_OK);
    ck_assert_uint_eq(sh.step.version, 3);
    ps_shard_free(&sh);
}
END_TEST

START_TEST(a_pull_past_its_deadline_fails) {
    ps_shard sh;
    world wd;
    ps_var *v = setup(&sh, &wd, 0, 2, -1);
    unsigned char gone[2];
    ck_assert_int_eq(pull(&sh, v, 0, 3, 1, 0), 0);
    for (int i = 0; i < 40; i++) { /* 1 s in ticks, both workers alive */
        wd.now += 25 * MS;
        ps_shard_seen(&sh, 0);
        ps_shard_seen(&sh, 1);
        ps_shard_tick(&sh, gone);
    }
    ck_assert_int_eq(wd.n_failed, 1);
    ck_assert_int_eq(wd.fail_code[0], PS_ETIMEDOUT);
    ck_assert_uint_eq(sh.pending.n, 0);
    ps_shard_free(&sh);
}
END_TEST

START_TEST(the_staleness_gate_holds_the_fast_worker) {
    ps_shard sh;
    world wd;
    ps_var *v = setup(&sh, &wd, 1, 2, 1);
    ps_shard_push_plan pl;
    const float g[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    ck_assert_int_eq(push(&sh, v, 0, 0, 0, g, &pl), PS_OK);
    ck_assert_int_eq(push(&sh, v, 0, 0, 1, g, &pl), PS_OK);
    ck_assert_uint_eq(sh.step.version, 2); /* async: each push is a version */
    /* worker 0 at clock 2, worker 1 at 0: more than 1 ahead, it waits */
    ck_assert_int_eq(pull(&sh, v, 0, 4, 0, 2), 0);
    ck_assert_uint_eq(sh.stats.staleness_waits, 1);
    ck_assert_int_eq(pull(&sh, v, 1, 5, 0, 0), 1); /* the slow one is never held */
    ck_assert_int_eq(push(&sh, v, 1, 0, 0, g, &pl), PS_OK);
    ck_assert_int_eq(wd.n_answered, 1);
    ck_assert_uint_eq(wd.answered[0], 4);
    ck_assert_uint_eq(sh.stats.max_staleness, 1);
    ck_assert_float_eq(v->w[0], 0.25f); /* three SGD steps of 0.25 */
    ps_shard_free(&sh);
}
END_TEST

START_TEST(a_pull_beyond_the_open_step_is_estale_and_a_stop_answers_all) {
    ps_shard sh;
    world wd;
    ps_var *v = setup(&sh, &wd, 0, 2, -1);
    ck_assert_int_eq(pull(&sh, v, 0, 1, 2, 0), PS_ESTALE);
    ck_assert_int_eq(pull(&sh, v, 0, 2, 1, 0), 0);
    ck_assert_int_eq(pull(&sh, v, 1, 3, 1, 0), 0);
    ps_shard_stop(&sh);
    ck_assert_int_eq(wd.n_failed, 2);
    ck_assert_int_eq(wd.fail_code[0], PS_ESHUTDOWN);
    ck_assert_int_eq(wd.fail_code[1], PS_ESHUTDOWN);
    ck_assert_uint_eq(sh.pending.n, 0);
    ps_shard_free(&sh);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("shard");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, a_sync_step_closes_on_the_last_push_and_releases_its_pulls);
    tcase_add_test(tc, a_retried_push_is_applied_once);
    tcase_add_test(tc, the_clock_removes_a_silent_worker_and_the_step_closes_without_it);
    tcase_add_test(tc, a_removed_workers_waiting_pull_is_answered_rejoin);
    tcase_add_test(tc, a_killed_worker_is_removed_when_its_connection_closes);
    tcase_add_test(tc, a_retried_async_push_is_applied_once);
    tcase_add_test(tc, an_elastic_job_waits_for_its_minimum_and_takes_a_late_joiner);
    tcase_add_test(tc, a_pull_past_its_deadline_fails);
    tcase_add_test(tc, the_staleness_gate_holds_the_fast_worker);
    tcase_add_test(tc, a_pull_beyond_the_open_step_is_estale_and_a_stop_answers_all);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(make_suite());
}
