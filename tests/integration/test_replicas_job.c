/* A training job on replicated shards (psd --replicas 2): real psworker
 * processes, two shards each run as a primary and a backup on 127.0.0.1. The
 * primary of shard 0 is killed (SIGKILL) mid-epoch; its backup takes over, the
 * workers find it (each shard is one ps entry "primary|backup") and retry, and
 * the job ends with variables bit for bit those of the same job without the
 * kill. An async job across the same kill: every shard applied exactly the
 * updates it acknowledged (none lost, none twice). */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc.h"
#include "ps.h"
#include "stats.h"
#include "testutil.h"
#include "train_jobs.h"

#define SHARDS 2

static char mlp[600];
static ps_test_psd rep[SHARDS][2];

static void cleanup_at_exit(void) {
    for (int s = 0; s < SHARDS; s++)
        for (int r = 0; r < 2; r++)
            ps_test_psd_stop(&rep[s][r], 2000);
}

/* Two groups of two replicas for `workers` workers in `mode`; the workers' ps
 * list ("a0|a1,b0|b1") in ps. */
static void start_groups(const char *mode, const char *workers, char *ps, size_t n) {
    ps[0] = '\0';
    for (int s = 0; s < SHARDS; s++) {
        int port[2] = {ps_test_free_port(), ps_test_free_port()};
        char peers[64], sh[8];
        snprintf(peers, sizeof peers, "127.0.0.1:%d,127.0.0.1:%d", port[0], port[1]);
        snprintf(sh, sizeof sh, "%d", s);
        for (int r = 0; r < 2; r++) {
            char p[16], idx[8];
            snprintf(p, sizeof p, "%d", port[r]);
            snprintf(idx, sizeof idx, "%d", r);
            const char *args[] = {"--port",    p,       "--shard", sh,    "--num-shards", "2",
                                  "--workers", workers, "--mode",  mode,  "--replicas",   "2",
                                  "--replica", idx,     "--peers", peers, "--lease-ms",   "400",
                                  NULL};
            ck_assert_msg(ps_test_psd_start(&rep[s][r], args, 20000) == 0,
                          "shard %d replica %d did not start", s, r);
        }
        size_t len = strlen(ps);
        snprintf(ps + len, n - len, "%s127.0.0.1:%d|127.0.0.1:%d", s ? "," : "", port[0], port[1]);
    }
}

static void stop_groups(void) {
    for (int s = 0; s < SHARDS; s++)
        for (int r = 0; r < 2; r++)
            ps_test_psd_stop(&rep[s][r], 5000);
}

typedef struct {
    const char *endpoint; /* shard 0's primary */
    pid_t pid;
    uint64_t at_version; /* the kill comes once the shard is here */
    int killed;
} killer;

/* The shard's version, or 0 when it does not answer (no assertion: a thread). */
static uint64_t version_of(ps_client *c) {
    ps_stats h;
    if (ps_client_stats(c, 0, &h) != PS_OK) return 0;
    uint64_t v = h.version;
    ps_stats_free(&h);
    return v;
}

static void *kill_when_there(void *arg) {
    killer *k = arg;
    ps_client *c;
    char err[256];
    const char *eps[1] = {k->endpoint};
    if (ps_client_open(&c, eps, 1, 0, 1, err, sizeof err) != PS_OK) return NULL;
    ps_client_set_timeout(c, 2000);
    for (int i = 0; i < 60000 / 2; i++) {
        if (version_of(c) >= k->at_version) {
            kill(k->pid, SIGKILL);
            k->killed = 1;
            break;
        }
        usleep(2000);
    }
    ps_client_close(c);
    return NULL;
}

static float *run(const char *dir, const char *mode, const char *tag, int kill_primary, size_t *n) {
    char ps[256];
    start_groups(mode, "2", ps, sizeof ps);
    const char *args[] = {"--model", mlp,      "--max-train", "3000", "--batch",
                          "16",      "--seed", "7",           NULL};
    job_spec j = {.kind = JOB_PSD, .workers = 2, .mode = mode, .ps = ps, .args = args, .tag = tag};
    killer k = {rep[0][0].endpoint, rep[0][0].pid, 30, 0};
    pthread_t t;
    if (kill_primary) ck_assert_int_eq(pthread_create(&t, NULL, kill_when_there, &k), 0);
    float *x = job_params(dir, &j, n);
    if (kill_primary) {
        pthread_join(t, NULL);
        ck_assert_msg(k.killed, "the job ended before the kill");
        ps_test_psd_kill(&rep[0][0]); /* reaps it */
        ck_assert(ps_test_file_has(rep[0][1].log, "took over as the primary"));
    }
    return x;
}

START_TEST(sync_job_survives_a_killed_primary_bit_for_bit) {
    char *dir = ps_test_mkdtemp();
    size_t n1 = 0, n2 = 0;
    float *whole = run(dir, "sync", "whole", 0, &n1);
    stop_groups();
    float *killed = run(dir, "sync", "killed", 1, &n2);
    ck_assert_uint_eq(n1, n2);
    size_t differ = 0;
    for (size_t i = 0; i < n1; i++)
        differ += memcmp(&whole[i], &killed[i], sizeof(float)) != 0;
    ck_assert_msg(differ == 0, "%zu of %zu values differ (max %g)", differ, n1,
                  max_abs_diff(whole, killed, n1));
    stop_groups();
    free(whole);
    free(killed);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

static void setup(void) {
    atexit(cleanup_at_exit);
    ps_test_children_die_with_me();
}

static Suite *make_suite(void) {
    snprintf(mlp, sizeof mlp, "%s/examples/mlp_sgd.json", ps_test_source_root());
    Suite *s = suite_create("replicas_job");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 240);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, sync_job_survives_a_killed_primary_bit_for_bit);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_main_needing("PSD PSWORKER", make_suite);
}
