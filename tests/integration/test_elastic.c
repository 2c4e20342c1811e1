/* Elastic jobs through real psd, psworker and psctl processes on 127.0.0.1 (docs/TRAINING.md,
 * "Workers that come and go"):
 * - a third worker joins a running 2-worker sync job (--workers 3 --workers-min 2) and its
 *   pushes count from at most 2 steps after its Hello (psd's push count at the end);
 * - re-sharding: with 2 live of 3 slots (workers 0 and 2), each epoch's records are read
 *   exactly once between them (the digests they log add up to the whole set's), and the
 *   epoch keeps the 3-slot job's steps;
 * - psctl local --workers-max and psctl scale on a running job: up to 3, refusals at 4
 *   and 1, down to 2 (the worker leaves with a Goodbye), the job ends well; and
 *   psctl local's refusals of inconsistent --workers/--workers-min/--workers-max;
 * - accuracy: an elastic job (a worker joining and leaving) ends within 0.01 test accuracy
 *   of the fixed 3-worker job on the same data, steps and global batch. */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "order.h"
#include "proc.h"
#include "ps.h"
#include "stats.h"
#include "testutil.h"

#define MAX_TRAIN 3000 /* 1000 per slot of 3, batch 50: 20 steps per epoch */
#define BATCH "50"
#define STEPS_PER_EPOCH 20

#define ck_assert_contains(hay, needle)                                                            \
    ck_assert_msg(strstr((hay), (needle)) != NULL, "wanted \"%s\" in:\n%s", (needle), (hay))

static ps_test_psd psd;
static char *dir;

static void setup_dir(void) {
    ps_test_children_die_with_me();
    dir = ps_test_mkdtemp();
}

static void setup_psd(void) {
    setup_dir();
    const char *args[] = {"--workers", "3", "--mode", "sync", "--workers-min", "2", NULL};
    ck_assert_int_eq(ps_test_psd_start(&psd, args, 10000), 0);
}

static void teardown(void) {
    if (psd.pid) ps_test_psd_stop(&psd, 5000);
    psd.pid = 0;
    ps_test_rmdir(dir);
    free(dir);
}

/* Starts psworker `index` of 3 slots, --elastic yes, on the test's shard; its log in
 * log[n]. slow_ms paces its steps (so that another can join a running job). */
static pid_t start_worker(unsigned index, const char *epochs, const char *slow_ms, char *log,
                          size_t n) {
    char idx[16];
    snprintf(idx, sizeof idx, "%u", index);
    snprintf(log, n, "%s/worker-%u.log", dir, index);
    const char *argv[] = {getenv("PSWORKER"),
                          "--ps",
                          psd.endpoint,
                          "--index",
                          idx,
                          "--workers",
                          "3",
                          "--elastic",
                          "yes",
                          "--data",
                          ps_test_data_dir(),
                          "--max-train",
                          "3000",
                          "--max-test",
                          "200",
                          "--batch",
                          BATCH,
                          "--epochs",
                          epochs,
                          "--slow-ms",
                          slow_ms,
                          "--progress",
                          "none",
                          "--timeout",
                          "60",
                          NULL};
    pid_t pid = ps_test_spawn(argv, log);
    ck_assert_int_gt(pid, 0);
    return pid;
}

static void expect_exit(pid_t pid, const char *log, int want) {
    int st = ps_test_wait(pid, 90000);
    if (st != want) ps_test_dump(log);
    ck_assert_int_eq(st, want);
}

static ps_stats *stats_now(ps_stats *hold) {
    return ps_test_shard_stats(psd.endpoint, hold);
}

static int version_at_least(void *want) {
    ps_stats h;
    uint64_t v = stats_now(&h)->version;
    ps_stats_free(&h);
    return v >= *(uint64_t *)want;
}

