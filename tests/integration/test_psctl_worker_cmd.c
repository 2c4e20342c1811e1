/* Integration tests for `psctl local --worker-cmd CMD`: real psd shards, workers that are
 * small shell scripts. Each start of a worker records its TF_CONFIG, PS_JOB_ID, arguments
 * and whole environment in the test's dir; the tests check TF_CONFIG's shape and
 * endpoints (the shards answer a connect while the workers run), the prefixed output,
 * shell quoting, a restart with the same environment, exit 2 failing the job at once,
 * and the psworker-only flags refused. */
#include <arpa/inet.h>
#include <check.h>
#include <cjson/cJSON.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ps_error.h"
#include "run.h"
#include "testutil.h"
#include "tfconfig.h"

#define ck_assert_contains(hay, needle)                                                            \
    ck_assert_msg(strstr((hay), (needle)) != NULL, "missing \"%s\" in:\n%s", (needle), (hay))

/* The worker: worker.sh DIR MODE ARGS... Start n of worker j (j from TF_CONFIG) writes
 * DIR/{tf,job,env,args}.<j>.<n> (tf last, atomically), prints its arguments one per
 * line and a line on stderr, then by MODE: ok exits 0; wait-go waits (at most 20 s) for
 * DIR/go and exits 0; fail-once exits 3 on its first start, 0 afterwards; exit2-0: worker
 * 0 exits 2, the others sleep (stopped by psctl); exit4-0 likewise with 4. */
static const char worker_script[] =
    "#!/bin/sh\n"
    "dir=\"$1\"; mode=\"$2\"; shift 2\n"
    "echo $$ > \"$dir/pid.worker.$$\"\n"
    "j=$(printf '%s' \"$TF_CONFIG\" | sed -n 's/.*\"index\": *\\([0-9]*\\).*/\\1/p')\n"
    "n=0; while [ -e \"$dir/tf.$j.$n\" ]; do n=$((n + 1)); done\n"
    "printf '%s\\n' \"${PS_JOB_ID-unset}\" > \"$dir/job.$j.$n\"\n"
    "env | sort > \"$dir/env.$j.$n\"\n"
    "printf '%s\\n' \"$#\" \"$@\" > \"$dir/args.$j.$n\"\n"
    "printf '%s\\n' \"$TF_CONFIG\" > \"$dir/tf.tmp.$j\" && mv \"$dir/tf.tmp.$j\" "
    "\"$dir/tf.$j.$n\"\n"
    "for a in \"$@\"; do echo \"arg=[$a]\"; done\n"
    "echo \"worker $j start $n on stderr\" >&2\n"
    "case \"$mode\" in\n"
    "  ok) exit 0;;\n"
    "  wait-go) i=0; while [ ! -e \"$dir/go\" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1));"
    " done; exit 0;;\n"
    "  fail-once) if [ $n -eq 0 ]; then exit 3; fi; exit 0;;\n"
    "  exit2-0) if [ \"$j\" = 0 ]; then exit 2; fi; exec sleep 30;;\n"
    "  exit4-0) if [ \"$j\" = 0 ]; then exit 4; fi; exec sleep 30;;\n"
    "esac\n"
    "exit 9\n";

static char *tdir;
static char worker_path[4096];

static void cleanup(void) {
    if (!tdir) return;
    ps_test_for_each_recorded(tdir, ps_test_kill_if_alive);
    ps_test_reap_all();
    ps_test_rmdir(tdir);
    free(tdir);
    tdir = NULL;
}

static void setup(void) {
    static int registered;
    if (!registered) {
        atexit(cleanup); /* also when a failed assertion ends the test process */
        registered = 1;
    }
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    tdir = ps_test_mkdtemp();
    ck_assert_ptr_nonnull(tdir);
    ps_test_write_script(worker_path, sizeof worker_path, tdir, "worker.sh", worker_script);
}

static void teardown(void) {
    cleanup();
}

/* "DIR/<name>.<j>.<n>" into buf. */
static const char *rec(char *buf, size_t n, const char *name, int j, int start) {
    snprintf(buf, n, "%s/%s.%d.%d", tdir, name, j, start);
    return buf;
}

