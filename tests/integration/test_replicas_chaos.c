/* A randomized fault schedule on a replicated shard (psd --replicas 2): two
 * workers push without pause (async) through the group ("primary|backup")
 * while a seeded schedule kills a replica (SIGKILL) and restarts it, freezes
 * the primary (SIGSTOP) for less or more than the lease, or freezes the backup,
 * at random moments; a replica that stepped down is killed and restarted, as
 * an operator would. Afterwards: every push the workers were told was applied
 * was applied exactly once (the shard's version, async, counts the applied
 * pushes), and the two replicas hold the same bytes: the values pulled from the
 * primary equal, bit for bit, those its backup serves once the primary is
 * killed and it takes over. Bounded: each schedule has EVENTS events. */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps_error.h"
#include "psd_requests_common.h"
#include "stats.h"
#include "testutil.h"

#define EVENTS 6
#define LEASE_MS 300

static ps_test_psd rep[2];
static char peers[100], group[100];

static void cleanup_at_exit(void) {
    for (int r = 0; r < 2; r++)
        ps_test_psd_stop(&rep[r], 2000);
}

static const char **replica_args(int r, const char **buf) {
    static const char *const idx[2] = {"0", "1"};
    const char *a[] = {"--workers",        "2",     "--mode",  "async", "--replicas", "2",
                       "--replica",        idx[r],  "--peers", peers,   "--lease-ms", "300",
                       "--worker-timeout", "20000", NULL};
    memcpy(buf, a, sizeof a);
    return buf;
}

static void start_group(void) {
    int port[2] = {ps_test_free_port(), ps_test_free_port()};
    snprintf(peers, sizeof peers, "127.0.0.1:%d,127.0.0.1:%d", port[0], port[1]);
    snprintf(group, sizeof group, "127.0.0.1:%d|127.0.0.1:%d", port[0], port[1]);
    for (int r = 0; r < 2; r++) {
        char p[16];
        snprintf(p, sizeof p, "%d", port[r]);
        const char *buf[20], **a = replica_args(r, buf);
        const char *args[24] = {"--port", p};
        int n = 2;
        for (int i = 0; a[i]; i++)
            args[n++] = a[i];
        args[n] = NULL;
        ck_assert_msg(ps_test_psd_start(&rep[r], args, 20000) == 0, "replica %d did not start", r);
    }
}

static void restart(int r) {
    const char *buf[20];
    ck_assert_msg(ps_test_psd_restart(&rep[r], replica_args(r, buf), 30000) == 0,
                  "replica %d did not rejoin", r);
}

/* 1 when the replica at endpoint serves requests: a pull of a variable that does
 * not exist is refused for that (ENOENT), not with ENOTPRIMARY, and answered at
 * once (a frozen replica, or a founder that holds its replies, is not one). A
 * pull without a worker changes nothing. */
static int is_primary(const char *endpoint) {
    raw_conn c;
    raw_open(&c, endpoint);
    raw_pull(&c, 7, (char *[]){"no such variable"}, 1, 0, NULL, NULL, 0);
    Ps__Header *h = raw_recv(&c, 500, NULL);
    int yes = h && h->body_case == PS__HEADER__BODY_ERROR && h->error->code != PS_ENOTPRIMARY;
    if (h) ps__header__free_unpacked(h, NULL);
    raw_close(&c);
    return yes;
}

static int primary_now(void) {
    for (int r = 0; r < 2; r++)
        if (rep[r].pid > 0 && is_primary(rep[r].endpoint)) return r;
    return -1;
}

typedef struct {
    good_client *c;
    atomic_int *stop;
    long acked, failed;
} pusher;

static void *push_loop(void *arg) {
    pusher *p = arg;
    while (!atomic_load(p->stop)) {
        for (int k = 0; k < NB; k++)
            p->c->db[k] = 0.001f;
        int applied = -1;
        if (ps_client_push(p->c->c, 0, &applied) == PS_OK && applied)
            p->acked++;
        else
            p->failed++;
    }
    return NULL;
}

static int ms_between(unsigned *seed, int lo, int hi) {
    return lo + (int)(rand_r(seed) % (unsigned)(hi - lo + 1));
}

/* A replica that stepped down (it was frozen past the lease) is killed and
 * restarted: it rejoins as a backup. */
static void heal(int r) {
    if (rep[r].pid > 0 && ps_test_file_has(rep[r].log, "no longer the primary")) {
        ps_test_psd_kill(&rep[r]);
        /* the next incarnation's log is appended: forget the old line */
        char moved[700];
        snprintf(moved, sizeof moved, "%s.old", rep[r].log);
        rename(rep[r].log, moved);
        restart(r);
    }
}

