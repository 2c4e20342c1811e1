/* Training that survives failures, with real processes and real kills
 * (SIGKILL, not cooperative), on 127.0.0.1:
 * 1. kill -9 one of 3 workers mid-epoch in sync mode: the job finishes,
 *    test accuracy >= 0.84, the shards log the removal;
 *    A killed worker started again rejoins and continues where the job is;
 * 2. kill -9 a psd mid-training and start it again with the same flags:
 *    training goes on from its checkpoint and ends at accuracy >= 0.84;
 * 6. backup workers: 3 workers, --replicas-to-aggregate 2, one slowed by
 *    --slow-ms: the steps do not wait for the slow one;
 * 7. bounded staleness: with --staleness 2 no applied gradient is more than
 *    2 steps stale (psd's counters); without it, some are.
 * It runs beside other tests (meson test --num-processes 2 on 2 cores): where it counts
 * the shards' removals exactly, a worker is removed only after LIVE_TIMEOUT of silence,
 * so that a slow start under load is not counted (the killed worker's removal takes that
 * long too: a wait, not CPU). */
#include <check.h>
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proc.h"
#include "ps.h"
#include "ps_error.h"
#include "stats.h"
#include "testutil.h"

/* --worker-timeout where a live worker must never be removed. psd expects every worker
 * from its own start: one that has not said Hello within --worker-timeout is removed
 * (and rejoins with its Hello). Under a heavy load psworker's start and data loading
 * took longer than the 4000 ms once used here, and each shard counted three removals
 * more than the killed worker's (also when this test ran alone). */
#define LIVE_TIMEOUT "20000"

static uint64_t version_of(const ps_test_psd *ps) {
    ps_stats h;
    uint64_t v = ps_test_shard_stats(ps->endpoint, &h)->version;
    ps_stats_free(&h);
    return v;
}

/* A shard and the version it should reach (ps_test_wait_until's context). */
typedef struct {
    const ps_test_psd *psd;
    uint64_t version;
} version_goal;

static int version_reached(void *ctx) {
    const version_goal *g = ctx;
    return version_of(g->psd) >= g->version;
}

/* Waits up to timeout_ms for psd to reach version; 1 if it did. */
static int wait_version(const ps_test_psd *psd, uint64_t version, int timeout_ms) {
    version_goal g = {psd, version};
    return ps_test_wait_until(version_reached, &g, timeout_ms, 20);
}

/* The shard has a checkpoint with the variables in it (the first one may be of the
 * empty shard at version 0, written before the chief created them), well into the job. */
static int checkpointed_well_into_the_job(void *ctx) {
    ps_stats h;
    ps_stats *st = ps_test_shard_stats(((const ps_test_psd *)ctx)->endpoint, &h);
    int ready = st->checkpoint_version >= 100 && st->version >= 150;
    ps_stats_free(&h);
    return ready;
}

/* A client's view of a shard's stats: some worker was removed. */
static int a_worker_was_removed(void *ctx) {
    ps_stats h;
    ck_assert_int_eq(ps_client_stats(ctx, 0, &h), PS_OK);
    uint64_t removed = h.workers_removed;
    ps_stats_free(&h);
    return removed > 0;
}

typedef struct {
    char dir[600], ps[300], summary[700], log[4][700];
    pid_t pid[4];
} job;

/* Starts worker i of n against j->ps with extra args (NULL-terminated). */
static void start_worker(job *j, int i, int n, const char *const *extra) {
    char idx[8], cnt[8];
    snprintf(idx, sizeof idx, "%d", i);
    snprintf(cnt, sizeof cnt, "%d", n);
    char log[sizeof j->log[i]];
    snprintf(log, sizeof log, "%s/worker%d.log", j->dir, i);
    memcpy(j->log[i], log, sizeof log);
    const char *argv[48] = {
        getenv("PSWORKER"), "--ps",  j->ps,       "--index", idx, "--workers", cnt,
        "--progress",       "plain", "--timeout", "120"};
    int k = 11;
    if (i == 0) {
        argv[k++] = "--summary";
        argv[k++] = j->summary;
    }
    for (int e = 0; extra && extra[e] && k < 46; e++)
        argv[k++] = extra[e];
    argv[k] = NULL;
    j->pid[i] = ps_test_spawn(argv, j->log[i]);
    ck_assert_int_gt(j->pid[i], 0);
}