/* The step a joiner started at: its "joining a running job: epoch E, step S of N" line. */
static uint64_t join_clock(const char *log) {
    const char *at = strstr(ps_test_text(log), "joining a running job: epoch ");
    ck_assert_msg(at != NULL, "no join line in %s", log);
    unsigned e = 0, s = 0, n = 0;
    ck_assert_int_eq(sscanf(at, "joining a running job: epoch %u, step %u of %u", &e, &s, &n), 3);
    ck_assert_uint_eq(n, STEPS_PER_EPOCH);
    return (uint64_t)(e - 1) * n + s;
}

/* Workers 0 and 1 run a 4-epoch job (80 steps); worker 2 joins it at step 5 or later and
 * runs to its end with them. Each push psd applied is one worker's for one step, so with
 * worker 2 counted from step J on: pushes = 2 x 80 + (80 - J). J is at most 2 steps past
 * the step its Hello found. */
START_TEST(joiner_counts_within_two_steps_of_its_hello) {
    char log[3][700];
    pid_t pid[3];
    for (unsigned w = 0; w < 2; w++)
        pid[w] = start_worker(w, "4", "60", log[w], sizeof log[w]);
    uint64_t five = 5;
    ck_assert_msg(ps_test_wait_until(version_at_least, &five, 60000, 5), "the job did not start");
    pid[2] = start_worker(2, "4", "60", log[2], sizeof log[2]);
    for (unsigned w = 0; w < 3; w++)
        expect_exit(pid[w], log[w], 0);
    uint64_t hello = join_clock(log[2]), total = 4 * STEPS_PER_EPOCH;
    ck_assert_uint_ge(hello, 5);
    ck_assert_msg(hello < total - STEPS_PER_EPOCH, "worker 2 joined too late (step %llu)",
                  (unsigned long long)hello);
    ps_stats h;
    ps_stats *st = stats_now(&h);
    ck_assert_uint_eq(st->version, total);
    ck_assert_uint_le(st->pushes_applied, 3 * total); /* none counted twice */
    uint64_t from = 3 * total - st->pushes_applied;   /* the first step counting worker 2 */
    ck_assert_msg(from >= hello && from <= hello + 2,
                  "worker 2 said Hello at step %llu but counted from step %llu (%llu pushes)",
                  (unsigned long long)hello, (unsigned long long)from,
                  (unsigned long long)st->pushes_applied);
    ps_stats_free(&h);
    ck_assert(ps_test_file_has(psd.log, "worker 2 joined (3 live)"));
    /* it read a share of 3 from where it joined; the next epoch, all three did */
    ck_assert(ps_test_file_has(log[2], "share 2 of 3: "));
    char want[80];
    snprintf(want, sizeof want, "epoch %llu: 3 live workers, each reads 1/3 of the data",
             (unsigned long long)(hello / STEPS_PER_EPOCH + 2));
    ck_assert_msg(ps_test_file_has(log[0], want), "no '%s' in the chief's log", want);
}
END_TEST

/* Sum of ps_order_rand over records 0..n-1: the digest of the whole set (pipeline.h). */
static uint64_t set_digest(size_t n) {
    uint64_t sum = 0;
    for (size_t r = 0; r < n; r++) {
        uint64_t s = r;
        sum += ps_order_rand(&s);
    }
    return sum;
}

/* This epoch's "share R of C: N records from batch B (digest D)" line of a worker's log. */
static void share_line(const char *log, unsigned epoch, unsigned *rank, unsigned *count, size_t *n,
                       uint64_t *digest) {
    char key[64];
    snprintf(key, sizeof key, "epoch %u: share ", epoch);
    const char *at = strstr(ps_test_text(log), key);
    ck_assert_msg(at != NULL, "no '%s' in %s", key, log);
    unsigned long long d = 0;
    size_t b = 1;
    ck_assert_int_eq(sscanf(at + strlen(key), "%u of %u: %zu records from batch %zu (digest %llx)",
                            rank, count, n, &b, &d),
                     5);
    ck_assert_uint_eq(b, 0);
    *digest = d;
}

/* Two live of three slots, workers 0 and 2 (ranks 0 and 1): each epoch every record is
 * read once between them, in the 3-slot job's 20 steps. */
