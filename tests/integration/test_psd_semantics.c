/* psd's sync and async semantics with two workers on 127.0.0.1 (deferred pulls, each
 * async push applied), and the Shutdown request. */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "ps_error.h"
#include "psd_requests_common.h"
#include "stats.h"
#include "testutil.h"

/* ---- sync semantics: two workers ---- */

START_TEST(sync_two_workers) {
    good_client c0, c1;
    good_open(&c0, 0, 2, 1);
    good_open(&c1, 1, 2, 0);
    float g0w[NW], g1w[NW], g0b[NB], g1b[NB], want_w[NW], want_b[NB];
    for (int i = 0; i < NW; i++) {
        g0w[i] = (float)i - 2.0f;
        g1w[i] = 3.0f * (float)i + 0.5f;
        want_w[i] = sgd(W0[i], (0.0f + g0w[i] + g1w[i]) * 0.5f);
    }
    for (int i = 0; i < NB; i++) {
        g0b[i] = 1.0f;
        g1b[i] = -2.0f * (float)i;
        want_b[i] = sgd(B0[i], (0.0f + g0b[i] + g1b[i]) * 0.5f);
    }
    memcpy(c0.dw, g0w, sizeof g0w);
    memcpy(c0.db, g0b, sizeof g0b);
    memcpy(c1.dw, g1w, sizeof g1w);
    memcpy(c1.db, g1b, sizeof g1b);

    /* step 0: worker 0 pushes; the step stays open */
    int applied = -1;
    ck_assert_int_eq(ps_client_push(c0.c, 0, &applied), PS_OK);
    ck_assert_int_eq(applied, 0);
    ck_assert_uint_eq(expect_values(&c1, W0, B0), 0);
    /* a second push from the same worker for the same step (a retry) is
     * dropped: answered, counted, not applied */
    applied = -1;
    ck_assert_int_eq(ps_client_push(c0.c, 0, &applied), PS_OK);
    ck_assert_int_eq(applied, 0);

    /* a pull for version 1 waits for worker 1 */
    ps_client_set_timeout(c0.c, 300);
    long long t0 = ps_test_now_ms();
    ck_assert_int_eq(ps_client_pull(c0.c, 1, NULL), PS_ETIMEDOUT);
    ck_assert_int_ge(ps_test_now_ms() - t0, 250);
    ps_stats hold;
    ps_stats *st = ps_test_stats(c1.c, &hold);
    ck_assert_uint_eq(st->pending_pulls, 1);
    ck_assert_uint_eq(st->version, 0);
    ck_assert_uint_eq(st->pushes_applied, 1);
    ck_assert_uint_eq(st->updates_applied, 0);
    ps_stats_free(&hold);

    /* worker 1 pushes: the step completes with the mean of both gradients */
    ck_assert_int_eq(ps_client_push(c1.c, 0, &applied), PS_OK);
    ck_assert_int_eq(applied, 1);
    ps_client_set_timeout(c0.c, REPLY_MS);
    t0 = ps_test_now_ms();
    uint64_t version = 0;
    ck_assert_msg(ps_client_pull(c0.c, 1, &version) == PS_OK, "%s", ps_client_error(c0.c));
    ck_assert_int_lt(ps_test_now_ms() - t0, 2000);
    ck_assert_uint_eq(version, 1);
    for (int i = 0; i < NW; i++)
        ck_assert_float_eq(c0.w[i], want_w[i]);
    for (int i = 0; i < NB; i++)
        ck_assert_float_eq(c0.b[i], want_b[i]);
    ck_assert_uint_eq(expect_values(&c1, want_w, want_b), 1);

    /* a late push for step 0 (its step closed) is dropped and changes nothing */
    applied = -1;
    ck_assert_int_eq(ps_client_push(c0.c, 0, &applied), PS_OK);
    ck_assert_int_eq(applied, 0);
    ck_assert_uint_eq(expect_values(&c0, want_w, want_b), 1);

    st = ps_test_stats(c1.c, &hold);
    ck_assert_uint_eq(st->version, 1);
    ck_assert_uint_eq(st->stale_pushes, 2); /* the double push and the late one */
    ck_assert_uint_eq(st->dropped_pushes, 2);
    ck_assert_uint_eq(st->pushes_applied, 2);
    ck_assert_uint_eq(st->updates_applied, 1);
    ck_assert_uint_eq(st->pending_pulls, 0);
    ck_assert_uint_eq(st->errors, 0);
    /* hello x2, create, push, pull, double push, timed-out pull, stats, push, pull x2,
     * stale push, pull, this stats */
    ck_assert_uint_eq(st->requests, 14);
    ck_assert_uint_eq(st->num_workers, 2);
    ck_assert_int_eq(st->mode, PS_MODE_SYNC);
    ck_assert_uint_ge(st->bytes_in, 4 * (sizeof W0 + sizeof B0));  /* create + 3 pushes */
    ck_assert_uint_ge(st->bytes_out, 5 * (sizeof W0 + sizeof B0)); /* 5 pull replies */
    ps_stats_free(&hold);

    /* step 1 works the same way from the new values */
    float want2_w[NW], want2_b[NB];
    for (int i = 0; i < NW; i++)
        want2_w[i] = sgd(want_w[i], (0.0f + g0w[i] + g1w[i]) * 0.5f);
    for (int i = 0; i < NB; i++)
        want2_b[i] = sgd(want_b[i], (0.0f + g0b[i] + g1b[i]) * 0.5f);
    memcpy(c0.dw, g0w, sizeof g0w);
    memcpy(c0.db, g0b, sizeof g0b);
    ck_assert_int_eq(ps_client_push(c1.c, 1, &applied), PS_OK);
    ck_assert_int_eq(applied, 0);
    ck_assert_int_eq(ps_client_push(c0.c, 1, &applied), PS_OK);
    ck_assert_int_eq(applied, 1);
    ck_assert_uint_eq(expect_values(&c0, want2_w, want2_b), 2);
    good_close(&c0);
    good_close(&c1);
}
END_TEST

