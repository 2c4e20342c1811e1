/* The combined push-and-pull request (PushPull) against a real psd on
 * 127.0.0.1, through the client's step exchange (ps_client_step_begin /
 * grads_ready / step_end) and by hand on a raw DEALER: sync replies wait for
 * the step and carry its values; async replies at once; dropped pushes still
 * bring values; bad requests get errors; a pull reply in flight keeps its
 * values while an update lands (copy-on-write); pushes flagged skipped
 * (mixed_float16's overflowed steps) count but are not applied. */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "proc.h"
#include "ps.h"
#include "ps_error.h"
#include "raw.h"
#include "stats.h"
#include "testutil.h"
#include "wire.h"

#define LR 0.25f /* a power of two: the expected values below are exact */
#define N 8
#define REPLY_MS 5000

static ps_test_psd psd;

static void start_psd(const char *workers, const char *mode) {
    ps_test_children_die_with_me();
    const char *args[] = {"--workers", workers, "--mode", mode, NULL};
    ck_assert_msg(ps_test_psd_start(&psd, args, 10000) == 0, "psd did not start");
}

static void setup_sync2(void) {
    start_psd("2", "sync");
}

static void setup_async1(void) {
    start_psd("1", "async");
}

static void teardown(void) {
    if (psd.pid > 0) kill(psd.pid, SIGTERM);
    int st = psd.pid > 0 ? ps_test_wait(psd.pid, 5000) : 0;
    if (st != 0) ps_test_dump(psd.log);
    psd.pid = 0;
    ps_test_psd_stop(&psd, 0);
    ck_assert_msg(st == 0, "psd exited with status %d after SIGTERM", st);
}

/* A worker with two tensors "a" and "b" of N floats, in one grads buffer so
 * grads_ready can announce them one at a time. */
typedef struct {
    ps_client *c;
    float params[2 * N], grads[2 * N];
} worker;

static void worker_open(worker *w, unsigned index, unsigned workers, int create) {
    memset(w, 0, sizeof *w);
    for (int i = 0; i < 2 * N; i++)
        w->params[i] = (float)i;
    const char *eps[1] = {psd.endpoint};
    char err[256];
    ck_assert_msg(ps_client_open(&w->c, eps, 1, index, workers, err, sizeof err) == PS_OK, "%s",
                  err);
    ps_client_set_timeout(w->c, REPLY_MS);
    ps_opt_spec opt = ps_opt_spec_default(PS_OPT_SGD);
    opt.lr = LR;
    for (int k = 0; k < 2; k++) {
        ps_client_tensor t = {.shard = 0, .rank = 1, .shape = {N}, .opt = opt};
        snprintf(t.name, sizeof t.name, "%s", k ? "b" : "a");
        t.param = w->params + k * N;
        t.grad = w->grads + k * N;
        ck_assert_int_eq(ps_client_add(w->c, &t), PS_OK);
    }
    int async = -1;
    ck_assert_msg(ps_client_hello(w->c, &async, NULL) == PS_OK, "%s", ps_client_error(w->c));
    if (create) ck_assert_int_eq(ps_client_create_vars(w->c, NULL), PS_OK);
}

/* Sync, 2 workers: worker 0's push-pull is sent while its "step" is still
 * running (grads_ready on "b", then "a"), and is answered only once worker 1
 * pushed too, with the mean gradient applied; both get the same values. */
START_TEST(sync_reply_waits_for_the_step) {
    worker w0, w1;
    worker_open(&w0, 0, 2, 1);
    worker_open(&w1, 1, 2, 0);
    ck_assert_int_eq(ps_client_pull_next(w0.c, 0, 0, NULL), PS_OK);
    ck_assert_int_eq(ps_client_pull_next(w1.c, 0, 0, NULL), PS_OK);
    for (int i = 0; i < 2 * N; i++) {
        w0.grads[i] = 1.0f;
        w1.grads[i] = 3.0f;
    }
    ps_client_step_begin(w0.c, 0);
    ps_client_grads_ready(w0.c, w0.grads + N, w0.grads + 2 * N); /* "b" only: not sent yet */
    ps_client_grads_ready(w0.c, w0.grads, w0.grads + N);         /* "a" too: sent now */
    /* worker 1 takes the plain route: push, then pull */
    size_t dropped = 9;
    ck_assert_int_eq(ps_client_push_next(w1.c, 0, &dropped), PS_OK);
    ck_assert_uint_eq(dropped, 0);
    int fresh = 0;
    ck_assert_msg(ps_client_step_end(w0.c, &dropped, &fresh) == PS_OK, "%s", ps_client_error(w0.c));
    ck_assert_int_eq(fresh, 1);
    ck_assert_uint_eq(dropped, 0);
    ck_assert_int_eq(ps_client_pull_next(w1.c, 0, 1, NULL), PS_OK);
    for (int i = 0; i < 2 * N; i++) {
        float want = (float)i - LR * 2.0f; /* mean of 1 and 3 */
        ck_assert_float_eq(w0.params[i], want);
        ck_assert_float_eq(w1.params[i], want);
    }
    ps_client_close(w0.c);
    ps_client_close(w1.c);
}
END_TEST