START_TEST(epoch_reads_each_sample_once_among_the_live) {
    char log[3][700];
    pid_t pid[3];
    pid[0] = start_worker(0, "2", "0", log[0], sizeof log[0]);
    pid[2] = start_worker(2, "2", "0", log[2], sizeof log[2]);
    expect_exit(pid[0], log[0], 0);
    expect_exit(pid[2], log[2], 0);
    for (unsigned e = 1; e <= 2; e++) {
        unsigned r0, c0, r2, c2;
        size_t n0, n2;
        uint64_t d0, d2;
        share_line(log[0], e, &r0, &c0, &n0, &d0);
        share_line(log[2], e, &r2, &c2, &n2, &d2);
        ck_assert_uint_eq(r0, 0);
        ck_assert_uint_eq(r2, 1);
        ck_assert_uint_eq(c0, 2);
        ck_assert_uint_eq(c2, 2);
        ck_assert_uint_eq(n0 + n2, MAX_TRAIN);
        ck_assert_msg(d0 + d2 == set_digest(MAX_TRAIN),
                      "epoch %u: the shares' digests do not add up to the set's", e);
        char want[64];
        snprintf(want, sizeof want, "epoch %u: 2 live workers, each reads 1/2 of the data", e);
        ck_assert(ps_test_file_has(log[0], want));
    }
    ps_stats h;
    ck_assert_uint_eq(stats_now(&h)->version, 2 * STEPS_PER_EPOCH);
    ps_stats_free(&h);
}
END_TEST

/* ---- accuracy ---- */

/* The chief's "test accuracy: A" line. */
static double test_accuracy(const char *log) {
    const char *at = strstr(ps_test_text(log), "test accuracy: ");
    ck_assert_msg(at != NULL, "no test accuracy in %s", log);
    return atof(at + strlen("test accuracy: "));
}

/* psworker `index` of 3 slots for the accuracy runs (MLP, 30000 samples, 3 epochs of 313
 * steps, global batch 96), on the endpoint ep; --elastic yes when elastic. */
static pid_t accuracy_worker(const char *ep, unsigned index, int elastic, const char *tag,
                             char *log, size_t n) {
    char idx[16];
    snprintf(idx, sizeof idx, "%u", index);
    snprintf(log, n, "%s/%s-%u.log", dir, tag, index);
    const char *argv[] = {getenv("PSWORKER"),
                          "--ps",
                          ep,
                          "--index",
                          idx,
                          "--workers",
                          "3",
                          "--elastic",
                          elastic ? "yes" : "no",
                          "--data",
                          ps_test_data_dir(),
                          "--max-train",
                          "30000",
                          "--batch",
                          "32",
                          "--epochs",
                          "3",
                          "--seed",
                          "7",
                          "--progress",
                          "none",
                          "--timeout",
                          "60",
                          NULL};
    pid_t pid = ps_test_spawn(argv, log);
    ck_assert_int_gt(pid, 0);
    return pid;
}

/* An elastic job (2 workers of 3 slots; the third joins after step 200 and leaves with
 * SIGTERM after step 600) ends within 0.01 test accuracy of the fixed 3-worker job: every
 * epoch reads the data once among the live workers at the same global batch and steps. */