/* A deferred pull, seen on the wire: no reply until the step completes, then the new values. */
START_TEST(sync_deferred_pull_raw) {
    good_client c0, c1;
    good_open(&c0, 0, 2, 1);
    good_open(&c1, 1, 2, 0);
    for (int i = 0; i < NW; i++)
        c0.dw[i] = c1.dw[i] = 1.0f;
    for (int i = 0; i < NB; i++)
        c0.db[i] = c1.db[i] = 2.0f;
    raw_conn r;
    raw_open(&r, psd.endpoint);
    raw_pull(&r, 140, (char *[]){"b"}, 1, 1, NULL, NULL, 0);
    ck_assert_int_eq(ps_client_push(c0.c, 0, NULL), PS_OK);
    Ps__Header *h = raw_recv(&r, 300, NULL);
    ck_assert_msg(h == NULL, "the pull was answered before the step completed");
    ck_assert_int_eq(ps_client_push(c1.c, 0, NULL), PS_OK);
    ps_frames f;
    h = raw_recv(&r, REPLY_MS, &f);
    ck_assert_ptr_nonnull(h);
    ck_assert_int_eq(h->body_case, PS__HEADER__BODY_PULL_REPLY);
    ck_assert_uint_eq(h->request_id, 140);
    ck_assert_uint_eq(h->pull_reply->version, 1);
    ck_assert_uint_eq(h->pull_reply->n_tensors, 1);
    ck_assert_str_eq(h->pull_reply->tensors[0]->name, "b");
    ck_assert_uint_eq(f.n, 2);
    ck_assert_uint_eq(zmq_msg_size(&f.frames[1]), sizeof B0);
    float got[NB];
    memcpy(got, zmq_msg_data(&f.frames[1]), sizeof got);
    for (int i = 0; i < NB; i++)
        ck_assert_float_eq(got[i], sgd(B0[i], 2.0f));
    ps_frames_close(&f);
    ps__header__free_unpacked(h, NULL);
    raw_close(&r);
    good_close(&c0);
    good_close(&c1);
}
END_TEST

/* ---- async semantics ---- */