static double summary_accuracy(const job *j) {
    FILE *f = fopen(j->summary, "r");
    ck_assert_msg(f != NULL, "no summary");
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *o = cJSON_Parse(buf);
    ck_assert_ptr_nonnull(o);
    double acc = cJSON_GetObjectItem(o, "test_accuracy")->valuedouble;
    cJSON_Delete(o);
    return acc;
}

static void job_init(job *j) {
    memset(j, 0, sizeof *j);
    char *d = ps_test_mkdtemp();
    snprintf(j->dir, sizeof j->dir, "%s", d);
    free(d);
    snprintf(j->summary, sizeof j->summary, "%s/summary.json", j->dir);
}

/* Waits for worker i; dumps its log when it failed. Returns its exit status. */
static int finish_worker(job *j, int i, int timeout_ms) {
    int st = ps_test_wait(j->pid[i], timeout_ms);
    j->pid[i] = 0;
    if (st != 0) ps_test_dump(j->log[i]);
    return st;
}

START_TEST(worker_killed_sync_job_finishes) {
    job j;
    job_init(&j);
    ps_test_psd psd[2];
    for (int i = 0; i < 2; i++) {
        const char *a[] = {
            "--shard", i ? "1" : "0", "--num-shards",     "2",          "--workers", "3",
            "--mode",  "sync",        "--worker-timeout", LIVE_TIMEOUT, NULL};
        ck_assert_int_eq(ps_test_psd_start(&psd[i], a, 10000), 0);
    }
    snprintf(j.ps, sizeof j.ps, "%s,%s", psd[0].endpoint, psd[1].endpoint);
    /* 3 x batch 32: 625 steps per epoch */
    const char *extra[] = {"--epochs", "2", "--batch", "32", NULL};
    for (int i = 0; i < 3; i++)
        start_worker(&j, i, 3, extra);
    ck_assert_msg(wait_version(&psd[0], 200, 60000), "training did not start");
    ck_assert_int_eq(kill(j.pid[2], SIGKILL), 0); /* mid-epoch 1 */
    ck_assert_int_eq(ps_test_wait(j.pid[2], 5000), 128 + SIGKILL);
    j.pid[2] = 0;
    /* removed when its connections close, not after --worker-timeout's 20 s */
    for (int i = 0; i < 2; i++)
        ck_assert_msg(ps_test_wait_file_has(psd[i].log, "worker 2 removed: its connection closed",
                                            10000, psd[i].pid),
                      "shard %d did not remove the killed worker within 10 s", i);
    ck_assert_int_eq(finish_worker(&j, 0, 180000), 0);
    ck_assert_int_eq(finish_worker(&j, 1, 30000), 0);
    double acc = summary_accuracy(&j);
    printf("worker killed: test accuracy %.4f\n", acc);
    ck_assert_msg(acc >= 0.84, "test accuracy %.4f < 0.84", acc);
    for (int i = 0; i < 2; i++) {
        ps_stats h;
        ps_stats *st = ps_test_shard_stats(psd[i].endpoint, &h);
        ck_assert_uint_eq(st->workers_removed, 1);
        ps_stats_free(&h);
        ck_assert_msg(ps_test_file_has(psd[i].log, "worker 2 removed"),
                      "shard %d logged no removal", i);
        ck_assert_int_eq(ps_test_psd_stop(&psd[i], 10000), 0);
    }
    ps_test_rmdir(j.dir);
}
END_TEST

/* A killed worker started again with the same flags rejoins under its index
 * (after the shards removed it) and continues at the job's current epoch and
 * step of its data shard instead of starting over. */