/* Sync: worker 0's push-pull waits while worker 1 has not pushed: it times
 * out rather than answering early. */
START_TEST(sync_reply_not_early) {
    worker w0, w1;
    worker_open(&w0, 0, 2, 1);
    worker_open(&w1, 1, 2, 0);
    ck_assert_int_eq(ps_client_pull_next(w0.c, 0, 0, NULL), PS_OK);
    ps_client_set_timeout(w0.c, 400);
    long long t0 = ps_test_now_ms();
    ps_client_step_begin(w0.c, 0);
    int fresh = 1;
    ck_assert_int_eq(ps_client_step_end(w0.c, NULL, &fresh), PS_ETIMEDOUT);
    ck_assert_int_ge(ps_test_now_ms() - t0, 350);
    ck_assert_int_eq(fresh, 0);
    ps_client_close(w0.c);
    ps_client_close(w1.c);
}
END_TEST

/* Async, 1 worker: every push-pull is answered at once with its own update
 * applied; ten steps in a row give ten updates. */
START_TEST(async_steps) {
    worker w;
    worker_open(&w, 0, 1, 1);
    ck_assert_int_eq(ps_client_pull_next(w.c, 1, 0, NULL), PS_OK);
    for (int i = 0; i < 2 * N; i++)
        w.grads[i] = (float)(i % 3);
    for (uint64_t step = 0; step < 10; step++) {
        ps_client_step_begin(w.c, step);
        int fresh = 0;
        ck_assert_msg(ps_client_step_end(w.c, NULL, &fresh) == PS_OK, "%s", ps_client_error(w.c));
        ck_assert_int_eq(fresh, 1);
    }
    for (int i = 0; i < 2 * N; i++)
        ck_assert_float_eq(w.params[i], (float)i - 10.0f * LR * (float)(i % 3));
    ps_client_close(w.c);
}
END_TEST

/* Sync, 2 workers: a push flagged skipped (mixed_float16: the worker's
 * gradients overflowed; its values, an inf here, are never read) counts
 * towards closing the step but is not averaged in: the step applies worker
 * 0's gradient alone. When both skip, the step closes with no update and the
 * version still advances. */
START_TEST(sync_skipped_push_is_not_averaged) {
    worker w0, w1;
    worker_open(&w0, 0, 2, 1);
    worker_open(&w1, 1, 2, 0);
    ck_assert_int_eq(ps_client_pull_next(w0.c, 0, 0, NULL), PS_OK);
    ck_assert_int_eq(ps_client_pull_next(w1.c, 0, 0, NULL), PS_OK);
    for (int i = 0; i < 2 * N; i++) {
        w0.grads[i] = 1.0f;
        w1.grads[i] = INFINITY;
    }
    ps_client_set_push_skipped(w1.c, 1);
    ps_client_step_begin(w0.c, 0);
    size_t dropped = 9;
    ck_assert_msg(ps_client_push_next(w1.c, 0, &dropped) == PS_OK, "%s", ps_client_error(w1.c));
    ck_assert_uint_eq(dropped, 0);
    int fresh = 0;
    ck_assert_msg(ps_client_step_end(w0.c, &dropped, &fresh) == PS_OK, "%s", ps_client_error(w0.c));
    for (int i = 0; i < 2 * N; i++)
        ck_assert_float_eq(w0.params[i], (float)i - LR * 1.0f); /* not the mean with a zero */
    /* both skip: no update, version 2 */
    ps_client_set_push_skipped(w0.c, 1);
    ps_client_step_begin(w0.c, 1);
    ck_assert_int_eq(ps_client_pull_next(w1.c, 0, 1, NULL), PS_OK);
    ck_assert_int_eq(ps_client_push_next(w1.c, 1, &dropped), PS_OK);
    ck_assert_msg(ps_client_step_end(w0.c, &dropped, &fresh) == PS_OK, "%s", ps_client_error(w0.c));
    uint64_t version = 0;
    ck_assert_int_eq(ps_client_pull_next(w1.c, 0, 2, &version), PS_OK);
    ck_assert_uint_eq(version, 2);
    for (int i = 0; i < 2 * N; i++) {
        ck_assert_float_eq(w0.params[i], (float)i - LR * 1.0f);
        ck_assert_float_eq(w1.params[i], (float)i - LR * 1.0f);
    }
    ps_client_close(w0.c);
    ps_client_close(w1.c);
}
END_TEST