START_TEST(async_each_push_applies) {
    good_client c0, c1;
    good_open(&c0, 0, 2, 1);
    good_open(&c1, 1, 2, 0);
    float want_w[NW], want_b[NB];
    for (int i = 0; i < NW; i++) {
        c0.dw[i] = (float)i;
        c1.dw[i] = -0.5f;
        want_w[i] = sgd(W0[i], c0.dw[i]);
    }
    for (int i = 0; i < NB; i++) {
        c0.db[i] = 1.0f;
        c1.db[i] = (float)i * 4.0f;
        want_b[i] = sgd(B0[i], c0.db[i]);
    }

    int applied = 0;
    ck_assert_int_eq(ps_client_push(c0.c, 0, &applied), PS_OK);
    ck_assert_int_eq(applied, 1);
    ck_assert_uint_eq(expect_values(&c1, want_w, want_b), 1);

    /* worker 1 pushes for the same step: applied on arrival, on top */
    for (int i = 0; i < NW; i++)
        want_w[i] = sgd(want_w[i], c1.dw[i]);
    for (int i = 0; i < NB; i++)
        want_b[i] = sgd(want_b[i], c1.db[i]);
    ck_assert_int_eq(ps_client_push(c1.c, 0, &applied), PS_OK);
    ck_assert_int_eq(applied, 1);
    ck_assert_uint_eq(expect_values(&c0, want_w, want_b), 2);

    /* a pull for a future version waits for the pushes that reach it */
    ps_client_set_timeout(c0.c, 300);
    long long t0 = ps_test_now_ms();
    ck_assert_int_eq(ps_client_pull(c0.c, 3, NULL), PS_ETIMEDOUT);
    ck_assert_int_ge(ps_test_now_ms() - t0, 250);
    ps_client_set_timeout(c0.c, REPLY_MS);
    for (int i = 0; i < NW; i++)
        want_w[i] = sgd(want_w[i], c1.dw[i]);
    for (int i = 0; i < NB; i++)
        want_b[i] = sgd(want_b[i], c1.db[i]);
    ck_assert_int_eq(ps_client_push(c1.c, 7, &applied), PS_OK); /* async ignores the step */
    ck_assert_int_eq(applied, 1);
    t0 = ps_test_now_ms();
    uint64_t version = 0;
    ck_assert_msg(ps_client_pull(c0.c, 3, &version) == PS_OK, "%s", ps_client_error(c0.c));
    ck_assert_int_lt(ps_test_now_ms() - t0, 2000);
    ck_assert_uint_eq(version, 3);
    for (int i = 0; i < NW; i++)
        ck_assert_float_eq(c0.w[i], want_w[i]);
    for (int i = 0; i < NB; i++)
        ck_assert_float_eq(c0.b[i], want_b[i]);

    ps_stats hold;
    ps_stats *st = ps_test_stats(c0.c, &hold);
    ck_assert_int_eq(st->mode, PS_MODE_ASYNC);
    ck_assert_uint_eq(st->version, 3);
    ck_assert_uint_eq(st->pushes_applied, 3);
    ck_assert_uint_eq(st->updates_applied, 3);
    ck_assert_uint_eq(st->stale_pushes, 0);
    ck_assert_uint_eq(st->errors, 0);
    ck_assert_uint_eq(st->pending_pulls, 0);
    ps_stats_free(&hold);
    good_close(&c0);
    good_close(&c1);
}
END_TEST

/* A Push of "b" (all 1.0) from worker 0 with the identity (session, seq); returns
 * the reply (the caller frees it). */
static Ps__Header *push_b(raw_conn *r, uint64_t request_id, uint64_t session, uint64_t seq) {
    static const float g[NB] = {1, 1, 1, 1};
    Ps__TensorMeta m, *mp = &m;
    uint64_t shape_buf[1];
    size_t shape[1] = {NB};
    ps_tensor_meta_f32(&m, "b", shape, 1, shape_buf);
    push_req q;
    push_req_init(&q, request_id, &mp, 1, 0, 0);
    q.push.session = session;
    q.push.seq = seq;
    const void *pl[1] = {g};
    size_t len[1] = {sizeof g};
    raw_send_hdr(r, &q.h, pl, len, 1);
    Ps__Header *h = raw_recv(r, REPLY_MS, NULL);
    ck_assert_ptr_nonnull(h);
    ck_assert_int_eq(h->body_case, PS__HEADER__BODY_PUSH_REPLY);
    return h;
}

