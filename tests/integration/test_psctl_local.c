/* Integration tests for `psctl local`: fake psd/psworker shell scripts drive the
 * supervisor through success, failures, signals and deadlines; one test uses the real binaries. */
#include "kernels.h"
#include "run.h"
#include "testutil.h"

#include <check.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- fake binaries ------------------------------------------------------------- */

/* Fake psd: records its pid, writes its ready file (unless $FAKE_PSD_NOREADY names its
 * shard), exits 4 after a moment if $FAKE_PSD_DIE names it, else waits for SIGTERM. */
static const char fake_psd[] =
    "#!/bin/sh\n"
    "echo $$ > \"$FAKE_DIR/pid.psd.$$\"\n"
    "ready=''; shard=''\n"
    "while [ $# -gt 0 ]; do\n"
    "  case \"$1\" in --ready-file) ready=\"$2\"; shift;; --shard) shard=\"$2\"; shift;; esac\n"
    "  shift\n"
    "done\n"
    "trap 'echo \"psd $shard got SIGTERM\"; exit 0' TERM\n"
    "echo \"psd $shard listening parent=$PS_PARENT_PID\"\n"
    "echo \"psd $shard log on stderr\" >&2\n"
    "if [ \"$FAKE_PSD_NOREADY\" != \"$shard\" ]; then\n"
    "  echo \"127.0.0.1:$((21000 + shard))\" > \"$ready.tmp\" && mv \"$ready.tmp\" \"$ready\"\n"
    "fi\n"
    "if [ \"$FAKE_PSD_DIE\" = \"$shard\" ]; then sleep 0.3; exit 4; fi\n"
    "sleep 1000 &\n"
    "echo $! > \"$FAKE_DIR/pid.sleep.$!\"\n"
    "wait $!\n"
    "exit 0\n";

/* Fake psworker: records its pid, echoes its arguments and CUDA_VISIBLE_DEVICES, prints
 * a progress line redrawn
 * with '\r', a stderr line and an unterminated line; then exits 3 if --fail-index
 * names it, hangs if --hang is given, or exits 0. */
static const char fake_worker[] =
    "#!/bin/sh\n"
    "echo $$ > \"$FAKE_DIR/pid.worker.$$\"\n"
    "echo \"args: $*\"\n"
    "echo \"cuda_visible: ${CUDA_VISIBLE_DEVICES-unset}\"\n"
    "idx=''; fail=''; hang=''\n"
    "while [ $# -gt 0 ]; do\n"
    "  case \"$1\" in --index) idx=\"$2\"; shift;; --fail-index) fail=\"$2\"; shift;;\n"
    "    --hang) hang=1;; esac\n"
    "  shift\n"
    "done\n"
    "printf 'epoch 1 10%%\\repoch 1 50%%\\repoch 1 done\\n'\n"
    "echo \"worker $idx log on stderr\" >&2\n"
    "printf 'no newline at the end'\n"
    "if [ \"$fail\" = \"$idx\" ]; then exit 3; fi\n"
    "if [ -n \"$hang\" ]; then\n"
    "  sleep 1000 &\n"
    "  echo $! > \"$FAKE_DIR/pid.sleep.$!\"\n"
    "  echo \"worker $idx hanging\" >&2\n"
    "  wait $!\n"
    "fi\n"
    "exit 0\n";

static char *tdir; /* this test's temp dir: scripts, pid files, summary */
static char fake_psd_path[4096], fake_worker_path[4096];

static void write_script(char *path, size_t n, const char *name, const char *text) {
    snprintf(path, n, "%s/%s", tdir, name);
    ck_assert_int_eq(ps_test_write_file(path, text, strlen(text)), 0);
    ck_assert_int_eq(chmod(path, 0755), 0);
}

/* ---- processes (the runner is the kit's, run.h) ---------------------------------- */

static int count_one(pid_t pid) {
    (void)pid;
    return 1;
}

/* Calls fn(pid) for every pid recorded in the temp dir; returns how many fn counted. */
static int for_each_fake(int (*fn)(pid_t)) {
    return ps_test_for_each_recorded(tdir, fn);
}

/* Waits (up to 3 s) until no recorded fake is alive; returns how many still are. */
static int fakes_alive_after_wait(void) {
    return ps_test_recorded_alive_after_wait(tdir, 3000);
}