START_TEST(elastic_job_accuracy_matches_fixed) {
    char log[3][700];
    pid_t pid[3];
    ps_test_psd fixed;
    const char *fargs[] = {"--workers", "3", "--mode", "sync", NULL};
    ck_assert_int_eq(ps_test_psd_start(&fixed, fargs, 10000), 0);
    for (unsigned w = 0; w < 3; w++)
        pid[w] = accuracy_worker(fixed.endpoint, w, 0, "fixed", log[w], sizeof log[w]);
    for (unsigned w = 0; w < 3; w++)
        expect_exit(pid[w], log[w], 0);
    ck_assert_int_eq(ps_test_psd_stop(&fixed, 5000), 0);
    double want = test_accuracy(log[0]);

    for (unsigned w = 0; w < 2; w++)
        pid[w] = accuracy_worker(psd.endpoint, w, 1, "elastic", log[w], sizeof log[w]);
    uint64_t join_at = 200, leave_at = 600;
    ck_assert(ps_test_wait_until(version_at_least, &join_at, 60000, 5));
    pid[2] = accuracy_worker(psd.endpoint, 2, 1, "elastic", log[2], sizeof log[2]);
    ck_assert(ps_test_wait_until(version_at_least, &leave_at, 60000, 5));
    ck_assert_int_eq(kill(pid[2], SIGTERM), 0);
    expect_exit(pid[2], log[2], 128 + SIGTERM);
    for (unsigned w = 0; w < 2; w++)
        expect_exit(pid[w], log[w], 0);
    ck_assert(ps_test_file_has(log[2], "joining a running job"));
    ck_assert(ps_test_file_has(log[2], "stopped by SIGTERM at step"));
    ck_assert(ps_test_file_has(psd.log, "worker 2 finished"));
    double got = test_accuracy(log[0]);
    printf("test accuracy: fixed 3 workers %.4f, elastic 2-3-2 workers %.4f\n", want, got);
    ck_assert_msg(fabs(got - want) <= 0.01, "elastic %.4f, fixed %.4f", got, want);
}
END_TEST

/* ---- psctl ---- */

/* Runs psctl with args (NULL-ended, after "psctl") to its end; its output into out. */
static int run_psctl(const char *const *args, const char *out) {
    const char *argv[32] = {getenv("PSCTL")};
    size_t k = 1;
    for (; args[k - 1] && k < 31; k++)
        argv[k] = args[k - 1];
    argv[k] = NULL;
    return ps_test_run_to(argv, out, 30000);
}

static int scale_to(const char *k, const char *job, const char *out) {
    const char *args[] = {"scale", "--workers", k, job, NULL};
    return run_psctl(args, out);
}

typedef struct {
    const char *job, *out;
} scale_ctx;

/* The job answers (it is running, with 2 workers). */
static int job_answers(void *ctx) {
    scale_ctx *c = ctx;
    return scale_to("2", c->job, c->out) == 0;
}

/* An elastic psctl local job of 2 workers in 3 slots: scaled up to 3 (worker 2 trains),
 * refused at 4 and 1, scaled down to 2 (worker 2 leaves after its step with a Goodbye),
 * and the job ends well. */
START_TEST(psctl_scale_up_and_down) {
    char out[700], local_log[700], pid_s[32];
    snprintf(local_log, sizeof local_log, "%s/local.log", dir);
    snprintf(out, sizeof out, "%s/scale.log", dir);
    const char *argv[] = {getenv("PSCTL"),
                          "local",
                          "--ps",
                          "1",
                          "--workers",
                          "2",
                          "--workers-min",
                          "2",
                          "--workers-max",
                          "3",
                          "--mode",
                          "sync",
                          "--epochs",
                          "4",
                          "--batch",
                          BATCH,
                          "--transport",
                          "tcp",
                          "--",
                          "--data",
                          ps_test_data_dir(),
                          "--max-train",
                          "3000",
                          "--max-test",
                          "200",
                          "--slow-ms",
                          "40",
                          NULL};
    pid_t pid = ps_test_spawn(argv, local_log);
    ck_assert_int_gt(pid, 0);
    snprintf(pid_s, sizeof pid_s, "%d", (int)pid);
    scale_ctx ctx = {pid_s, out};
    ck_assert_msg(ps_test_wait_until(job_answers, &ctx, 30000, 50), "psctl scale got no answer");
    ck_assert_contains(ps_test_text(out), "the job has 2 workers already");
    ck_assert_int_eq(scale_to("3", pid_s, out), 0);
    ck_assert_contains(ps_test_text(out), "started worker 2: 3 workers");
    ck_assert_msg(ps_test_wait_file_has(local_log, "[worker 2]", 30000, pid), "no worker 2");
    ck_assert_msg(ps_test_wait_file_has(local_log, "share 2 of 3", 30000, pid),
                  "worker 2 read no share");
    ck_assert_int_eq(scale_to("4", pid_s, out), 1);
    ck_assert_contains(ps_test_text(out), "--workers 4 is above the job's 3 slots");
    ck_assert_int_eq(scale_to("1", pid_s, out), 1);
    ck_assert_contains(ps_test_text(out), "--workers 1 is below the job's --workers-min 2");
    ck_assert_int_eq(scale_to("2", pid_s, out), 0);
    ck_assert_contains(ps_test_text(out), "stopping worker 2");
    int st = ps_test_wait(pid, 90000);
    if (st != 0) ps_test_dump(local_log);
    ck_assert_int_eq(st, 0);
    const char *t = ps_test_text(local_log);
    ck_assert_contains(t, "stopped by SIGTERM at step");
    ck_assert_contains(t, "worker 2 finished (2 live)"); /* psd: its Goodbye */
    ck_assert_contains(t, "worker 2 left the job (psctl scale; exit status 143): 2 workers");
    ck_assert_contains(t, "job finished");
    /* the run directory (and its control socket) is gone with the job */
    ck_assert_int_eq(scale_to("2", pid_s, out), 1);
    ck_assert_contains(ps_test_text(out), "no elastic psctl local job of pid");
}
END_TEST

