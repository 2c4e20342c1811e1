/* `psctl checkpoint` and `psctl shutdown` against fake shards (a ROUTER in a thread of
 * this test) and a real psd, and psctl restarting a real psd on its port. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "proc.h"
#include "ps_error.h"
#include "psctl_fakes.h"
#include "run.h"
#include "testutil.h"
#include "wire.h"

/* ---- psctl checkpoint / shutdown ---------------------------------------------------- */

/* Runs `psctl CMD --ps <the shards' endpoints> [extra...]`. */
static void run_admin(const char *cmd, int nshards, const char *const *extra,
                      ps_test_run_result *r) {
    char list[256] = "";
    for (int i = 0; i < nshards; i++) {
        if (i) strcat(list, ",");
        strcat(list, shards[i].router.endpoint);
    }
    const char *args[16] = {"psctl", cmd, "--ps", list};
    int n = 4;
    for (const char *const *e = extra; e && *e; e++)
        args[n++] = *e;
    args[n] = NULL;
    run_psctl(args, NULL, NULL, NULL, r);
}

START_TEST(test_checkpoint_every_shard_answers) {
    shard_start(0, SHARD_OK);
    shard_start(1, SHARD_OLD_ID_FIRST); /* a reply to another request is skipped */
    ps_test_run_result r;
    run_admin("checkpoint", 2, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    char want[256];
    for (int i = 0; i < 2; i++) {
        snprintf(want, sizeof want,
                 "ps %d %s: checkpoint version %d \xe2\x86\x92 /ckpt/ps-%d/ckpt-%d.bin (5.2 MB)\n",
                 i, shards[i].router.endpoint, 1234 + i, i, 1234 + i);
        ck_assert_contains(r.out, want);
        ck_assert_int_eq(atomic_load(&shards[i].requests), 1);
        ck_assert_int_eq(atomic_load(&shards[i].last_body), PS__HEADER__BODY_CHECKPOINT);
        ck_assert_uint_eq(atomic_load(&shards[i].last_proto), PS_PROTOCOL_VERSION);
    }
    ck_assert_str_eq(r.err, "");
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_checkpoint_error_reply_exit_1) {
    shard_start(0, SHARD_OK);
    shard_start(1, SHARD_ERROR);
    ps_test_run_result r;
    run_admin("checkpoint", 2, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    char want[256];
    snprintf(want, sizeof want, "ps 0 %s: checkpoint version 1234 ", shards[0].router.endpoint);
    ck_assert_contains(r.out, want);
    snprintf(want, sizeof want, "ps 1 %s: checkpoint failed: EINVAL: no --checkpoint-dir\n",
             shards[1].router.endpoint);
    ck_assert_contains(r.err, want);
    ck_assert_contains(r.err, "psctl checkpoint: 1 of 2 shards failed\n");
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_checkpoint_silent_shard_times_out) {
    shard_start(0, SHARD_SILENT);
    shard_start(1, SHARD_OK);
    const char *extra[] = {"--timeout", "0.5", NULL};
    ps_test_run_result r;
    run_admin("checkpoint", 2, extra, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    char want[256];
    snprintf(want, sizeof want, "ps 0 %s: no answer within 0.5 s\n", shards[0].router.endpoint);
    ck_assert_contains(r.err, want);
    snprintf(want, sizeof want, "ps 1 %s: checkpoint version 1235 ", shards[1].router.endpoint);
    ck_assert_contains(r.out, want);
    ck_assert_int_eq(atomic_load(&shards[0].requests), 1);
    ck_assert_msg(r.secs >= 0.45 && r.secs < 5.0, "took %.2f s", r.secs);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_checkpoint_nobody_listening_times_out) {
    /* A port that nothing listens on: bind, read the port, close. */
    shard_start(0, SHARD_OK);
    shard_stop(&shards[0]);
    const char *extra[] = {"--timeout", "0.3", NULL};
    ps_test_run_result r;
    run_admin("checkpoint", 1, extra, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, ": no answer within 0.3 s\n");
    ck_assert_contains(r.err, "psctl checkpoint: 1 of 1 shard failed\n");
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_shutdown_fake_shards_from_tfconfig) {
    shard_start(0, SHARD_OK);
    shard_start(1, SHARD_OK);
    char tf[512];
    snprintf(tf, sizeof tf,
             "TF_CONFIG={\"cluster\": {\"ps\": [\"%s\", \"%s\"], \"worker\": [\"w:1\"]}, "
             "\"task\": {\"type\": \"worker\", \"index\": 0}}",
             shards[0].router.endpoint, shards[1].router.endpoint);
    const char *args[] = {"psctl", "shutdown", NULL};
    const char *env[] = {tf, NULL};
    ps_test_run_result r;
    run_psctl(args, env, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    char want[256];
    for (int i = 0; i < 2; i++) {
        snprintf(want, sizeof want, "ps %d %s: shutting down\n", i, shards[i].router.endpoint);
        ck_assert_contains(r.out, want);
        ck_assert_int_eq(atomic_load(&shards[i].last_body), PS__HEADER__BODY_SHUTDOWN);
    }
    ps_test_run_free(&r);

    /* TF_CONFIG's placeholders are not addresses. */
    const char *bad_env[] = {"TF_CONFIG={\"cluster\": {\"ps\": [\"host1:port\"]}}", NULL};
    run_psctl(args, bad_env, NULL, NULL, &r);
    ck_assert_int_eq(ps_test_run_exit_code(&r), 2);
    ck_assert_contains(r.err, "psctl shutdown: TF_CONFIG: ps 0: 'host1:port' is not host:port (port 1..65535)");
    ps_test_run_free(&r);
}
END_TEST

/* ---- real psd -------------------------------------------------------------------- */

/* Records pid in the test dir, so that the fixture kills it if the test fails. */
static void record_pid(pid_t pid) {
    char path[4200], text[32];
    snprintf(path, sizeof path, "%s/pid.real.%d", tdir, (int)pid);
    snprintf(text, sizeof text, "%d\n", (int)pid);
    ps_test_write_file(path, text, strlen(text));
}

/* 1 when `$PSD --help` mentions s. */
static int psd_help_has(const char *s) {
    const char *psd = getenv("PSD");
    ck_assert_ptr_nonnull(psd);
    const char *args[] = {psd, "--help", NULL};
    ps_test_run_result r;
    ps_test_run(psd, args, NULL, 20.0, NULL, NULL, &r);
    int has = r.finished && ps_test_run_exit_code(&r) == 0 && strstr(r.out, s) != NULL;
    ps_test_run_free(&r);
    return has;
}

START_TEST(test_shutdown_real_psd) {
    ps_test_psd p;
    ck_assert_int_eq(ps_test_psd_start(&p, NULL, 10000), 0);
    record_pid(p.pid);
    const char *args[] = {"psctl", "shutdown", "--ps", p.endpoint, NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, NULL, &r);
    int code = ps_test_run_exit_code(&r);
    int psd_code = ps_test_wait(p.pid, 10000); /* psd stops after answering */
    p.pid = 0;
    ps_test_psd_stop(&p, 1000);
    ck_assert(r.finished);
    ck_assert_msg(code == 0, "exit %d, stderr:\n%s", code, r.err);
    ck_assert_contains(r.out, ": shutting down\n");
    ck_assert_int_eq(psd_code, 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_checkpoint_real_psd) {
    if (!psd_help_has("--checkpoint-dir")) {
        printf("skipping: this psd has no --checkpoint-dir yet\n");
        return;
    }
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/real-ckpt", tdir);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    const char *with[] = {"--checkpoint-dir", dir, NULL};
    ps_test_psd p, q;
    ck_assert_int_eq(ps_test_psd_start(&p, with, 10000), 0);
    record_pid(p.pid);
    ck_assert_int_eq(ps_test_psd_start(&q, NULL, 10000), 0);
    record_pid(q.pid);
    char list[300];
    snprintf(list, sizeof list, "%s,%s", p.endpoint, q.endpoint);
    const char *args[] = {"psctl", "checkpoint", "--ps", list, NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, NULL, &r);
    ps_test_psd_stop(&p, 5000);
    ps_test_psd_stop(&q, 5000);
    ck_assert(r.finished);
    /* The shard without --checkpoint-dir answers an error: exit 1, both reported. */
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, out:\n%s\nerr:\n%s",
                  ps_test_run_exit_code(&r), r.out, r.err);
    char want[256];
    snprintf(want, sizeof want, "ps 0 %s: checkpoint version ", p.endpoint);
    ck_assert_contains(r.out, want);
    ck_assert_contains(r.out, dir);
    snprintf(want, sizeof want, "ps 1 %s: checkpoint failed: ", q.endpoint);
    ck_assert_contains(r.err, want);
    ps_test_run_free(&r);
}
END_TEST

/* Hook for the real-psd restart: SIGKILLs psd 0 once the shards are ready, then
 * SIGTERMs psctl once it reports the shard back. */
typedef struct {
    int killed, termed;
} real_restart;

static void kill_real_psd(const ps_test_run_result *r, void *ctx) {
    real_restart *st = ctx;
    if (!st->killed && strstr(r->err, "psctl: psd shards ready at ")) {
        pid_t pid = ps_test_find_child(r->pid, "--shard", "0");
        if (pid > 0) {
            record_pid(pid);
            kill(pid, SIGKILL);
            st->killed = 1;
        }
    } else if (st->killed && !st->termed && strstr(r->err, "psctl: psd 0 back at ")) {
        pid_t pid = ps_test_find_child(r->pid, "--shard", "0");
        if (pid > 0) record_pid(pid);
        kill(r->pid, SIGTERM);
        st->termed = 1;
    }
}

/* _i 0: the default transport (ipc: the restarted psd replaces the stale socket the
 * killed one left); _i 1: --transport tcp (back on its port). */
START_TEST(test_real_psd_sigkilled_comes_back_on_its_port) {
    int tcp = _i == 1;
    const char *psd = getenv("PSD"), *psctl = getenv("PSCTL");
    ck_assert_msg(psd && psctl, "PSD and PSCTL must be set");
    char e_psd[4200], e_worker[4200], e_dir[4200];
    snprintf(e_psd, sizeof e_psd, "PSD=%s", psd);
    snprintf(e_worker, sizeof e_worker, "PSWORKER=%s", fake_worker_path);
    snprintf(e_dir, sizeof e_dir, "FAKE_DIR=%s", tdir);
    const char *env[] = {e_psd, e_worker, e_dir, "PS_PARENT_PID=", NULL};
    const char *args[] = {psctl, "local",  "--ps", "2",           "--workers",
                          "1",   "--mode", "sync", "--transport", tcp ? "tcp" : "ipc",
                          "--",  "--hang", NULL};
    real_restart st = {0, 0};
    ps_test_run_result r;
    ps_test_run(psctl, args, env, 30.0, kill_real_psd, &st, &r);
    ck_assert(r.finished);
    ck_assert_msg(st.killed && st.termed, "psd 0 was not killed and back; stderr:\n%s", r.err);
    ck_assert_msg(ps_test_run_exit_code(&r) == 143, "exit %d, stderr:\n%s",
                  ps_test_run_exit_code(&r), r.err);
    ck_assert_contains(r.err, "psctl: psd 0 killed by signal 9; restarting (1/3)\n");
    const char *ready = strstr(r.err, "psctl: psd shards ready at ");
    ck_assert_ptr_nonnull(ready);
    ready += strlen("psctl: psd shards ready at ");
    ck_assert(strncmp(ready, "ipc://", 6) == 0 ? !tcp : tcp);
    char want[256];
    snprintf(want, sizeof want, "psctl: psd 0 back at %.*s\n", (int)strcspn(ready, ","), ready);
    ck_assert_contains(r.err, want);
    if (!tcp) ck_assert_contains(r.err, "removed the stale socket");
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

static Suite *psctl_admin_suite(void) {
    Suite *s = suite_create("psctl_restart");

    TCase *admin = psctl_fakes_tcase("admin");
    tcase_add_test(admin, test_checkpoint_every_shard_answers);
    tcase_add_test(admin, test_checkpoint_error_reply_exit_1);
    tcase_add_test(admin, test_checkpoint_silent_shard_times_out);
    tcase_add_test(admin, test_checkpoint_nobody_listening_times_out);
    tcase_add_test(admin, test_shutdown_fake_shards_from_tfconfig);
    suite_add_tcase(s, admin);

    TCase *real = psctl_fakes_tcase("real psd");
    tcase_add_test(real, test_shutdown_real_psd);
    tcase_add_test(real, test_checkpoint_real_psd);
    tcase_add_loop_test(real, test_real_psd_sigkilled_comes_back_on_its_port, 0, 2);
    suite_add_tcase(s, real);
    return s;
}

int main(void) {
    return ps_test_run_suite(psctl_admin_suite());
}