/* Runs psctl with the fakes as PSD/PSWORKER (plus extra env), bounded by 30 s; act (may be
 * NULL) signals it once its markers appear. */
static void run_psctl(const char *const *args, const char *const *env, ps_test_signal_when *act,
                      ps_test_run_result *r) {
    const char *exe = getenv("PSCTL");
    ck_assert_msg(exe != NULL, "PSCTL is not set");
    char e_psd[4200], e_worker[4200], e_dir[4200];
    snprintf(e_psd, sizeof e_psd, "PSD=%s", fake_psd_path);
    snprintf(e_worker, sizeof e_worker, "PSWORKER=%s", fake_worker_path);
    snprintf(e_dir, sizeof e_dir, "FAKE_DIR=%s", tdir);
    const char *all_env[32] = {e_psd, e_worker, e_dir, "PS_PARENT_PID="};
    int n = 4;
    for (const char *const *e = env; e && *e && n < 31; e++)
        all_env[n++] = *e;
    all_env[n] = NULL;
    ps_test_run(exe, args, all_env, 30.0, act ? ps_test_signal_when_seen : NULL, act, r);
}

/* Every line of text starts with one of the prefixes. */
static void assert_prefixed(const char *text, const char *const *prefixes) {
    const char *line = text;
    while (*line) {
        const char *nl = strchr(line, '\n');
        int ok = 0;
        for (const char *const *p = prefixes; *p; p++)
            if (strncmp(line, *p, strlen(*p)) == 0) ok = 1;
        ck_assert_msg(ok, "unprefixed line: %.*s", (int)(nl ? nl - line : (long)strlen(line)),
                      line);
        if (!nl) break;
        line = nl + 1;
    }
}

#define ck_assert_contains(hay, needle)                                                            \
    ck_assert_msg(strstr((hay), (needle)) != NULL, "missing \"%s\" in:\n%s", (needle), (hay))

/* ---- fixture ------------------------------------------------------------------- */

static void cleanup(void) {
    if (!tdir) return;
    for_each_fake(ps_test_kill_if_alive);
    ps_test_reap_all();
    ps_test_rmdir(tdir);
    free(tdir);
    tdir = NULL;
}

static void setup(void) {
    static int registered;
    if (!registered) {
        atexit(cleanup); /* also runs when a failed assertion ends the test process */
        registered = 1;
    }
    prctl(PR_SET_CHILD_SUBREAPER, 1); /* orphaned fakes come to us, so we can reap them */
    tdir = ps_test_mkdtemp();
    ck_assert_ptr_nonnull(tdir);
    write_script(fake_psd_path, sizeof fake_psd_path, "fake-psd", fake_psd);
    write_script(fake_worker_path, sizeof fake_worker_path, "fake-worker", fake_worker);
}

static void teardown(void) {
    cleanup();
}

/* ---- tests --------------------------------------------------------------------- */

