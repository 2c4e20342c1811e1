/* What the `psctl local` tests (test_psctl_local, test_psctl_local_gpus) share: fake
 * psd/psworker shell scripts, psctl run against them, and the fixture (see
 * psctl_local_fakes.h). */
#include "psctl_local_fakes.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

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

char *tdir; /* this test's temp dir: scripts, pid files, summary */
char fake_psd_path[4096], fake_worker_path[4096];

/* ---- processes (the runner is the kit's, run.h) ---------------------------------- */

int count_one(pid_t pid) {
    (void)pid;
    return 1;
}

/* Calls fn(pid) for every pid recorded in the temp dir; returns how many fn counted. */
int for_each_fake(int (*fn)(pid_t)) {
    return ps_test_for_each_recorded(tdir, fn);
}

/* Waits (up to 3 s) until no recorded fake is alive; returns how many still are. */
int fakes_alive_after_wait(void) {
    return ps_test_recorded_alive_after_wait(tdir, 3000);
}

/* Runs psctl with the fakes as PSD/PSWORKER (plus extra env), bounded by 30 s; act (may be
 * NULL) signals it once its markers appear. */
void run_psctl(const char *const *args, const char *const *env, ps_test_signal_when *act,
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
void assert_prefixed(const char *text, const char *const *prefixes) {
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

/* ---- fixture ------------------------------------------------------------------- */

static void cleanup(void) {
    if (!tdir) return;
    for_each_fake(ps_test_kill_if_alive);
    ps_test_reap_all();
    ps_test_rmdir(tdir);
    free(tdir);
    tdir = NULL;
}

void setup(void) {
    static int registered;
    if (!registered) {
        atexit(cleanup); /* also runs when a failed assertion ends the test process */
        registered = 1;
    }
    prctl(PR_SET_CHILD_SUBREAPER, 1); /* orphaned fakes come to us, so we can reap them */
    tdir = ps_test_mkdtemp();
    ck_assert_ptr_nonnull(tdir);
    ps_test_write_script(fake_psd_path, sizeof fake_psd_path, tdir, "fake-psd", fake_psd);
    ps_test_write_script(fake_worker_path, sizeof fake_worker_path, tdir, "fake-worker",
                         fake_worker);
}

void teardown(void) {
    cleanup();
}

TCase *psctl_local_tcase(const char *name, double timeout_s) {
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, timeout_s);
    return tc;
}