/* The worker command: 'worker.sh' 'DIR' MODE plus quoted args. */
static void worker_cmd(char *buf, size_t n, const char *mode, const char *args) {
    snprintf(buf, n, "'%s' '%s' %s %s", worker_path, tdir, mode, args);
}

/* Runs the real psctl (PSD is the real psd, from the test environment), bounded by 30 s. */
static void run_psctl(const char *const *args, ps_test_run_hook hook, void *ctx,
                      ps_test_run_result *r) {
    const char *exe = getenv("PSCTL");
    ck_assert_msg(exe != NULL, "PSCTL is not set");
    const char *env[] = {"PS_PARENT_PID=", "TF_CONFIG={\"inherited\": true}", "PS_JOB_ID=", NULL};
    ps_test_run(exe, args, env, 30.0, hook, ctx, r);
    ck_assert_msg(r->finished, "psctl did not finish in 30 s; stderr:\n%s", r->err);
}

/* Every line of text starts with one of the prefixes. */
static void assert_prefixed(const char *text, const char *const *prefixes) {
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        int ok = 0;
        for (const char *const *p = prefixes; *p; p++)
            ok |= strncmp(line, *p, strlen(*p)) == 0;
        ck_assert_msg(ok, "unprefixed line: %.*s", (int)(nl ? nl - line : (long)strlen(line)),
                      line);
        if (!nl) break;
        line = nl + 1;
    }
}

/* The shards' list from psctl's "psd shards ready at LIST; ..." line, into buf. */
static void ready_list(const char *err, char *buf, size_t n) {
    const char *p = strstr(err, "psctl: psd shards ready at ");
    ck_assert_msg(p != NULL, "no ready line in:\n%s", err);
    p += strlen("psctl: psd shards ready at ");
    size_t len = strcspn(p, ";\n");
    ck_assert_uint_lt(len, n);
    memcpy(buf, p, len);
    buf[len] = '\0';
}