START_TEST(test_happy_path_prefixes_and_sigterm) {
    char summary[4200];
    snprintf(summary, sizeof summary, "%s/summary.json", tdir);
    const char *args[] = {
        "psctl", "local",        "--ps", "2",         "--workers", "2",      "--mode",
        "sync",  "--epochs",     "3",    "--summary", summary,     "--seed", "7",
        "--",    "--extra-flag", NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);

    char parent[64];
    snprintf(parent, sizeof parent, "[psd 0] psd 0 listening parent=%d\n", (int)r.pid);
    ck_assert_contains(r.out, parent);
    ck_assert_contains(r.out, "[psd 1] psd 1 listening");
    ck_assert_contains(r.err, "[psd 1] psd 1 log on stderr\n");
    ck_assert_contains(r.out, "[worker 0] args: --ps 127.0.0.1:21000,127.0.0.1:21001 --index 0 "
                              "--workers 2 --epochs 3 --seed 7 --summary ");
    ck_assert_contains(r.out, "[worker 1] args: --ps 127.0.0.1:21000,127.0.0.1:21001 --index 1 "
                              "--workers 2 --epochs 3 --seed 7 --device cpu --progress plain "
                              "--extra-flag\n");
    ck_assert_contains(r.out, "--progress plain --extra-flag\n");
    /* '\r' ends a line when stdout is not a terminal. */
    ck_assert_contains(r.out, "[worker 0] epoch 1 10%\n[worker 0] epoch 1 50%\n"
                              "[worker 0] epoch 1 done\n");
    ck_assert_contains(r.out, "[worker 1] no newline at the end\n");
    ck_assert_contains(r.err, "[worker 1] worker 1 log on stderr\n");
    ck_assert_contains(r.out, "[psd 0] psd 0 got SIGTERM\n");
    ck_assert_contains(r.out, "[psd 1] psd 1 got SIGTERM\n");
    ck_assert_contains(r.err, "psctl: job finished: 2 ps, 2 workers, mode sync\n");

    const char *out_prefixes[] = {"[psd 0] ", "[psd 1] ", "[worker 0] ", "[worker 1] ", NULL};
    const char *err_prefixes[] = {"[psd 0] ",    "[psd 1] ", "[worker 0] ",
                                  "[worker 1] ", "psctl: ",  NULL};
    assert_prefixed(r.out, out_prefixes);
    assert_prefixed(r.err, err_prefixes);
    ck_assert_int_eq(for_each_fake(count_one), 2 + 2 + 2); /* psds, workers, sleeps */
    ck_assert_int_eq(fakes_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_worker_fails_stops_everyone) {
    /* --max-restarts 0: the first failure stops the job (test_psctl_restart.c has restarts). */
    const char *args[] = {"psctl", "local",          "--ps", "2",  "--workers",    "2", "--mode",
                          "async", "--max-restarts", "0",    "--", "--fail-index", "1", "--hang",
                          NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: worker 1 failed (exit status 3)\n");
    ck_assert_msg(strstr(r.err, "job finished") == NULL, "claims success:\n%s", r.err);
    ck_assert_int_eq(fakes_alive_after_wait(), 0);
    ck_assert_int_ge(for_each_fake(count_one), 2 + 2 + 1);
    ps_test_run_free(&r);
}
END_TEST

static void interrupt_with(int sig, int want_code) {
    const char *args[] = {"psctl",  "local", "--ps", "2",      "--workers", "2",
                          "--mode", "sync",  "--",   "--hang", NULL};
    const char *markers[] = {"worker 0 hanging", "worker 1 hanging", NULL};
    ps_test_signal_when act = {markers, sig, 0};
    ps_test_run_result r;
    run_psctl(args, NULL, &act, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == want_code, "exit %d, stderr:\n%s",
                  ps_test_run_exit_code(&r), r.err);
    ck_assert_contains(r.err, sig == SIGINT ? "got SIGINT" : "got SIGTERM");
    ck_assert_contains(r.out, "[psd 0] psd 0 got SIGTERM\n");
    ck_assert_int_eq(for_each_fake(count_one), 2 + 2 + 4);
    ck_assert_int_eq(fakes_alive_after_wait(), 0);
    ps_test_run_free(&r);
}

START_TEST(test_sigint_stops_all_exit_130) {
    interrupt_with(SIGINT, 130);
}
END_TEST

START_TEST(test_sigterm_stops_all_exit_143) {
    interrupt_with(SIGTERM, 143);
}
END_TEST

START_TEST(test_psd_never_ready_fails_after_deadline) {
    const char *args[] = {"psctl", "local", "--ps", "2", "--workers", "1", "--mode", "sync", NULL};
    const char *env[] = {"FAKE_PSD_NOREADY=1", "PSCTL_READY_TIMEOUT_MS=500", NULL};
    ps_test_run_result r;
    run_psctl(args, env, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: psd 1 not ready within 0.5 s");
    ck_assert_msg(strstr(r.err, "psd 0 not ready") == NULL, "blames psd 0:\n%s", r.err);
    ck_assert_msg(strstr(r.out, "[worker") == NULL, "a worker started:\n%s", r.out);
    ck_assert_msg(r.secs < 10.0, "took %.1f s", r.secs);
    ck_assert_int_eq(fakes_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_psd_dies_while_running) {
    const char *args[] = {"psctl",  "local", "--ps", "2",      "--workers", "1",
                          "--mode", "sync",  "--",   "--hang", NULL};
    const char *env[] = {"FAKE_PSD_DIE=0", NULL};
    ps_test_run_result r;
    run_psctl(args, env, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: psd 0 ");
    ck_assert_contains(r.err, "exit status 4");
    ck_assert_int_eq(fakes_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_timeout_stops_all) {
    const char *args[] = {"psctl", "local",     "--ps", "1",  "--workers", "2", "--mode",
                          "async", "--timeout", "1",    "--", "--hang",    NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: timeout");
    ck_assert_msg(r.secs < 10.0, "took %.1f s", r.secs);
    ck_assert_int_eq(fakes_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

typedef struct {
    const char *args[16];
    const char *want; /* in stderr */
} bad_case;

static const bad_case bad_cases[] = {
    {{"psctl", NULL}, "usage: psctl"},
    {{"psctl", "bogus", NULL}, "unknown command 'bogus'"},
    {{"psctl", "local", NULL}, "--ps is required"},
    {{"psctl", "local", "--ps", "0", "--workers", "1", "--mode", "sync", NULL}, "--ps"},
    {{"psctl", "local", "--ps", "two", "--workers", "1", "--mode", "sync", NULL}, "--ps"},
    {{"psctl", "local", "--ps", "1", "--workers", "0", "--mode", "sync", NULL}, "--workers"},
    {{"psctl", "local", "--ps", "1", "--workers", "-3", "--mode", "sync", NULL}, "--workers"},
    {{"psctl", "local", "--ps", "1", "--workers", "1", "--mode", "fast", NULL}, "--mode"},
    {{"psctl", "local", "--ps", "1", "--workers", "1", NULL}, "--mode is required"},
    {{"psctl", "local", "--ps", "1", "--workers", "1", "--mode", "sync", "--epochs", "0", NULL},
     "--epochs"},
    {{"psctl", "local", "--ps", "1", "--workers", "1", "--mode", "sync", "--epochs", "1.5", NULL},
     "--epochs"},
    {{"psctl", "local", "--ps", "1", "--workers", "1", "--mode", "sync", "--timeout", "-1", NULL},
     "--timeout"},
    {{"psctl", "local", "--ps", "1", "--workers", "1", "--mode", "sync", "--bogus", NULL},
     "--bogus"},
    {{"psctl", "local", "--mode", "sync", "--ps", NULL}, "--ps needs a value"},
    {{"psctl", "local", "--ps", "1", "--workers", "1", "--mode", "sync", "stray", NULL}, "'stray'"},
    {{"psctl", "local", "--ps", "1", "--mode", "sync", "--gpus", "", NULL}, "'' has an empty id"},
    {{"psctl", "local", "--ps", "1", "--mode", "sync", "--gpus", "0,,1", NULL}, "an empty id"},
    {{"psctl", "local", "--ps", "1", "--mode", "sync", "--gpus", "1,", NULL}, "an empty id"},
    {{"psctl", "local", "--ps", "1", "--mode", "sync", "--gpus", "a", NULL}, "not a number"},
    {{"psctl", "local", "--ps", "1", "--mode", "sync", "--gpus", "-1", NULL}, "not a number"},
    {{"psctl", "local", "--ps", "1", "--mode", "sync", "--gpus", "all,0", NULL}, "not a number"},
    {{"psctl", "local", "--ps", "1", "--mode", "sync", "--gpus", "1,0,1", NULL}, "listed twice"},
    {{"psctl", "local", "--ps", "1", "--mode", "sync", "--gpus", "256", NULL}, "too large"},
    {{"psctl", "local", "--ps", "1", "--mode", "sync", "--workers", "3", "--gpus", "0,1", NULL},
     "--workers 3 disagrees with --gpus 0,1"},
    {{"psctl", "local", "--ps", "1", "--mode", "sync", NULL}, "--workers (or --gpus) is required"},
};

START_TEST(test_bad_flags_exit_2) {
    const bad_case *c = &bad_cases[_i];
    ps_test_run_result r;
    run_psctl(c->args, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 2, "case %d: exit %d, stderr:\n%s", _i,
                  ps_test_run_exit_code(&r), r.err);
    ck_assert_contains(r.err, c->want);
    ck_assert_msg(strstr(r.out, "[psd") == NULL, "case %d started something", _i);
    ck_assert_int_eq(for_each_fake(count_one), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_missing_binary_exit_2) {
    const char *args[] = {"psctl", "local", "--ps", "1", "--workers", "1", "--mode", "sync", NULL};
    const char *env[] = {"PSD=/nonexistent/psd", NULL};
    ps_test_run_result r;
    run_psctl(args, env, NULL, &r);
    ck_assert(r.finished);
    ck_assert_int_eq(ps_test_run_exit_code(&r), 2);
    ck_assert_contains(r.err, "PSD=/nonexistent/psd");
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_help) {
    const char *top[] = {"psctl", "--help", NULL};
    const char *local[] = {"psctl", "local", "--help", NULL};
    ps_test_run_result r;
    run_psctl(top, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_int_eq(ps_test_run_exit_code(&r), 0);
    ck_assert_contains(r.out, "local");
    ps_test_run_free(&r);
    run_psctl(local, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_int_eq(ps_test_run_exit_code(&r), 0);
    const char *flags[] = {"--ps N",  "--workers M", "--mode sync|async", "--epochs",
                           "--model", "--data",      "--summary",         "--batch",
                           "--seed",  "--timeout",   "--gpus all|0,1",    "--device cpu",
                           NULL};
    for (const char *const *f = flags; *f; f++)
        ck_assert_contains(r.out, *f);
    ps_test_run_free(&r);
}
END_TEST

/* ---- --gpus --------------------------------------------------------------------------
 * The machines these tests were written on have no GPU: there only the CPU fallback
 * and the errors run. Where a GPU is present, the other branches check the GPU path
 * (one worker per GPU, CUDA_VISIBLE_DEVICES=<its id>, --device cuda:0) instead. */

/* CPUs this process may use, counted as psctl counts them for --gpus all. */
static long cpus_allowed(void) {
    cpu_set_t set;
    long n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    if (n < 1) n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 1000 ? 1000 : n;
}

START_TEST(test_gpus_all_without_gpu_runs_cpu_workers) {
    int ngpu = ps_k_cuda_device_count();
    const char *cpu_args[] = {"psctl",  "local", "--ps",   "1",   "--workers", "2",
                              "--mode", "sync",  "--gpus", "all", NULL};
    const char *gpu_args[] = {"psctl", "local",  "--ps", "1", "--mode",
                              "sync",  "--gpus", "all",  NULL};
    ps_test_run_result r;
    run_psctl(ngpu == 0 ? cpu_args : gpu_args, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    char want[256];
    if (ngpu == 0) {
        ck_assert_contains(r.err, ps_k_cuda_built() ? "psctl: --gpus all: no CUDA GPU present"
                                                    : "psctl: --gpus all: this psctl was built "
                                                      "without CUDA");
        ck_assert_contains(r.err, "; running 2 CPU workers (--device cpu)\n");
        for (int j = 0; j < 2; j++) {
            snprintf(want, sizeof want,
                     "[worker %d] args: --ps 127.0.0.1:21000 --index %d --workers 2 --epochs 2 "
                     "--device cpu --progress plain\n",
                     j, j);
            ck_assert_contains(r.out, want);
        }
        ck_assert_contains(r.err, "psctl: job finished: 1 ps, 2 workers, mode sync\n");
    } else { /* the GPU path: needs a GPU, so it has not run where this was written */
        const char *parent = getenv("CUDA_VISIBLE_DEVICES");
        for (int j = 0; j < ngpu; j++) {
            snprintf(want, sizeof want,
                     "[worker %d] args: --ps 127.0.0.1:21000 --index %d "
                     "--workers %d --epochs 2 --device cuda:0 --progress plain\n",
                     j, j, ngpu);
            ck_assert_contains(r.out, want);
            int k = 0;
            const char *p = parent && *parent ? parent : NULL;
            for (; p && k < j; k++) /* psctl maps our GPU j to the j-th of our own list */
                p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
            if (p)
                snprintf(want, sizeof want, "[worker %d] cuda_visible: %.*s\n", j,
                         (int)strcspn(p, ","), p);
            else
                snprintf(want, sizeof want, "[worker %d] cuda_visible: %d\n", j, j);
            ck_assert_contains(r.out, want);
        }
    }
    ck_assert_int_eq(fakes_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_gpus_all_without_gpu_one_worker_per_cpu) {
    if (ps_k_cuda_device_count() > 0) {
        printf("skipping: a GPU is present, so --gpus all does not fall back to CPU workers\n");
        return;
    }
    const char *args[] = {"psctl", "local", "--ps", "1", "--mode", "sync", "--gpus", "all", NULL};
    long n = cpus_allowed();
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    char want[128];
    snprintf(want, sizeof want, "; running %ld CPU worker%s (--device cpu)\n", n,
             n == 1 ? "" : "s");
    ck_assert_contains(r.err, want);
    snprintf(want, sizeof want, "psctl: job finished: 1 ps, %ld workers, mode sync\n", n);
    ck_assert_contains(r.err, want);
    ck_assert_int_eq(fakes_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_gpus_missing_id_exit_2) {
    /* With no GPU every listed id is missing: only `all` falls back to the CPU. */
    int ngpu = ps_k_cuda_device_count();
    char id[16], list[32], want[128];
    snprintf(id, sizeof id, "%d", ngpu);
    snprintf(list, sizeof list, "%d,%d", ngpu + 1, ngpu);
    const char *lists[] = {id, list};
    for (int i = 0; i < 2; i++) {
        const char *args[] = {"psctl",  "local", "--ps",   "1",      "--workers", i ? "2" : "1",
                              "--mode", "sync",  "--gpus", lists[i], NULL};
        ps_test_run_result r;
        run_psctl(args, NULL, NULL, &r);
        ck_assert(r.finished);
        ck_assert_msg(ps_test_run_exit_code(&r) == 2, "exit %d, stderr:\n%s",
                      ps_test_run_exit_code(&r), r.err);
        snprintf(want, sizeof want, "psctl local: --gpus %s: GPU %d does not exist: ", lists[i],
                 i ? ngpu + 1 : ngpu);
        ck_assert_contains(r.err, want);
        if (ngpu == 0) {
            ck_assert_contains(r.err, "(0 devices); --gpus all would run CPU workers\n");
        } else {
            snprintf(want, sizeof want, "%d CUDA GPU%s present", ngpu, ngpu == 1 ? "" : "s");
            ck_assert_contains(r.err, want);
        }
        ck_assert_int_eq(for_each_fake(count_one), 0);
        ps_test_run_free(&r);
    }
    if (ngpu > 0) { /* --gpus all makes one worker per GPU: another --workers is an error */
        snprintf(id, sizeof id, "%d", ngpu + 1);
        const char *args[] = {"psctl",  "local", "--ps",   "1",   "--workers", id,
                              "--mode", "sync",  "--gpus", "all", NULL};
        ps_test_run_result r;
        run_psctl(args, NULL, NULL, &r);
        ck_assert_int_eq(ps_test_run_exit_code(&r), 2);
        ck_assert_contains(r.err, "disagrees with --gpus all");
        ps_test_run_free(&r);
    }
}
END_TEST

/* Exit code of `exe --help`, or -1 if it could not be run in 20 s. */
static int help_exit_code(const char *exe) {
    const char *args[] = {exe, "--help", NULL};
    ps_test_run_result r;
    ps_test_run(exe, args, NULL, 20.0, NULL, NULL, &r);
    int code = r.finished ? ps_test_run_exit_code(&r) : -1;
    ps_test_run_free(&r);
    return code;
}

START_TEST(test_real_binaries_train) {
    const char *psd = getenv("PSD"), *worker = getenv("PSWORKER"), *psctl = getenv("PSCTL");
    ck_assert_msg(psd && worker && psctl, "PSD, PSWORKER and PSCTL must be set");
    int c1 = help_exit_code(psd), c2 = help_exit_code(worker);
    if (c1 != 0 || c2 != 0) {
        printf("skipping the real-binaries test: '%s --help' exited %d, '%s --help' exited %d\n",
               psd, c1, worker, c2);
        return;
    }
    char summary[4200];
    snprintf(summary, sizeof summary, "%s/summary.json", tdir);
    const char *args[] = {psctl,       "local",
                          "--ps",      "2",
                          "--workers", "2",
                          "--mode",    "sync",
                          "--epochs",  "1",
                          "--summary", summary,
                          "--data",    ps_test_data_dir(),
                          "--timeout", "240",
                          "--",        "--max-train",
                          "6000",      "--max-test",
                          "2000",      NULL};
    ps_test_run_result r;
    ps_test_run(psctl, args, NULL, 260.0, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);

    FILE *f = fopen(summary, "r");
    ck_assert_msg(f != NULL, "no summary file %s", summary);
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *j = cJSON_Parse(buf);
    ck_assert_msg(j != NULL, "summary is not JSON: %s", buf);
    const cJSON *acc = cJSON_GetObjectItemCaseSensitive(j, "test_accuracy");
    ck_assert_msg(cJSON_IsNumber(acc), "no numeric test_accuracy in %s", buf);
    ck_assert_msg(acc->valuedouble > 0.6, "test_accuracy %g", acc->valuedouble);
    cJSON_Delete(j);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_real_binaries_gpus_all) {
    /* A short real job through --gpus all: CPU workers here (no GPU), one per GPU where
     * there are GPUs (that path has not run where this was written). */
    const char *psd = getenv("PSD"), *worker = getenv("PSWORKER"), *psctl = getenv("PSCTL");
    ck_assert_msg(psd && worker && psctl, "PSD, PSWORKER and PSCTL must be set");
    int c1 = help_exit_code(psd), c2 = help_exit_code(worker);
    if (c1 != 0 || c2 != 0) {
        printf("skipping the real --gpus test: '%s --help' exited %d, '%s --help' exited %d\n", psd,
               c1, worker, c2);
        return;
    }
    int ngpu = ps_k_cuda_device_count();
    const char *head[] = {
        psctl,      "local", "--ps",      "1",   "--mode", "sync", "--data", ps_test_data_dir(),
        "--epochs", "1",     "--timeout", "120", "--gpus", "all",  NULL};
    const char *tail[] = {"--",  "--max-train", "512", "--max-test",
                          "256", "--max-steps", "2",   NULL};
    const char *args[32];
    int n = 0;
    for (const char *const *a = head; *a; a++)
        args[n++] = *a;
    if (ngpu == 0) { /* with GPUs --workers must match their count: leave it out */
        args[n++] = "--workers";
        args[n++] = "2";
    }
    for (const char *const *a = tail; *a; a++)
        args[n++] = *a;
    args[n] = NULL;
    ps_test_run_result r;
    ps_test_run(psctl, args, NULL, 150.0, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, ngpu == 0 ? "running 2 CPU workers (--device cpu)"
                                        : "one per GPU (CUDA_VISIBLE_DEVICES ");
    ck_assert_contains(r.err, "psctl: job finished: 1 ps, ");
    ps_test_run_free(&r);
}
END_TEST

static Suite *psctl_local_suite(void) {
    Suite *s = suite_create("psctl_local");
    TCase *fake = tcase_create("fakes");
    tcase_add_checked_fixture(fake, setup, teardown);
    tcase_set_timeout(fake, 60);
    tcase_add_test(fake, test_happy_path_prefixes_and_sigterm);
    tcase_add_test(fake, test_worker_fails_stops_everyone);
    tcase_add_test(fake, test_sigint_stops_all_exit_130);
    tcase_add_test(fake, test_sigterm_stops_all_exit_143);
    tcase_add_test(fake, test_psd_never_ready_fails_after_deadline);
    tcase_add_test(fake, test_psd_dies_while_running);
    tcase_add_test(fake, test_timeout_stops_all);
    tcase_add_loop_test(fake, test_bad_flags_exit_2, 0,
                        (int)(sizeof bad_cases / sizeof bad_cases[0]));
    tcase_add_test(fake, test_missing_binary_exit_2);
    tcase_add_test(fake, test_help);
    tcase_add_test(fake, test_gpus_all_without_gpu_runs_cpu_workers);
    tcase_add_test(fake, test_gpus_all_without_gpu_one_worker_per_cpu);
    tcase_add_test(fake, test_gpus_missing_id_exit_2);
    suite_add_tcase(s, fake);

    TCase *real = tcase_create("real");
    tcase_add_checked_fixture(real, setup, teardown);
    tcase_set_timeout(real, 280);
    tcase_add_test(real, test_real_binaries_train);
    tcase_add_test(real, test_real_binaries_gpus_all);
    suite_add_tcase(s, real);
    return s;
}

int main(void) {
    return ps_test_run_suite(psctl_local_suite());
}
