/* Replicated shards (psd --replicas 2): real psd processes, a primary and its
 * backup on 127.0.0.1 ports chosen free at run time. The backup applies every
 * update before the primary acknowledges it, so when the primary is killed
 * (SIGKILL) the backup takes over with every acknowledged update, and training
 * goes on to the same values bit for bit. */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps_error.h"
#include "psd_requests_common.h"
#include "stats.h"
#include "testutil.h"

static ps_test_psd rep[2]; /* replica 0 starts as the primary */
static char peers[100], group[100];

/* A failed assertion ends the test process without the teardown. */
static void cleanup_at_exit(void) {
    for (int r = 0; r < 2; r++)
        ps_test_psd_stop(&rep[r], 2000);
}

static void start_group(const char *mode, const char *workers, const char *lease_ms) {
    atexit(cleanup_at_exit);
    ps_test_children_die_with_me();
    int port[2] = {ps_test_free_port(), ps_test_free_port()};
    snprintf(peers, sizeof peers, "127.0.0.1:%d,127.0.0.1:%d", port[0], port[1]);
    snprintf(group, sizeof group, "127.0.0.1:%d|127.0.0.1:%d", port[0], port[1]);
    for (int r = 0; r < 2; r++) {
        char p[16], idx[8];
        snprintf(p, sizeof p, "%d", port[r]);
        snprintf(idx, sizeof idx, "%d", r);
        const char *args[] = {"--port",     p,        "--workers",        workers, "--mode",  mode,
                              "--replicas", "2",      "--replica",        idx,     "--peers", peers,
                              "--lease-ms", lease_ms, "--worker-timeout", "20000", NULL};
        /* the backup's ready file appears once it follows the primary */
        ck_assert_msg(ps_test_psd_start(&rep[r], args, 20000) == 0, "replica %d did not start", r);
    }
}

static void stop_group(void) {
    for (int r = 0; r < 2; r++)
        ps_test_psd_stop(&rep[r], 5000);
}

static uint64_t stats_version(const char *endpoint) {
    ps_stats h;
    uint64_t v = ps_test_shard_stats(endpoint, &h)->version;
    ps_stats_free(&h);
    return v;
}

typedef struct {
    const char *endpoint;
    uint64_t version;
} version_wait;

static int at_version(void *ctx) {
    version_wait *w = ctx;
    return stats_version(w->endpoint) == w->version;
}

static int at_version_or_more(void *ctx) {
    version_wait *w = ctx;
    return stats_version(w->endpoint) >= w->version;
}

/* Worker k's gradient at step t (one value for every element). */
static float grad_of(int k, int t) {
    return 0.25f * (float)(k + 1) - 0.125f * (float)(t % 7);
}

/* Opens worker `index` of 2 on `endpoint` ("a" or "a|b"). */
static void open_on(good_client *g, const char *endpoint, unsigned index, int create) {
    /* good_open talks to psd.endpoint: point it at the group */
    snprintf(psd.endpoint, sizeof psd.endpoint, "%s", endpoint);
    good_open(g, index, 2, create);
}