/* A push re-sent after its reply was lost (the same session and seq) is answered and
 * not applied again; the next seq is, and so is the first push of another session. */
START_TEST(async_retried_push_applies_once) {
    good_client c0;
    good_open(&c0, 0, 2, 1);
    raw_conn r;
    raw_open(&r, psd.endpoint);
    const uint64_t S = 0x5eed;
    uint64_t want[][3] = {/* seq, session, version after */
                          {5, S, 1}, {5, S, 1}, {4, S, 1}, {6, S, 2}, {1, S + 2, 3}, {0, S, 4}};
    int retry[] = {0, 1, 1, 0, 0, 0};
    for (int k = 0; k < 6; k++) {
        Ps__Header *h = push_b(&r, 300 + (uint64_t)k, want[k][1], want[k][0]);
        ck_assert_msg(h->push_reply->duplicate == retry[k], "push %d: duplicate %d", k,
                      h->push_reply->duplicate);
        ck_assert(h->push_reply->applied);
        ck_assert_uint_eq(h->push_reply->version, want[k][2]);
        ps__header__free_unpacked(h, NULL);
    }
    float want_b[NB];
    for (int i = 0; i < NB; i++)
        want_b[i] = sgd(sgd(sgd(sgd(B0[i], 1.0f), 1.0f), 1.0f), 1.0f);
    ck_assert_uint_eq(expect_values(&c0, W0, want_b), 4);
    raw_close(&r);
    good_close(&c0);
}
END_TEST

/* ---- elastic: --workers 3 --workers-min 2 ---- */

static void setup_elastic(void) {
    const char *args[] = {"--workers", "3", "--mode", "sync", "--workers-min", "2", NULL};
    start_psd_with(args);
}

static uint64_t version_now(void) {
    ps_stats h;
    uint64_t v = ps_test_shard_stats(psd.endpoint, &h)->version;
    ps_stats_free(&h);
    return v;
}

/* Two of three slots start the job; the third worker joins it running and the
 * next step waits for its push; psd logs the wait for the minimum and the join. */
START_TEST(elastic_job_starts_at_the_minimum_and_takes_a_joiner) {
    good_client c[3];
    good_open(&c[0], 0, 3, 1);
    int applied = -1;
    ck_assert_int_eq(ps_client_push(c[0].c, 0, &applied), PS_OK);
    ck_assert_int_eq(applied, 0); /* one live of at least two */
    good_open(&c[1], 1, 3, 0);
    ck_assert_int_eq(ps_client_push(c[1].c, 0, &applied), PS_OK);
    ck_assert_int_eq(applied, 1); /* two of two live: step 0 closed */
    ck_assert_uint_eq(version_now(), 1);
    good_open(&c[2], 2, 3, 0); /* joins the running job */
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(ps_client_push(c[k].c, 1, &applied), PS_OK);
        ck_assert_int_eq(applied, 0);
    }
    ck_assert_uint_eq(version_now(), 1); /* step 1 waits for the joiner */
    ck_assert_int_eq(ps_client_push(c[2].c, 1, &applied), PS_OK);
    ck_assert_int_eq(applied, 1);
    ck_assert_uint_eq(version_now(), 2);
    ck_assert(ps_test_file_has(psd.log, "fewer than --workers-min 2: steps wait"));
    ck_assert(ps_test_file_has(psd.log, "at least --workers-min 2: steps close again"));
    ck_assert(ps_test_file_has(psd.log, "worker 2 joined (3 live)"));
    for (int k = 0; k < 3; k++)
        good_close(&c[k]);
}
END_TEST

static int version_is(void *want) {
    return version_now() == *(uint64_t *)want;
}

/* Worker k's gradient at step t (one value for every element). */
static float grad_of(int k, int t) {
    return 0.25f * (float)(k + 1) - 0.125f * (float)(t % 5);
}

/* A worker joins and leaves in a loop (Goodbye, or its connection closing) for 60
 * steps while two stay: every step closes with the workers live at it, none waits
 * for the one that left, and the values are the mean of exactly their gradients,
 * bit for bit, as psd sums them (in arrival order, then times 1/n). */