/* Connects to a shard endpoint ("ipc://PATH" or "127.0.0.1:PORT"); 1 when it answers. */
static int connectable(const char *ep) {
    const char *path = ps_ipc_path(ep);
    int fd, ok;
    if (path) {
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        if (strlen(path) >= sizeof a.sun_path) return 0;
        strcpy(a.sun_path, path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    } else {
        char host[64];
        int port;
        if (ps_parse_hostport(ep, host, sizeof host, &port) != PS_OK) return 0;
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        if (inet_pton(AF_INET, host, &a.sin_addr) != 1) return 0;
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    }
    if (fd >= 0) close(fd);
    return ok;
}

/* Hook: once worker 0 wrote its TF_CONFIG, connect to every ps entry in it (the shards
 * run: the workers wait for DIR/go), then let the workers end. */
typedef struct {
    int done, n_ps, connected;
} probe;

static void probe_shards(const ps_test_run_result *r, void *ctx) {
    (void)r;
    probe *pr = ctx;
    char path[4200];
    if (pr->done) return;
    char *json = ps_test_slurp(rec(path, sizeof path, "tf", 0, 0), NULL);
    if (!json) return;
    pr->done = 1;
    ps_cluster c;
    if (ps_cluster_from_tfconfig(json, &c, NULL, 0) == PS_OK) {
        pr->n_ps = (int)c.n_ps;
        for (size_t i = 0; i < c.n_ps; i++)
            pr->connected += connectable(c.ps[i]);
    }
    ps_cluster_free(&c);
    free(json);
    snprintf(path, sizeof path, "%s/go", tdir);
    ps_test_write_file(path, "", 0);
}

/* Checks worker j's TF_CONFIG (start 0) against psctl's shards; returns its worker list
 * (malloc'd, "a,b") so that workers can be compared. */
static char *check_tf_config(int j, int n_workers, const char *shards) {
    char path[4200], err[256];
    char *json = ps_test_slurp(rec(path, sizeof path, "tf", j, 0), NULL);
    ck_assert_msg(json != NULL, "worker %d wrote no TF_CONFIG", j);
    /* the shape: exactly {"cluster": {"ps", "worker"}, "task": {"type", "index"}} */
    cJSON *root = cJSON_Parse(json);
    ck_assert_msg(root != NULL, "not JSON: %s", json);
    ck_assert_int_eq(cJSON_GetArraySize(root), 2);
    cJSON *cluster = cJSON_GetObjectItemCaseSensitive(root, "cluster");
    cJSON *task = cJSON_GetObjectItemCaseSensitive(root, "task");
    ck_assert(cJSON_IsObject(cluster) && cJSON_IsObject(task));
    ck_assert_int_eq(cJSON_GetArraySize(cluster), 2);
    ck_assert(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(cluster, "ps")));
    ck_assert(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(cluster, "worker")));
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(task, "type")->valuestring, "worker");
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(task, "index")->valueint, j);
    cJSON_Delete(root);

    /* what a worker's own parser makes of it */
    ps_cluster c;
    int rc = ps_cluster_from_tfconfig(json, &c, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "%s: %s", err, json);
    unsigned index = 99;
    ck_assert_int_eq(ps_cluster_worker_index(&c, &index), PS_OK);
    ck_assert_uint_eq(index, (unsigned)j);
    ck_assert_uint_eq(ps_cluster_num_workers(&c), (unsigned)n_workers);
    ck_assert_uint_eq(c.n_chief, 0); /* worker 0 is the chief */
    char ps[1024] = "", workers[1024] = "";
    for (size_t i = 0; i < c.n_ps; i++)
        snprintf(ps + strlen(ps), sizeof ps - strlen(ps), "%s%s", i ? "," : "", c.ps[i]);
    ck_assert_str_eq(ps, shards); /* exactly psworker's --ps list */
    for (size_t i = 0; i < c.n_worker; i++) {
        char host[64];
        int port = 0;
        ck_assert_int_eq(ps_parse_hostport(c.worker[i], host, sizeof host, &port), PS_OK);
        ck_assert_str_eq(host, "127.0.0.1");
        ck_assert_int_gt(port, 0);
        for (size_t k = 0; k < i; k++)
            ck_assert_str_ne(c.worker[k], c.worker[i]);
        snprintf(workers + strlen(workers), sizeof workers - strlen(workers), "%s%s", i ? "," : "",
                 c.worker[i]);
    }
    ps_cluster_free(&c);
    free(json);
    return strdup(workers);
}

/* ---- tests --------------------------------------------------------------------- */

/* (a) TF_CONFIG and PS_JOB_ID of every worker, the shards reachable at its ps entries;
 * (b) prefixed output and CMD's shell quoting. _i: 0 --transport ipc, 1 tcp. */
START_TEST(test_tf_config_and_output) {
    const char *transport = _i ? "tcp" : "ipc";
    char cmd[8192];
    worker_cmd(cmd, sizeof cmd, "wait-go", "'a b' \"c'd\" plain");
    const char *args[] = {"psctl",       "local",   "--ps",         "2",        "--workers",
                          "2",           "--mode",  "async",        "--job-id", "job-7",
                          "--transport", transport, "--worker-cmd", cmd,        NULL};
    probe pr = {0};
    ps_test_run_result r;
    run_psctl(args, probe_shards, &pr, &r);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: job finished: 2 ps, 2 workers, mode async\n");

    char shards[1024];
    ready_list(r.err, shards, sizeof shards);
    ck_assert_msg(strncmp(shards, _i ? "127.0.0.1:" : "ipc://", _i ? 10 : 6) == 0, "%s", shards);
    ck_assert_msg(pr.done && pr.n_ps == 2 && pr.connected == 2,
                  "shards reachable at TF_CONFIG's ps entries: %d of %d", pr.connected, pr.n_ps);
    char *w0 = check_tf_config(0, 2, shards), *w1 = check_tf_config(1, 2, shards);
    ck_assert_str_eq(w0, w1); /* one cluster, two tasks */
    free(w0);
    free(w1);

    char path[4200];
    for (int j = 0; j < 2; j++) {
        ck_assert_str_eq(ps_test_text(rec(path, sizeof path, "job", j, 0)), "job-7\n");
        /* 'a b' and "c'd" each arrive as one argument */
        ck_assert_str_eq(ps_test_text(rec(path, sizeof path, "args", j, 0)),
                         "3\na b\nc'd\nplain\n");
        ck_assert_int_eq(access(rec(path, sizeof path, "tf", j, 1), F_OK), -1); /* one start */
    }
    ck_assert_contains(r.out, "[worker 0] arg=[a b]\n[worker 0] arg=[c'd]\n");
    ck_assert_contains(r.out, "[worker 1] arg=[a b]\n");
    ck_assert_contains(r.err, "[worker 1] worker 1 start 0 on stderr\n");
    const char *out_prefixes[] = {"[psd 0] ", "[psd 1] ", "[worker 0] ", "[worker 1] ", NULL};
    const char *err_prefixes[] = {"[psd 0] ",    "[psd 1] ", "[worker 0] ",
                                  "[worker 1] ", "psctl: ",  NULL};
    assert_prefixed(r.out, out_prefixes);
    assert_prefixed(r.err, err_prefixes);
    ck_assert_int_eq(ps_test_recorded_alive_after_wait(tdir, 3000), 0);
    ps_test_run_free(&r);
}
END_TEST