static void run_schedule(unsigned seed0) {
    unsigned seed = seed0;
    start_group();
    good_client c[2];
    snprintf(psd.endpoint, sizeof psd.endpoint, "%s", group);
    good_open(&c[0], 0, 2, 1);
    good_open(&c[1], 1, 2, 0);
    for (int k = 0; k < 2; k++) /* a frozen primary is left after 0.5 s, not 5 */
        ps_client_set_retry(c[k].c, 500);
    atomic_int stop = 0;
    pusher p[2] = {{&c[0], &stop, 0, 0}, {&c[1], &stop, 0, 0}};
    pthread_t t[2];
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(pthread_create(&t[k], NULL, push_loop, &p[k]), 0);
    char plan[512] = "";
    for (int ev = 0; ev < EVENTS; ev++) {
        usleep((useconds_t)ms_between(&seed, 100, 600) * 1000);
        int prim = primary_now();
        if (prim < 0) { /* a take-over in progress: let it finish */
            usleep(2 * LEASE_MS * 1000);
            prim = primary_now();
        }
        ck_assert_msg(prim >= 0, "no primary (events so far: %s)", plan);
        int kind = (int)(rand_r(&seed) % 4);
        int victim = kind == 3 || (kind == 0 && rand_r(&seed) % 2) ? 1 - prim : prim;
        int ms = 0;
        size_t len = strlen(plan);
        if (kind == 0) { /* kill -9 one, restart it */
            ps_test_psd_kill(&rep[victim]);
            ms = ms_between(&seed, 0, 800);
            usleep((useconds_t)ms * 1000);
            restart(victim);
            snprintf(plan + len, sizeof plan - len, "kill %s, back after %d ms; ",
                     victim == prim ? "primary" : "backup", ms);
        } else if (kind == 1 || kind == 2) { /* freeze the primary, under or over the lease */
            ms = kind == 1 ? ms_between(&seed, 50, LEASE_MS / 2)
                           : ms_between(&seed, 2 * LEASE_MS, 5 * LEASE_MS);
            kill(rep[victim].pid, SIGSTOP);
            usleep((useconds_t)ms * 1000);
            kill(rep[victim].pid, SIGCONT);
            usleep(3 * LEASE_MS * 1000); /* it steps down, or goes on */
            heal(victim);
            snprintf(plan + len, sizeof plan - len, "stop primary %d ms; ", ms);
        } else { /* freeze the backup */
            ms = ms_between(&seed, 50, 3 * LEASE_MS);
            kill(rep[victim].pid, SIGSTOP);
            usleep((useconds_t)ms * 1000);
            kill(rep[victim].pid, SIGCONT);
            snprintf(plan + len, sizeof plan - len, "stop backup %d ms; ", ms);
        }
    }
    usleep(300 * 1000);
    atomic_store(&stop, 1);
    for (int k = 0; k < 2; k++)
        pthread_join(t[k], NULL);
    fprintf(stderr, "schedule %u: %s%ld pushes acknowledged\n", seed0, plan,
            p[0].acked + p[1].acked);
    ck_assert_msg(p[0].failed + p[1].failed == 0, "%ld pushes failed (%s)",
                  p[0].failed + p[1].failed, plan);
    int prim = primary_now();
    ck_assert_int_ge(prim, 0);
    ps_stats h;
    uint64_t applied = ps_test_shard_stats(rep[prim].endpoint, &h)->version;
    ps_stats_free(&h);
    ck_assert_msg(applied == (uint64_t)(p[0].acked + p[1].acked),
                  "%llu pushes applied, %ld acknowledged (%s)", (unsigned long long)applied,
                  p[0].acked + p[1].acked, plan);
    /* the same bytes on both: the primary's values, then the backup's once it took over */
    float w1[NW], b1[NB];
    uint64_t v = 0;
    ck_assert_int_eq(ps_client_pull(c[0].c, 0, &v), PS_OK);
    memcpy(w1, c[0].w, sizeof w1);
    memcpy(b1, c[0].b, sizeof b1);
    ps_test_psd_kill(&rep[prim]);
    ck_assert(ps_test_wait_file_has(rep[1 - prim].log, "took over as the primary", 10000,
                                    rep[1 - prim].pid));
    ck_assert_uint_eq(expect_values(&c[0], w1, b1), applied);
    for (int k = 0; k < 2; k++)
        good_close(&c[k]);
    for (int r = 0; r < 2; r++)
        ps_test_psd_stop(&rep[r], 5000);
}

START_TEST(random_faults_lose_nothing) {
    run_schedule(1000u + (unsigned)_i);
}
END_TEST

static void setup(void) {
    atexit(cleanup_at_exit);
    ps_test_children_die_with_me();
}

static Suite *make_suite(void) {
    Suite *s = suite_create("replicas_chaos");
    TCase *tc = tcase_create("schedules");
    tcase_add_checked_fixture(tc, setup, NULL);
    /* PS_CHAOS_SCHEDULES=N runs N schedules (seeds 1000..1000+N-1); the suite runs 2 */
    const char *n = getenv("PS_CHAOS_SCHEDULES");
    int schedules = n && atoi(n) > 0 ? atoi(n) : 2;
    tcase_set_timeout(tc, 60 * schedules);
    tcase_add_loop_test(tc, random_faults_lose_nothing, 0, schedules);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_main_needing("PSD", make_suite);
}