/* Runs steps [from, to) of two sync workers; returns with want_* advanced. */
static void sync_steps(good_client *c, int from, int to, float *want_w, float *want_b) {
    for (int t = from; t < to; t++) {
        float sum = 0.0f;
        for (int k = 0; k < 2; k++) {
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
        float mean = sum * 0.5f;
        for (int i = 0; i < NW; i++)
            want_w[i] = sgd(want_w[i], mean);
        for (int i = 0; i < NB; i++)
            want_b[i] = sgd(want_b[i], mean);
    }
}

/* The backup holds every acknowledged update: after 20 steps on the primary it
 * is at the same version; the primary is killed; the backup takes over (logged,
 * within the lease's bound) and serves the same values, and 20 more steps on it
 * give exactly the values of 40 steps on one psd. */
START_TEST(backup_takes_over_with_every_update) {
    start_group("sync", "2", "1000");
    good_client c[2];
    open_on(&c[0], rep[0].endpoint, 0, 1);
    open_on(&c[1], rep[0].endpoint, 1, 0);
    float want_w[NW], want_b[NB];
    memcpy(want_w, W0, sizeof want_w);
    memcpy(want_b, B0, sizeof want_b);
    sync_steps(c, 0, 20, want_w, want_b);
    ck_assert_uint_eq(expect_values(&c[0], want_w, want_b), 20);
    /* the pull's answer came after the backup applied step 19's close */
    ck_assert_uint_eq(stats_version(rep[1].endpoint), 20);
    ck_assert(ps_test_file_has(rep[0].log, "replica 1 follows"));
    ck_assert(ps_test_file_has(rep[1].log, "following the primary"));
    for (int k = 0; k < 2; k++)
        good_close(&c[k]);

    ps_test_psd_kill(&rep[0]);
    ck_assert_msg(ps_test_wait_file_has(rep[1].log, "took over as the primary", 10000, rep[1].pid),
                  "the backup did not take over");
    open_on(&c[0], rep[1].endpoint, 0, 0);
    open_on(&c[1], rep[1].endpoint, 1, 0);
    ck_assert_uint_eq(expect_values(&c[0], want_w, want_b), 20);
    sync_steps(c, 20, 40, want_w, want_b);
    version_wait vw = {rep[1].endpoint, 40};
    ck_assert(ps_test_wait_until(at_version, &vw, 5000, 2));
    ck_assert_uint_eq(expect_values(&c[1], want_w, want_b), 40);
    for (int k = 0; k < 2; k++)
        good_close(&c[k]);
    stop_group();
}
END_TEST

/* Both in turn: the primary is killed and its backup takes over; the killed
 * one, restarted, finds the new primary and rejoins as its backup from a
 * snapshot of the shard's state; then the new primary is killed and the
 * rejoined replica takes over with every update: 40 steps, each 10 on a
 * different arrangement, end with exactly the values of 40 steps on one psd. */
START_TEST(killed_replica_rejoins_from_a_snapshot) {
    start_group("sync", "2", "1000");
    good_client c[2];
    open_on(&c[0], group, 0, 1);
    open_on(&c[1], group, 1, 0);
    float want_w[NW], want_b[NB];
    memcpy(want_w, W0, sizeof want_w);
    memcpy(want_b, B0, sizeof want_b);
    sync_steps(c, 0, 10, want_w, want_b);
    ps_test_psd_kill(&rep[0]);
    sync_steps(c, 10, 20, want_w, want_b); /* the clients find replica 1 */
    ck_assert(ps_test_file_has(rep[1].log, "took over as the primary"));
    const char *args[] = {"--workers",        "2",     "--mode",  "sync", "--replicas", "2",
                          "--replica",        "0",     "--peers", peers,  "--lease-ms", "1000",
                          "--worker-timeout", "20000", NULL};
    ck_assert_int_eq(ps_test_psd_restart(&rep[0], args, 20000), 0); /* ready: it follows */
    ck_assert(ps_test_file_has(rep[0].log, "from its snapshot at entry"));
    ck_assert(ps_test_file_has(rep[1].log, "sent replica 0 a snapshot"));
    sync_steps(c, 20, 30, want_w, want_b);
    version_wait vw = {rep[0].endpoint, 30};
    ck_assert_msg(ps_test_wait_until(at_version, &vw, 5000, 2), "the rejoined backup is at %llu",
                  (unsigned long long)stats_version(rep[0].endpoint));
    ps_test_psd_kill(&rep[1]);
    sync_steps(c, 30, 40, want_w, want_b);
    ck_assert(ps_test_wait_file_has(rep[0].log, "took over as the primary", 10000, rep[0].pid));
    ck_assert_uint_eq(expect_values(&c[0], want_w, want_b), 40);
    for (int k = 0; k < 2; k++)
        good_close(&c[k]);
    stop_group();
}
END_TEST

/* A backup answers requests ENOTPRIMARY and says in its Welcome who it is. */
START_TEST(backup_refuses_requests) {
    start_group("sync", "2", "1000");
    raw_conn r;
    raw_open(&r, rep[1].endpoint);
    raw_pull(&r, 7, (char *[]){"w"}, 1, 0, NULL, NULL, 0);
    raw_expect_error(&r, 7, PS_ENOTPRIMARY, REPLY_MS);
    raw_close(&r);
    stop_group();
}
END_TEST

/* The backup is killed: the primary goes on alone at once (its connection closed
 * while the lease held), and every step is acknowledged. */
START_TEST(primary_goes_on_when_the_backup_dies) {
    start_group("sync", "2", "1000");
    good_client c[2];
    open_on(&c[0], rep[0].endpoint, 0, 1);
    open_on(&c[1], rep[0].endpoint, 1, 0);
    float want_w[NW], want_b[NB];
    memcpy(want_w, W0, sizeof want_w);
    memcpy(want_b, B0, sizeof want_b);
    sync_steps(c, 0, 5, want_w, want_b);
    ps_test_psd_kill(&rep[1]);
    ck_assert(ps_test_wait_file_has(rep[0].log, "the backup's connection closed: serving alone",
                                    10000, rep[0].pid));
    sync_steps(c, 5, 15, want_w, want_b);
    ck_assert_uint_eq(expect_values(&c[0], want_w, want_b), 15);
    for (int k = 0; k < 2; k++)
        good_close(&c[k]);
    stop_group();
}
END_TEST

/* A raw push of "b" (all ones) by worker 0 with (session, seq). */
static void send_push_b(raw_conn *r, uint64_t request_id, uint64_t seq) {
    static const float g[NB] = {1, 1, 1, 1};
    Ps__TensorMeta m, *mp = &m;
    uint64_t shape_buf[1];
    size_t shape[1] = {NB};
    ps_tensor_meta_f32(&m, "b", shape, 1, shape_buf);
    push_req q;
    push_req_init(&q, request_id, &mp, 1, 0, 0);
    q.push.session = 0x5eed;
    q.push.seq = seq;
    const void *pl[1] = {g};
    size_t len[1] = {sizeof g};
    raw_send_hdr(r, &q.h, pl, len, 1);
}

/* A stopped backup (SIGSTOP) holds the acknowledgement back: the primary applies
 * a push but answers it only once the backup has applied it too; the backup,
 * woken, finds its primary's messages waiting and does not take over. */
START_TEST(no_acknowledgement_before_the_backup_applies) {
    start_group("async", "2", "1000");
    good_client c0;
    open_on(&c0, rep[0].endpoint, 0, 1);
    kill(rep[1].pid, SIGSTOP);
    raw_conn r;
    raw_open(&r, rep[0].endpoint);
    send_push_b(&r, 41, 1);
    Ps__Header *early = raw_recv(&r, 1500, NULL);
    if (early) ps_test_dump(rep[0].log);
    ck_assert_msg(early == NULL, "a push was acknowledged that the backup "
                                 "had not applied");
    ck_assert(ps_test_wait_file_has(rep[0].log, "the backup has not answered", 5000, rep[0].pid));
    kill(rep[1].pid, SIGCONT);
    Ps__Header *h = raw_recv(&r, REPLY_MS, NULL);
    ck_assert_ptr_nonnull(h);
    ck_assert_int_eq(h->body_case, PS__HEADER__BODY_PUSH_REPLY);
    ck_assert(h->push_reply->applied);
    ps__header__free_unpacked(h, NULL);
    ck_assert_uint_eq(stats_version(rep[1].endpoint), 1);
    ck_assert(!ps_test_file_has(rep[1].log, "took over"));
    raw_close(&r);
    good_close(&c0);
    stop_group();
}
END_TEST

/* A primary stopped (SIGSTOP) for longer than the lease: its backup takes over;
 * woken, the old primary acknowledges nothing it is sent, learns of the higher
 * term and steps down, and then answers ENOTPRIMARY. */
START_TEST(stopped_primary_steps_down_when_it_wakes) {
    start_group("async", "2", "1000");
    good_client c0;
    open_on(&c0, rep[0].endpoint, 0, 1);
    good_close(&c0);
    kill(rep[0].pid, SIGSTOP);
    ck_assert(ps_test_wait_file_has(rep[1].log, "took over as the primary", 10000, rep[1].pid));
    raw_conn r;
    raw_open(&r, rep[0].endpoint);
    send_push_b(&r, 42, 1); /* waits in the socket of the stopped primary */
    usleep(200 * 1000);
    kill(rep[0].pid, SIGCONT);
    ck_assert(ps_test_wait_file_has(rep[0].log, "no longer the primary", 10000, rep[0].pid));
    Ps__Header *h = raw_recv(&r, 1000, NULL);
    ck_assert_msg(!h || h->body_case == PS__HEADER__BODY_ERROR,
                  "the deposed primary acknowledged a push");
    if (h) ps__header__free_unpacked(h, NULL);
    send_push_b(&r, 43, 2);
    raw_expect_error(&r, 43, PS_ENOTPRIMARY, REPLY_MS);
    raw_close(&r);
    ck_assert_uint_eq(stats_version(rep[1].endpoint), 0); /* nothing reached the new primary */
    stop_group();
}
END_TEST

typedef struct {
    good_client *c;
    int pushes, acked;
} pusher;

static void *push_loop(void *arg) {
    pusher *p = arg;
    for (int i = 0; i < p->pushes; i++) {
        for (int k = 0; k < NB; k++)
            p->c->db[k] = 1.0f;
        int applied = -1;
        if (ps_client_push(p->c->c, 0, &applied) == PS_OK && applied) p->acked++;
    }
    return NULL;
}

/* Async, two workers pushing through the group ("primary|backup") while the
 * primary is killed: the new primary applied exactly the pushes acknowledged
 * to the workers (a push whose reply died with the primary is re-sent, and
 * applied once), and every push was acknowledged. */
START_TEST(async_applied_equals_acknowledged_across_a_kill) {
    start_group("async", "2", "400");
    good_client c[2];
    open_on(&c[0], group, 0, 1);
    open_on(&c[1], group, 1, 0);
    pusher p[2] = {{&c[0], 300, 0}, {&c[1], 300, 0}};
    pthread_t t[2];
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(pthread_create(&t[k], NULL, push_loop, &p[k]), 0);
    version_wait vw = {rep[0].endpoint, 150};
    ck_assert(ps_test_wait_until(at_version_or_more, &vw, 20000, 1));
    ps_test_psd_kill(&rep[0]);
    for (int k = 0; k < 2; k++)
        pthread_join(t[k], NULL);
    ck_assert_int_eq(p[0].acked + p[1].acked, 600);
    ck_assert(ps_test_file_has(rep[1].log, "took over as the primary"));
    ck_assert_uint_eq(stats_version(rep[1].endpoint), 600);
    for (int k = 0; k < 2; k++)
        good_close(&c[k]);
    stop_group();
}
END_TEST

static Suite *replicas_suite(void) {
    Suite *s = suite_create("replicas");
    TCase *tc = tcase_create("group");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, backup_takes_over_with_every_update);
    tcase_add_test(tc, backup_refuses_requests);
    tcase_add_test(tc, primary_goes_on_when_the_backup_dies);
    tcase_add_test(tc, no_acknowledgement_before_the_backup_applies);
    tcase_add_test(tc, stopped_primary_steps_down_when_it_wakes);
    tcase_add_test(tc, async_applied_equals_acknowledged_across_a_kill);
    tcase_add_test(tc, killed_replica_rejoins_from_a_snapshot);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_main_needing("PSD", replicas_suite);
}