/* Async, 1 worker: a skipped push-pull (its values, NaN, never read) is
 * answered at once, applies nothing, and still moves the version on. */
START_TEST(async_skipped_push) {
    worker w;
    worker_open(&w, 0, 1, 1);
    ck_assert_int_eq(ps_client_pull_next(w.c, 1, 0, NULL), PS_OK);
    for (int i = 0; i < 2 * N; i++)
        w.grads[i] = NAN;
    ps_client_set_push_skipped(w.c, 1);
    ps_client_step_begin(w.c, 0);
    int fresh = 0;
    ck_assert_msg(ps_client_step_end(w.c, NULL, &fresh) == PS_OK, "%s", ps_client_error(w.c));
    ck_assert_int_eq(fresh, 1);
    for (int i = 0; i < 2 * N; i++)
        ck_assert_float_eq(w.params[i], (float)i);
    ps_client_set_push_skipped(w.c, 0);
    for (int i = 0; i < 2 * N; i++)
        w.grads[i] = 2.0f;
    ps_client_step_begin(w.c, 1);
    ck_assert_msg(ps_client_step_end(w.c, NULL, &fresh) == PS_OK, "%s", ps_client_error(w.c));
    uint64_t version = 0;
    ck_assert_int_eq(ps_client_pull_next(w.c, 1, 2, &version), PS_OK);
    ck_assert_uint_eq(version, 2);
    for (int i = 0; i < 2 * N; i++)
        ck_assert_float_eq(w.params[i], (float)i - 2.0f * LR);
    ps_client_close(w.c);
}
END_TEST

/* ---- by hand on a raw DEALER ---- */

/* Sends a PushPull of `n` gradients named names[] with `data` (N floats each). */
static void raw_push_pull(raw_conn *r, uint64_t id, const char *const *names, size_t n,
                          const float *data, uint64_t step, uint64_t clock) {
    Ps__TensorMeta metas[4], *mp[4];
    uint64_t shapes[4][PS_WIRE_MAX_RANK];
    ps_payload pl[4];
    size_t shape[1] = {N};
    for (size_t i = 0; i < n; i++) {
        ps_tensor_meta_f32(&metas[i], names[i], shape, 1, shapes[i]);
        mp[i] = &metas[i];
        pl[i] = (ps_payload){data + i * N, N * sizeof(float), NULL, NULL};
    }
    Ps__Header h = PS__HEADER__INIT;
    Ps__PushPull pp = PS__PUSH_PULL__INIT;
    Ps__Push push = PS__PUSH__INIT;
    push.grads = mp;
    push.n_grads = n;
    push.step = step;
    push.clock = clock;
    pp.push = &push;
    h.protocol_version = PS_PROTOCOL_VERSION;
    h.request_id = id;
    h.body_case = PS__HEADER__BODY_PUSH_PULL;
    h.push_pull = &pp;
    ck_assert_int_eq(ps_wire_send(r->sock, NULL, 0, &h, pl, n, 0), PS_OK);
}

/* Async, raw: the reply is a PushPullReply with the applied push and the
 * values after it, in the order of the gradients; errors for an unknown
 * variable, a NaN gradient and an empty push leave the values unchanged. */