/* psctl local refuses the combinations that make no elastic job. */
START_TEST(psctl_local_refuses_inconsistent_sizes) {
    static const struct {
        const char *args[16];
        const char *why;
    } cases[] = {
        {{"local", "--ps", "1", "--mode", "sync", "--workers", "2", "--workers-max", "3", NULL},
         "--workers-max makes the job elastic: it needs --workers-min M too"},
        {{"local", "--ps", "1", "--mode", "sync", "--workers", "4", "--workers-min", "2",
          "--workers-max", "3", NULL},
         "--workers 4 is more than --workers-max 3"},
        {{"local", "--ps", "1", "--mode", "sync", "--workers", "1", "--workers-min", "2",
          "--workers-max", "3", NULL},
         "--workers-min 2 is more than the 1 workers started"},
        {{"local", "--ps", "1", "--mode", "async", "--workers", "2", "--workers-min", "2",
          "--workers-max", "3", NULL},
         "--workers-min applies to --mode sync only"},
        {{"local", "--strategy", "mirrored", "--workers", "2", "--workers-max", "3", NULL},
         "--workers-max applies to --strategy parameter_server only"},
        {{"scale", "7", NULL}, "--workers K is required"},
        {{"scale", "--workers", "2", NULL}, "JOB (psctl local's pid or run directory) is missing"},
    };
    char out[700];
    snprintf(out, sizeof out, "%s/refused.log", dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        remove(out);
        ck_assert_int_eq(run_psctl(cases[i].args, out), 2);
        ck_assert_msg(ps_test_file_has(out, cases[i].why), "case %zu: want '%s', got:\n%s", i,
                      cases[i].why, ps_test_text(out));
    }
    /* a directory that holds no job */
    ck_assert_int_eq(scale_to("2", dir, out), 1);
    ck_assert(ps_test_file_has(out, "is not a job's control socket"));
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("elastic");
    TCase *tc = tcase_create("workers");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup_psd, teardown);
    tcase_add_test(tc, joiner_counts_within_two_steps_of_its_hello);
    tcase_add_test(tc, epoch_reads_each_sample_once_among_the_live);
    tcase_add_test(tc, elastic_job_accuracy_matches_fixed);
    suite_add_tcase(s, tc);
    tc = tcase_create("psctl");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup_dir, teardown);
    tcase_add_test(tc, psctl_scale_up_and_down);
    tcase_add_test(tc, psctl_local_refuses_inconsistent_sizes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_main_needing("PSD PSWORKER PSCTL", make_suite);
}