START_TEST(elastic_worker_joins_and_leaves_in_a_loop) {
    good_client c[3];
    good_open(&c[0], 0, 3, 1);
    good_open(&c[1], 1, 3, 0);
    int in = 0; /* worker 2 is live */
    float want_w[NW], want_b[NB];
    memcpy(want_w, W0, sizeof want_w);
    memcpy(want_b, B0, sizeof want_b);
    for (int t = 0; t < 60; t++) {
        if (t == 10 || t == 30 || t == 50) {
            good_open(&c[2], 2, 3, 0);
            in = 1;
        } else if (t == 20 || t == 58) {
            ck_assert_int_eq(ps_client_goodbye(c[2].c), PS_OK);
            good_close(&c[2]);
            in = 0;
        } else if (t == 40) {
            good_close(&c[2]); /* no Goodbye: the shard sees the connection close */
            in = 0;
        }
        int n = 2 + in;
        float sum = 0.0f;
        for (int k = 0; k < n; k++) {
            float g = grad_of(k, t);
            for (int i = 0; i < NW; i++)
                c[k].dw[i] = g;
            for (int i = 0; i < NB; i++)
                c[k].db[i] = g;
            int applied = -1;
            ck_assert_msg(ps_client_push(c[k].c, (uint64_t)t, &applied) == PS_OK,
                          "step %d, worker %d: %s", t, k, ps_client_error(c[k].c));
            sum += g;
        }
        uint64_t want_v = (uint64_t)t + 1;
        ck_assert_msg(ps_test_wait_until(version_is, &want_v, 5000, 2),
                      "step %d did not close with %d workers (version %llu)", t, n,
                      (unsigned long long)version_now());
        float mean = n > 1 ? sum * (1.0f / (float)n) : sum;
        for (int i = 0; i < NW; i++)
            want_w[i] = sgd(want_w[i], mean);
        for (int i = 0; i < NB; i++)
            want_b[i] = sgd(want_b[i], mean);
    }
    ck_assert_uint_eq(expect_values(&c[0], want_w, want_b), 60);
    ps_stats h;
    ps_stats *st = ps_test_shard_stats(psd.endpoint, &h);
    ck_assert_uint_eq(st->workers_removed, 1); /* the close at step 40; Goodbyes are not */
    ps_stats_free(&h);
    ck_assert(ps_test_file_has(psd.log, "worker 2 removed: its connection closed"));
    for (int k = 0; k < 2; k++)
        good_close(&c[k]);
}
END_TEST

/* ---- shutdown ---- */

START_TEST(shutdown_request) {
    good_client c0;
    good_open(&c0, 0, 2, 1);
    /* a pull waiting for version 1 is told the shard is going away */
    raw_conn r;
    raw_open(&r, psd.endpoint);
    raw_pull(&r, 150, (char *[]){"w"}, 1, 1, NULL, NULL, 0);
    ck_assert_ptr_null(raw_recv(&r, 200, NULL));
    ck_assert_msg(ps_client_shutdown(c0.c, 0) == PS_OK, "%s", ps_client_error(c0.c));
    raw_expect_error(&r, 150, PS_ESHUTDOWN, REPLY_MS);
    raw_close(&r);
    good_close(&c0);
    int st = ps_test_wait(psd.pid, 5000);
    if (st != 0) ps_test_dump(psd.log);
    psd.pid = 0;
    ck_assert_int_eq(st, 0);
}
END_TEST

static Suite *requests_suite(void) {
    Suite *s = suite_create("psd_requests");
    TCase *sync = requests_tcase(s, "sync", setup_sync2);
    tcase_add_test(sync, sync_two_workers);
    tcase_add_test(sync, sync_deferred_pull_raw);
    tcase_add_test(sync, shutdown_request);
    TCase *async = requests_tcase(s, "async", setup_async2);
    tcase_add_test(async, async_each_push_applies);
    tcase_add_test(async, async_retried_push_applies_once);
    TCase *elastic = requests_tcase(s, "elastic", setup_elastic);
    tcase_add_test(elastic, elastic_job_starts_at_the_minimum_and_takes_a_joiner);
    tcase_add_test(elastic, elastic_worker_joins_and_leaves_in_a_loop);
    return s;
}

int main(void) {
    return ps_test_main_needing("PSD", requests_suite);
}