START_TEST(raw_reply_and_errors) {
    worker w;
    worker_open(&w, 0, 1, 1);
    raw_conn r;
    raw_open(&r, psd.endpoint);
    float g[2 * N];
    for (int i = 0; i < 2 * N; i++)
        g[i] = 4.0f;
    raw_push_pull(&r, 7, (const char *[]){"b", "a"}, 2, g, 0, 0);
    ps_frames f;
    Ps__Header *h = raw_recv(&r, REPLY_MS, &f);
    ck_assert_ptr_nonnull(h);
    ck_assert_uint_eq(h->request_id, 7);
    ck_assert_int_eq(h->body_case, PS__HEADER__BODY_PUSH_PULL_REPLY);
    const Ps__PushPullReply *rep = h->push_pull_reply;
    ck_assert_ptr_nonnull(rep->push);
    ck_assert_int_eq(rep->push->applied, 1);
    ck_assert_int_eq(rep->push->dropped, 0);
    ck_assert_uint_eq(rep->pull->version, 1);
    ck_assert_uint_eq(rep->pull->n_tensors, 2);
    ck_assert_str_eq(rep->pull->tensors[0]->name, "b");
    ck_assert_str_eq(rep->pull->tensors[1]->name, "a");
    ck_assert_uint_eq(f.n, 3);
    for (int k = 0; k < 2; k++) {
        const float *v = zmq_msg_data(&f.frames[1 + k]);
        for (int i = 0; i < N; i++) /* "b" holds params N.., "a" 0.. */
            ck_assert_float_eq(v[i], (float)((k ? 0 : N) + i) - LR * 4.0f);
    }
    ps_frames_close(&f);
    ps__header__free_unpacked(h, NULL);

    raw_push_pull(&r, 8, (const char *[]){"a", "nope"}, 2, g, 0, 1);
    raw_expect_error(&r, 8, PS_ENOENT, REPLY_MS);
    float bad[N] = {0, 0, 0, 0, 0, INFINITY, 0, 0};
    raw_push_pull(&r, 9, (const char *[]){"a"}, 1, bad, 0, 1);
    raw_expect_error(&r, 9, PS_EINVAL, REPLY_MS);
    raw_push_pull(&r, 10, NULL, 0, g, 0, 1);
    raw_expect_error(&r, 10, PS_EPROTO, REPLY_MS);
    /* none of them changed anything */
    uint64_t version = 0;
    ck_assert_int_eq(ps_client_pull(w.c, 0, &version), PS_OK);
    ck_assert_uint_eq(version, 1);
    for (int i = 0; i < 2 * N; i++)
        ck_assert_float_eq(w.params[i], (float)i - LR * 4.0f);
    raw_close(&r);
    ps_client_close(w.c);
}
END_TEST

/* Sync, raw: a push-pull for a step that closed without it (here: its
 * worker pushes twice) is dropped but still answered with values. */
START_TEST(raw_dropped_push_gets_values) {
    worker w0, w1;
    worker_open(&w0, 0, 2, 1);
    worker_open(&w1, 1, 2, 0);
    for (int i = 0; i < 2 * N; i++)
        w0.grads[i] = w1.grads[i] = 2.0f;
    ck_assert_int_eq(ps_client_push(w0.c, 0, NULL), PS_OK);
    ck_assert_int_eq(ps_client_push(w1.c, 0, NULL), PS_OK); /* step 0 closes: version 1 */
    raw_conn r;
    raw_open(&r, psd.endpoint);
    float g[N] = {100, 100, 100, 100, 100, 100, 100, 100};
    raw_push_pull(&r, 21, (const char *[]){"a"}, 1, g, 0, 0); /* for step 0: closed */
    ps_frames f;
    Ps__Header *h = raw_recv(&r, REPLY_MS, &f);
    ck_assert_ptr_nonnull(h);
    ck_assert_int_eq(h->body_case, PS__HEADER__BODY_PUSH_PULL_REPLY);
    ck_assert_int_eq(h->push_pull_reply->push->dropped, 1);
    ck_assert_uint_eq(h->push_pull_reply->pull->version, 1);
    const float *v = zmq_msg_data(&f.frames[1]);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(v[i], (float)i - LR * 2.0f);
    ps_frames_close(&f);
    ps__header__free_unpacked(h, NULL);
    raw_close(&r);
    ps_client_close(w0.c);
    ps_client_close(w1.c);
}
END_TEST

/* Async: pull replies are sent from the variable's own memory; an update
 * arriving while replies are still queued in psd must not change what they
 * carry (the update writes a copy). A raw socket that reads nothing (receive
 * high-water mark 1) asks for 40 pulls of a 1 MiB variable, far more than the
 * TCP buffers hold; then a push updates it; every reply read afterwards holds
 * the old values. */
#define BIG (256 * 1024)

/* Until psd has dispatched `want` requests (each Stats asked here counts as one too). */
typedef struct {
    ps_client *c;
    uint64_t want;
} requests_seen;