START_TEST(worker_restarted_rejoins_where_the_job_is) {
    job j;
    job_init(&j);
    ps_test_psd psd;
    const char *a[] = {"--workers", "2", "--mode", "sync", "--worker-timeout", LIVE_TIMEOUT, NULL};
    ck_assert_int_eq(ps_test_psd_start(&psd, a, 10000), 0);
    snprintf(j.ps, sizeof j.ps, "%s", psd.endpoint);
    const char *extra[] = {"--epochs", "2", NULL}; /* 469 steps per epoch */
    /* the chief takes >= 15 ms a step, so the job is still in epoch 2 when
     * worker 1 comes back, even under the sanitizers (alone, the chief would
     * otherwise finish the epoch in half a second) */
    const char *chief[] = {"--epochs", "2", "--slow-ms", "15", NULL};
    start_worker(&j, 0, 2, chief);
    start_worker(&j, 1, 2, extra);
    ck_assert_msg(wait_version(&psd, 520, 60000), "the job did not reach epoch 2");
    ck_assert_int_eq(kill(j.pid[1], SIGKILL), 0); /* in epoch 2 */
    ck_assert_int_eq(ps_test_wait(j.pid[1], 5000), 128 + SIGKILL);
    ck_assert_msg(ps_test_wait_file_has(psd.log, "worker 1 removed", 60000, psd.pid),
                  "the shard did not remove worker 1");
    char first[800];
    snprintf(first, sizeof first, "%s.first", j.log[1]);
    ck_assert_int_eq(rename(j.log[1], first), 0); /* the restart logs afresh */
    start_worker(&j, 1, 2, extra);                /* the same flags */
    ck_assert_int_eq(finish_worker(&j, 1, 120000), 0);
    ck_assert_int_eq(finish_worker(&j, 0, 120000), 0);
    ck_assert_msg(ps_test_file_has(psd.log, "worker 1 rejoined"), "no rejoin logged");
    ck_assert_msg(ps_test_file_has(j.log[1], "joining a running job: epoch 2"),
                  "the restarted worker did not continue in epoch 2");
    ck_assert_msg(!ps_test_file_has(j.log[1], "Epoch 1/2"), "the restarted worker redid epoch 1");
    ck_assert_double_ge(summary_accuracy(&j), 0.84);
    ck_assert_int_eq(ps_test_psd_stop(&psd, 10000), 0);
    ps_test_rmdir(j.dir);
}
END_TEST

START_TEST(psd_killed_restarts_from_checkpoint) {
    job j;
    job_init(&j);
    ps_test_psd psd[2];
    char ck[2][700];
    const char *args[2][16];
    for (int i = 0; i < 2; i++) {
        snprintf(ck[i], sizeof ck[i], "%s/ckpt%d", j.dir, i);
        const char *a[] = {
            "--shard", i ? "1" : "0", "--num-shards",     "2",   "--workers",          "2",
            "--mode",  "sync",        "--checkpoint-dir", ck[i], "--checkpoint-every", "1",
            NULL};
        memcpy(args[i], a, sizeof a);
        ck_assert_int_eq(ps_test_psd_start(&psd[i], args[i], 10000), 0);
    }
    snprintf(j.ps, sizeof j.ps, "%s,%s", psd[0].endpoint, psd[1].endpoint);
    const char *extra[] = {"--epochs", "2", "--retry-ms", "500", NULL};
    for (int i = 0; i < 2; i++)
        start_worker(&j, i, 2, extra);
    /* wait for a periodic checkpoint of shard 0, well into the job */
    ck_assert_msg(ps_test_wait_until(checkpointed_well_into_the_job, &psd[0], 60000, 20),
                  "no checkpoint of shard 0 well into the job");
    uint64_t before = version_of(&psd[0]);
    ck_assert_uint_ge(before, 150);
    ps_test_psd_kill(&psd[0]);
    /* psd stays down until a worker noticed: its requests time out, its probes go
     * unanswered and it reconnects with backoff (libps logs that through psworker) */
    ck_assert_msg(ps_test_wait_file_has(j.log[0], "does not answer", 30000, j.pid[0]),
                  "the chief did not notice that psd 0 was gone");
    ck_assert_int_eq(ps_test_psd_restart(&psd[0], args[0], 10000), 0);
    ck_assert_msg(ps_test_file_has(psd[0].log, "restored checkpoint"), "psd 0 did not restore");
    ck_assert_int_eq(finish_worker(&j, 0, 180000), 0);
    ck_assert_int_eq(finish_worker(&j, 1, 30000), 0);
    double acc = summary_accuracy(&j);
    printf("psd killed at version %llu: test accuracy %.4f\n", (unsigned long long)before, acc);
    ck_assert_msg(acc >= 0.84, "test accuracy %.4f < 0.84", acc);
    ck_assert_msg(ps_test_file_has(j.log[0], "restarted"), "the chief did not notice the restart");
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(ps_test_psd_stop(&psd[i], 10000), 0);
    ps_test_rmdir(j.dir);
}
END_TEST