/* (c) a worker failing once is restarted with the same command line and environment. */
START_TEST(test_restart_same_env) {
    char cmd[8192];
    worker_cmd(cmd, sizeof cmd, "fail-once", "x");
    const char *args[] = {"psctl",  "local", "--ps",         "1", "--workers", "2",
                          "--mode", "sync",  "--worker-cmd", cmd, NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, &r);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: worker 0 exited with status 3; restarting (1/3)\n");
    ck_assert_contains(r.err, "psctl: worker 1 exited with status 3; restarting (1/3)\n");
    char a[4200], b[4200];
    for (int j = 0; j < 2; j++) {
        const char *env0 = ps_test_text(rec(a, sizeof a, "env", j, 0));
        ck_assert_contains(env0, "TF_CONFIG={\"cluster\": {\"ps\": [");
        ck_assert_msg(strstr(env0, "inherited") == NULL, "TF_CONFIG inherited:\n%s", env0);
        ck_assert_msg(strstr(env0, "PS_JOB_ID") == NULL, "PS_JOB_ID without --job-id:\n%s", env0);
        ck_assert_str_eq(ps_test_text(rec(b, sizeof b, "env", j, 1)), env0);
        ck_assert_str_eq(ps_test_text(rec(a, sizeof a, "args", j, 0)),
                         ps_test_text(rec(b, sizeof b, "args", j, 1)));
        ck_assert_str_eq(ps_test_text(rec(a, sizeof a, "job", j, 1)), "unset\n");
        ck_assert_int_eq(access(rec(a, sizeof a, "tf", j, 2), F_OK), -1); /* two starts */
    }
    ck_assert_str_ne(ps_test_text(rec(a, sizeof a, "env", 0, 0)),
                     ps_test_text(rec(b, sizeof b, "env", 1, 0)));
    ck_assert_int_eq(ps_test_recorded_alive_after_wait(tdir, 3000), 0);
    ps_test_run_free(&r);
}
END_TEST

/* (d) exit status 2 (bad configuration) fails the job at once: no restart, psctl exits 1
 * and stops the other worker and the shard; so does 4 (a shard lost the job's variables),
 * as for psworker. _i: 0 exit 2, 1 exit 4. */
START_TEST(test_exit_2_or_4_fails_at_once) {
    char cmd[8192];
    worker_cmd(cmd, sizeof cmd, _i ? "exit4-0" : "exit2-0", "");
    const char *args[] = {"psctl",  "local", "--ps",           "1", "--workers",    "2",
                          "--mode", "sync",  "--max-restarts", "5", "--worker-cmd", cmd,
                          NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, &r);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    if (_i) {
        ck_assert_contains(r.err, "psctl: worker 0 failed (exit status 4): a psd shard lost the "
                                  "job's variables");
        ck_assert_msg(strstr(r.err, "--recreate-lost-variables") == NULL,
                      "suggests a refused flag:\n%s", r.err);
    } else {
        ck_assert_contains(r.err, "psctl: worker 0 failed (exit status 2); exit status 2 means bad "
                                  "configuration: not restarted\n");
    }
    ck_assert_msg(strstr(r.err, "restarting") == NULL, "restarted:\n%s", r.err);
    ck_assert_msg(strstr(r.err, "job finished") == NULL, "claims success:\n%s", r.err);
    char path[4200];
    ck_assert_int_eq(access(rec(path, sizeof path, "tf", 0, 0), F_OK), 0);
    ck_assert_int_eq(access(rec(path, sizeof path, "tf", 0, 1), F_OK), -1);
    ck_assert_msg(r.secs < 15.0, "took %.1f s", r.secs); /* worker 1 sleeps 30 s unless stopped */
    ck_assert_int_eq(ps_test_recorded_alive_after_wait(tdir, 3000), 0);
    ps_test_run_free(&r);
}
END_TEST