static int psd_saw_requests(void *arg) {
    requests_seen *w = arg;
    ps_stats h;
    uint64_t n = ps_test_stats(w->c, &h)->requests;
    ps_stats_free(&h);
    w->want++; /* this Stats request */
    return n >= w->want;
}

START_TEST(queued_replies_keep_their_values) {
    static float big[BIG], dbig[BIG];
    for (int i = 0; i < BIG; i++) {
        big[i] = (float)(i % 1000);
        dbig[i] = 4.0f;
    }
    ps_client *c;
    const char *eps[1] = {psd.endpoint};
    char err[256];
    ck_assert_int_eq(ps_client_open(&c, eps, 1, 0, 1, err, sizeof err), PS_OK);
    ps_client_set_timeout(c, REPLY_MS);
    ps_client_tensor t = {.name = "big", .shard = 0, .rank = 1, .shape = {BIG}};
    t.opt = ps_opt_spec_default(PS_OPT_SGD);
    t.opt.lr = LR;
    t.param = big;
    t.grad = dbig;
    ck_assert_int_eq(ps_client_add(c, &t), PS_OK);
    int async = -1;
    ck_assert_int_eq(ps_client_hello(c, &async, NULL), PS_OK);
    ck_assert_int_eq(ps_client_create_vars(c, NULL), PS_OK);

    ps_stats sh;
    uint64_t before = ps_test_stats(c, &sh)->requests;
    ps_stats_free(&sh);
    raw_conn r;
    raw_open(&r, psd.endpoint);
    int hwm = 1;
    zmq_setsockopt(r.sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
    const char *names[] = {"big"};
    for (uint64_t id = 1; id <= 40; id++) {
        Ps__Header h = PS__HEADER__INIT;
        Ps__Pull p = PS__PULL__INIT;
        p.names = (char **)names;
        p.n_names = 1;
        h.protocol_version = PS_PROTOCOL_VERSION;
        h.request_id = id;
        h.body_case = PS__HEADER__BODY_PULL;
        h.pull = &p;
        ck_assert_int_eq(ps_wire_send(r.sock, NULL, 0, &h, NULL, 0, 0), PS_OK);
    }
    requests_seen seen = {c, before + 40};
    ck_assert_msg(ps_test_wait_until(psd_saw_requests, &seen, REPLY_MS, 10),
                  "psd did not answer the 40 pulls"); /* psd answers them all */
    ck_assert_int_eq(ps_client_push(c, 0, NULL), PS_OK);
    ck_assert_int_eq(ps_client_pull(c, 1, NULL), PS_OK);
    ck_assert_float_eq(big[3], 3.0f - LR * 4.0f); /* the update is in */
    for (uint64_t id = 1; id <= 40; id++) {
        ps_frames f;
        Ps__Header *h = raw_recv(&r, REPLY_MS, &f);
        ck_assert_ptr_nonnull(h);
        ck_assert_uint_eq(h->request_id, id);
        ck_assert_uint_eq(h->pull_reply->version, 0);
        ck_assert_uint_eq(zmq_msg_size(&f.frames[1]), sizeof big);
        const float *v = zmq_msg_data(&f.frames[1]);
        for (int i = 0; i < BIG; i += 997)
            ck_assert_msg(v[i] == (float)(i % 1000), "reply %llu: [%d] = %g, want %d",
                          (unsigned long long)id, i, (double)v[i], i % 1000);
        ps_frames_close(&f);
        ps__header__free_unpacked(h, NULL);
    }
    raw_close(&r);
    ps_client_close(c);
}
END_TEST

static Suite *push_pull_suite(void) {
    Suite *s = suite_create("push_pull");
    TCase *tc = tcase_create("sync");
    tcase_set_timeout(tc, 30);
    tcase_add_checked_fixture(tc, setup_sync2, teardown);
    tcase_add_test(tc, sync_reply_waits_for_the_step);
    tcase_add_test(tc, sync_reply_not_early);
    tcase_add_test(tc, sync_skipped_push_is_not_averaged);
    tcase_add_test(tc, raw_dropped_push_gets_values);
    suite_add_tcase(s, tc);
    tc = tcase_create("async");
    tcase_set_timeout(tc, 30);
    tcase_add_checked_fixture(tc, setup_async1, teardown);
    tcase_add_test(tc, async_steps);
    tcase_add_test(tc, async_skipped_push);
    tcase_add_test(tc, raw_reply_and_errors);
    tcase_add_test(tc, queued_replies_keep_their_values);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_main_needing("PSD", push_pull_suite);
}