START_TEST(backup_workers_do_not_wait_for_the_slow_one) {
    enum { STEPS = 40, SLOW_MS = 250 };
    job j;
    job_init(&j);
    ps_test_psd psd;
    const char *a[] = {"--workers", "3", "--mode", "sync", "--replicas-to-aggregate", "2", NULL};
    ck_assert_int_eq(ps_test_psd_start(&psd, a, 10000), 0);
    snprintf(j.ps, sizeof j.ps, "%s", psd.endpoint);
    /* the fast workers take 20 ms a step, so the slow one's pushes (one per
     * 250 ms) land while they still close steps: those are dropped */
    const char *fast[] = {"--epochs", "1",         "--max-steps", "40", "--max-test",
                          "500",      "--slow-ms", "20",          NULL};
    const char *slow[] = {"--epochs", "1", "--max-steps", "40", "--slow-ms", "250", NULL};
    /* The slow worker joins first: a worker that says Hello after the job has
     * moved on starts at the job's current step (as a restarted one does),
     * and would then have fewer steps to do. */
    start_worker(&j, 2, 3, slow);
    ck_assert_msg(ps_test_wait_file_has(psd.log, "hello from worker 2", 30000, psd.pid),
                  "the slow worker did not say Hello");
    long long t0 = ps_test_now_ms();
    start_worker(&j, 0, 3, fast);
    start_worker(&j, 1, 3, fast);
    /* The fast worker 1's time is counted from the fast workers' Hello, after they have
     * read the data (that start-up is the same either way and takes seconds under ASan).
     * Not the chief's: at the epoch's end it waits up to 5 s for the slow worker's
     * job-wide metrics, by design. */
    ck_assert_msg(ps_test_wait_file_has(psd.log, "hello from worker 0", 60000, psd.pid) &&
                      ps_test_wait_file_has(psd.log, "hello from worker 1", 60000, psd.pid),
                  "the fast workers did not say Hello");
    long long t_hello = ps_test_now_ms();
    ck_assert_int_eq(finish_worker(&j, 1, 60000), 0);
    long long fast_ms = ps_test_now_ms() - t_hello;
    ck_assert_int_eq(finish_worker(&j, 0, 60000), 0);
    ck_assert_int_eq(finish_worker(&j, 2, 60000), 0);
    long long all_ms = ps_test_now_ms() - t0;
    ps_stats h;
    ps_stats *st = ps_test_shard_stats(psd.endpoint, &h);
    printf("backup workers: fast worker 1 done %lld ms after its Hello, slow worker done at "
           "%lld ms; version %llu, dropped %llu\n",
           fast_ms, all_ms, (unsigned long long)st->version,
           (unsigned long long)st->dropped_pushes);
    /* waiting for the slow worker would take >= STEPS * SLOW_MS = 10 s after the Hello; a
     * fast worker's 40 steps take about 1 s there */
    ck_assert_msg(fast_ms < STEPS * SLOW_MS * 3 / 4, "fast worker 1 took %lld ms", fast_ms);
    ck_assert_uint_ge(all_ms, STEPS * SLOW_MS);
    ck_assert_uint_ge(st->version, STEPS);
    ck_assert_uint_gt(st->dropped_pushes, 0); /* the slow worker's late pushes */
    ps_stats_free(&h);
    ck_assert_int_eq(ps_test_psd_stop(&psd, 10000), 0);
    ps_test_rmdir(j.dir);
}
END_TEST

/* Runs 3 async workers (worker 2 slow) against one psd; returns its max_staleness. */
static uint64_t async_staleness(const char *staleness, uint64_t *waits) {
    job j;
    job_init(&j);
    ps_test_psd psd;
    const char *a[] = {"--workers", "3", "--mode", "async", staleness ? "--staleness" : NULL,
                       staleness,   NULL};
    ck_assert_int_eq(ps_test_psd_start(&psd, a, 10000), 0);
    snprintf(j.ps, sizeof j.ps, "%s", psd.endpoint);
    const char *fast[] = {"--epochs", "1", "--max-steps", "30", "--max-test", "500", NULL};
    const char *slow[] = {"--epochs", "1", "--max-steps", "30", "--slow-ms", "60", NULL};
    start_worker(&j, 0, 3, fast);
    start_worker(&j, 1, 3, fast);
    start_worker(&j, 2, 3, slow);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(finish_worker(&j, i, 60000), 0);
    ps_stats h;
    ps_stats *st = ps_test_shard_stats(psd.endpoint, &h);
    uint64_t worst = st->max_staleness;
    *waits = st->staleness_waits;
    ck_assert_uint_eq(st->pushes_applied, 90);
    ps_stats_free(&h);
    ck_assert_int_eq(ps_test_psd_stop(&psd, 10000), 0);
    ps_test_rmdir(j.dir);
    return worst;
}