/* (e) what --worker-cmd refuses: exit 2 before anything starts, naming the flag. */
static const struct {
    const char *flag, *value, *message;
} refused[] = {
    {"--batch", "32",
     "psctl local: --batch configures psworker and is not used with "
     "--worker-cmd; pass it in the command instead\n"},
    {"--epochs", "2", "psctl local: --epochs configures psworker"},
    {"--model", "m.json", "psctl local: --model configures psworker"},
    {"--data", "d", "psctl local: --data configures psworker"},
    {"--seed", "1", "psctl local: --seed configures psworker"},
    {"--summary", "s.json", "psctl local: --summary configures psworker"},
    {"--gpus", "all", "psctl local: --gpus configures psworker"},
    {"--recreate-lost-variables", NULL, "psctl local: --recreate-lost-variables configures "},
    {"--", "--lr", "psctl local: the arguments after \"--\" (--lr ...) go to psworker"},
    {"--strategy", "mirrored",
     "psctl local: --worker-cmd applies to --strategy "
     "parameter_server only"},
};

START_TEST(test_refused_flags) {
    const char *args[16] = {"psctl",  "local", "--ps",         "1",   "--workers", "1",
                            "--mode", "sync",  "--worker-cmd", "true"};
    int n = 10;
    if (strcmp(refused[_i].flag, "--strategy") == 0) n = 4, args[2] = "--workers", args[3] = "1";
    args[n++] = refused[_i].flag;
    if (refused[_i].value) args[n++] = refused[_i].value;
    if (strcmp(refused[_i].flag, "--strategy") == 0) args[n++] = "--worker-cmd", args[n++] = "true";
    args[n] = NULL;
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, &r);
    ck_assert_msg(ps_test_run_exit_code(&r) == 2, "%s: exit %d, stderr:\n%s", refused[_i].flag,
                  ps_test_run_exit_code(&r), r.err);
    ck_assert_contains(r.err, refused[_i].message);
    ck_assert_msg(r.out_len == 0 && strstr(r.err, "[psd") == NULL, "started something:\n%s%s",
                  r.out, r.err);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_help_documents_worker_cmd) {
    const char *args[] = {"psctl", "local", "--help", NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, &r);
    ck_assert_int_eq(ps_test_run_exit_code(&r), 0);
    const char *want[] = {
        "--worker-cmd CMD",        "/bin/sh -c 'exec CMD'", "TF_CONFIG=", "PS_JOB_ID",
        "nothing listens on them", "worker 0 is the chief", NULL};
    for (const char *const *w = want; *w; w++)
        ck_assert_contains(r.out, *w);
    ps_test_run_free(&r);
}
END_TEST

static Suite *worker_cmd_suite(void) {
    Suite *s = suite_create("psctl_worker_cmd");
    TCase *tc = tcase_create("worker_cmd");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 45);
    tcase_add_loop_test(tc, test_tf_config_and_output, 0, 2);
    tcase_add_test(tc, test_restart_same_env);
    tcase_add_loop_test(tc, test_exit_2_or_4_fails_at_once, 0, 2);
    tcase_add_loop_test(tc, test_refused_flags, 0, (int)(sizeof refused / sizeof refused[0]));
    tcase_add_test(tc, test_help_documents_worker_cmd);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_main_needing("PSD PSCTL", worker_cmd_suite);
}