START_TEST(bounded_staleness) {
    uint64_t waits = 0, free_waits = 0;
    uint64_t bounded = async_staleness("2", &waits);
    uint64_t unbounded = async_staleness(NULL, &free_waits);
    printf("staleness: max %llu with --staleness 2 (%llu waits), %llu without\n",
           (unsigned long long)bounded, (unsigned long long)waits, (unsigned long long)unbounded);
    ck_assert_uint_le(bounded, 2);
    ck_assert_uint_gt(waits, 0);
    ck_assert_uint_gt(unbounded, 2); /* the counter sees staleness when nothing bounds it */
    ck_assert_uint_eq(free_waits, 0);
}
END_TEST

/* psd's own stall is not the workers' silence: a psd stopped (SIGSTOP) for
 * three worker timeouts while a live worker heartbeats finds, once it runs
 * again, that worker's beats still unread in its socket; it must not remove
 * it (before, the membership timer ran first and removed it). The worker is this
 * process's heartbeat thread: 4 s of silence (not 1 s) before a removal leaves it room
 * on a machine that another test loads. */
START_TEST(psd_stall_does_not_remove_live_workers) {
    enum { TIMEOUT_MS = 4000 };
    ps_test_psd psd;
    char timeout[16];
    snprintf(timeout, sizeof timeout, "%d", TIMEOUT_MS);
    const char *a[] = {"--workers", "1", "--mode", "sync", "--worker-timeout", timeout, NULL};
    ck_assert_int_eq(ps_test_psd_start(&psd, a, 10000), 0);
    ps_client *c;
    char err[256];
    const char *eps[1] = {psd.endpoint};
    ck_assert_int_eq(ps_client_open(&c, eps, 1, 0, 1, err, sizeof err), PS_OK);
    ps_client_set_timeout(c, 20000);
    int rc = ps_client_hello(c, NULL, NULL); /* starts the heartbeat thread (every 1000 ms) */
    ck_assert_msg(rc == PS_OK, "hello: %s", ps_client_error(c));
    for (int round = 0; round < 2; round++) {
        ck_assert_int_eq(kill(psd.pid, SIGSTOP), 0);
        ps_test_nap_ms(3 * TIMEOUT_MS); /* the stall itself, not a wait for a condition */
        ck_assert_int_eq(kill(psd.pid, SIGCONT), 0);
        /* a few membership ticks (TIMEOUT_MS / 4) after the stall: the worker must stay in
         * all along (a duration the scenario needs, not a wait for a condition) */
        long long until = ps_test_now_ms() + TIMEOUT_MS;
        while (ps_test_now_ms() < until) {
            ps_stats h;
            rc = ps_client_stats(c, 0, &h);
            ck_assert_msg(rc == PS_OK, "stats: %s", ps_client_error(c));
            uint64_t removed = h.workers_removed;
            ps_stats_free(&h);
            if (removed) ps_test_dump(psd.log);
            ck_assert_msg(removed == 0, "round %d: psd removed a live worker after its own stall",
                          round);
            ps_test_nap_ms(100); /* pacing between checks */
        }
    }
    ps_client_close(c); /* the heartbeats stop: now the worker is removed */
    ps_client *q;
    ck_assert_int_eq(ps_client_open(&q, eps, 1, 0, 1, err, sizeof err), PS_OK);
    int removed = ps_test_wait_until(a_worker_was_removed, q, 30000, 50);
    ps_stats h;
    ck_assert_int_eq(ps_client_stats(q, 0, &h), PS_OK);
    uint64_t n_removed = h.workers_removed;
    ps_stats_free(&h);
    ps_client_close(q);
    ck_assert_msg(removed && n_removed == 1, "a silent worker was not removed (%llu)",
                  (unsigned long long)n_removed);
    ck_assert_int_eq(ps_test_psd_stop(&psd, 10000), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 400);
    tcase_add_test(tc, worker_killed_sync_job_finishes);
    tcase_add_test(tc, worker_restarted_rejoins_where_the_job_is);
    tcase_add_test(tc, psd_killed_restarts_from_checkpoint);
    tcase_add_test(tc, backup_workers_do_not_wait_for_the_slow_one);
    tcase_add_test(tc, bounded_staleness);
    tcase_add_test(tc, psd_stall_does_not_remove_live_workers);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
