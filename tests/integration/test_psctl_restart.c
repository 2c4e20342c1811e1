/* Integration tests for psctl's supervision (restarts with backoff, same psd port,
 * --max-restarts, psd pass-through flags) and for `psctl checkpoint` / `psctl shutdown`
 * against fake shards (a ROUTER in a thread of this test) and a real psd. */
#include "proc.h"
#include "ps_error.h"
#include "run.h"
#include "testutil.h"
#include "wire.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

/* ---- fake binaries ------------------------------------------------------------- */

/* Fake psd: appends its arguments to psd-<shard>.argv, writes 127.0.0.1:<port> to its
 * ready file (22000+shard for --port 0, else the port it was given, plus 100 when
 * $FAKE_PSD_WRONG_PORT names it), or ipc://PATH when given --ipc-path PATH. When $FAKE_PSD_DIE
 * names it, it waits until worker 0 started, then dies ($FAKE_PSD_DIE_HOW: "kill" = SIGKILL, else
 * that exit status) on its first $FAKE_PSD_DIE_RUNS runs (all when unset). Otherwise waits for
 * SIGTERM. */
static const char fake_psd[] =
    "#!/bin/sh\n"
    "echo $$ > \"$FAKE_DIR/pid.psd.$$\"\n"
    "all=\"$*\"; ready=''; shard=''; port=''; ipc=''\n"
    "while [ $# -gt 0 ]; do\n"
    "  case \"$1\" in --ready-file) ready=\"$2\"; shift;; --shard) shard=\"$2\"; shift;;\n"
    "    --port) port=\"$2\"; shift;; --ipc-path) ipc=\"$2\"; shift;; esac\n"
    "  shift\n"
    "done\n"
    "echo \"$all\" >> \"$FAKE_DIR/psd-$shard.argv\"\n"
    "trap 'exit 0' TERM\n"
    "if [ \"$port\" = 0 ]; then port=$((22000 + shard));\n"
    "elif [ \"$FAKE_PSD_WRONG_PORT\" = \"$shard\" ]; then port=$((port + 100)); fi\n"
    "ep=\"127.0.0.1:$port\"; if [ -n \"$ipc\" ]; then ep=\"ipc://$ipc\"; fi\n"
    "echo \"$ep\" > \"$ready.tmp\" && mv \"$ready.tmp\" \"$ready\"\n"
    "echo \"psd $shard up on $port\"\n"
    "if [ \"$FAKE_PSD_DIE\" = \"$shard\" ]; then\n"
    "  n=$(wc -l < \"$FAKE_DIR/psd-$shard.argv\")\n"
    "  if [ -z \"$FAKE_PSD_DIE_RUNS\" ] || [ \"$n\" -le \"$FAKE_PSD_DIE_RUNS\" ]; then\n"
    "    i=0\n"
    "    while [ ! -e \"$FAKE_DIR/worker-0.starts\" ] && [ $i -lt 400 ]; do\n"
    "      sleep 0.05; i=$((i + 1))\n"
    "    done\n"
    "    if [ \"$FAKE_PSD_DIE_HOW\" = kill ]; then kill -9 $$; fi\n"
    "    exit \"$FAKE_PSD_DIE_HOW\"\n"
    "  fi\n"
    "fi\n"
    "sleep 1000 &\n"
    "echo $! > \"$FAKE_DIR/pid.sleep.$!\"\n"
    "wait $!\n"
    "exit 0\n";

/* Fake psworker: appends "ARGS|$FAKE_TOKEN|$PS_PARENT_PID" to worker-<i>.starts and the
 * time in ns to worker-<i>.times. If --die-index names it, dies (--die-how kill: SIGKILL,
 * else that exit status) on its first --die-runs runs (all when not given); then
 * hangs with --hang, else exits 0. */
static const char fake_worker[] =
    "#!/bin/sh\n"
    "echo $$ > \"$FAKE_DIR/pid.worker.$$\"\n"
    "all=\"$*\"; idx=''; die=''; how=''; runs=''; hang=''\n"
    "while [ $# -gt 0 ]; do\n"
    "  case \"$1\" in --index) idx=\"$2\"; shift;; --die-index) die=\"$2\"; shift;;\n"
    "    --die-how) how=\"$2\"; shift;; --die-runs) runs=\"$2\"; shift;; --hang) hang=1;; esac\n"
    "  shift\n"
    "done\n"
    "echo \"$all|${FAKE_TOKEN-unset}|${PS_PARENT_PID-unset}\" >> \"$FAKE_DIR/worker-$idx.starts\"\n"
    "date +%s%N >> \"$FAKE_DIR/worker-$idx.times\"\n"
    "echo \"worker $idx started\"\n"
    "if [ \"$die\" = \"$idx\" ]; then\n"
    "  n=$(wc -l < \"$FAKE_DIR/worker-$idx.starts\")\n"
    "  if [ -z \"$runs\" ] || [ \"$n\" -le \"$runs\" ]; then\n"
    "    if [ \"$how\" = kill ]; then kill -9 $$; fi\n"
    "    exit \"$how\"\n"
    "  fi\n"
    "fi\n"
    "if [ -n \"$hang\" ]; then\n"
    "  sleep 1000 &\n"
    "  echo $! > \"$FAKE_DIR/pid.sleep.$!\"\n"
    "  echo \"worker $idx hanging\" >&2\n"
    "  wait $!\n"
    "fi\n"
    "exit 0\n";

static char *tdir; /* this test's temp dir: scripts, pid files, argv records */
static char fake_psd_path[4096], fake_worker_path[4096];

static void write_script(char *path, size_t n, const char *name, const char *text) {
    snprintf(path, n, "%s/%s", tdir, name);
    ck_assert_int_eq(ps_test_write_file(path, text, strlen(text)), 0);
    ck_assert_int_eq(chmod(path, 0755), 0);
}

/* ---- processes (the runner is the kit's, run.h) ---------------------------------- */

static int for_each_recorded(int (*fn)(pid_t)) {
    return ps_test_for_each_recorded(tdir, fn);
}

/* Waits (up to 3 s) until no recorded process is alive; returns how many still are. */
static int recorded_alive_after_wait(void) {
    return ps_test_recorded_alive_after_wait(tdir, 3000);
}

/* Runs psctl with the fakes as PSD/PSWORKER (plus extra env), bounded by 30 s. */
static void run_psctl(const char *const *args, const char *const *env, ps_test_run_hook hook,
                      void *ctx, ps_test_run_result *r) {
    const char *exe = getenv("PSCTL");
    ck_assert_msg(exe != NULL, "PSCTL is not set");
    static char e_psd[4200], e_worker[4200], e_dir[4200];
    snprintf(e_psd, sizeof e_psd, "PSD=%s", fake_psd_path);
    snprintf(e_worker, sizeof e_worker, "PSWORKER=%s", fake_worker_path);
    snprintf(e_dir, sizeof e_dir, "FAKE_DIR=%s", tdir);
    const char *all_env[32] = {e_psd, e_worker, e_dir, "PS_PARENT_PID=", "TF_CONFIG="};
    int n = 5;
    for (const char *const *e = env; e && *e && n < 31; e++)
        all_env[n++] = *e;
    all_env[n] = NULL;
    ps_test_run(exe, args, all_env, 30.0, hook, ctx, r);
}

/* Hook: SIGTERM to the process once the text ctx appears on its stderr. */
static void term_on_marker(const ps_test_run_result *r, void *ctx) {
    static pid_t signalled;
    if (signalled != r->pid && strstr(r->err, (const char *)ctx)) {
        kill(r->pid, SIGTERM);
        signalled = r->pid;
    }
}

/* The lines of tdir/name (at most 16, each malloc'd); returns how many. */
static int read_lines(const char *name, char *lines[16]) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", tdir, name);
    FILE *f = fopen(path, "r");
    int n = 0;
    if (!f) return 0;
    char buf[8192];
    while (n < 16 && fgets(buf, sizeof buf, f)) {
        buf[strcspn(buf, "\n")] = '\0';
        lines[n++] = strdup(buf);
    }
    fclose(f);
    return n;
}

static void free_lines(char *lines[16], int n) {
    for (int i = 0; i < n; i++)
        free(lines[i]);
}

static int count_lines(const char *name) {
    char *lines[16];
    int n = read_lines(name, lines);
    free_lines(lines, n);
    return n;
}

/* Removes the argv/start records of earlier runs in this test's dir. */
static void forget_runs(void) {
    DIR *d = opendir(tdir);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "psd-", 4) != 0 && strncmp(e->d_name, "worker-", 7) != 0) continue;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", tdir, e->d_name);
        unlink(path);
    }
    closedir(d);
}

#define ck_assert_contains(hay, needle)                                                            \
    ck_assert_msg(strstr((hay), (needle)) != NULL, "missing \"%s\" in:\n%s", (needle), (hay))
#define ck_assert_lacks(hay, needle)                                                               \
    ck_assert_msg(strstr((hay), (needle)) == NULL, "unexpected \"%s\" in:\n%s", (needle), (hay))

/* ---- fake shards: a ROUTER in a thread that answers as told ----------------------- */

typedef enum {
    SHARD_OK,           /* checkpoint_reply / shutdown_reply */
    SHARD_ERROR,        /* an Error reply */
    SHARD_SILENT,       /* reads the request, never answers */
    SHARD_OLD_ID_FIRST, /* a reply with another request id first, then the right one */
} shard_behaviour;

typedef struct {
    shard_behaviour behaviour;
    void *zctx, *sock;
    char endpoint[64]; /* "127.0.0.1:PORT" */
    pthread_t thread;
    int running;
    atomic_int stop;
    atomic_int requests;    /* requests received */
    atomic_int last_body;   /* body case of the last request */
    atomic_uint last_proto; /* its protocol_version */
} fake_shard;

#define MAX_SHARDS 4
static fake_shard shards[MAX_SHARDS];

static void shard_reply(fake_shard *s, const zmq_msg_t *id, const Ps__Header *req, uint64_t rid) {
    Ps__Header h = PS__HEADER__INIT;
    Ps__CheckpointReply cr = PS__CHECKPOINT_REPLY__INIT;
    Ps__ShutdownReply sr = PS__SHUTDOWN_REPLY__INIT;
    Ps__Error er = PS__ERROR__INIT;
    char path[128];
    h.protocol_version = PS_PROTOCOL_VERSION;
    h.request_id = rid;
    int index = (int)(s - shards);
    if (s->behaviour == SHARD_ERROR) {
        er.code = PS_EINVAL;
        er.code_name = "EINVAL";
        er.message = "no --checkpoint-dir";
        h.body_case = PS__HEADER__BODY_ERROR;
        h.error = &er;
    } else if (req->body_case == PS__HEADER__BODY_CHECKPOINT) {
        snprintf(path, sizeof path, "/ckpt/ps-%d/ckpt-%d.bin", index, 1234 + index);
        cr.path = path;
        cr.version = (uint64_t)(1234 + index);
        cr.bytes = 5200000;
        h.body_case = PS__HEADER__BODY_CHECKPOINT_REPLY;
        h.checkpoint_reply = &cr;
    } else {
        h.body_case = PS__HEADER__BODY_SHUTDOWN_REPLY;
        h.shutdown_reply = &sr;
    }
    ps_wire_send(s->sock, zmq_msg_data((zmq_msg_t *)id), zmq_msg_size(id), &h, NULL, 0,
                 ZMQ_DONTWAIT);
}

static void *shard_main(void *arg) {
    fake_shard *s = arg;
    while (!atomic_load(&s->stop)) {
        zmq_pollitem_t item = {s->sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, 20) <= 0 || !(item.revents & ZMQ_POLLIN)) continue;
        ps_frames f;
        if (ps_frames_recv(s->sock, ZMQ_DONTWAIT, &f) != PS_OK) continue;
        Ps__Header *h = NULL;
        char err[256];
        if (f.n >= 2 && ps_header_decode(zmq_msg_data(&f.frames[1]), zmq_msg_size(&f.frames[1]), &h,
                                         err, sizeof err) == PS_OK) {
            atomic_fetch_add(&s->requests, 1);
            atomic_store(&s->last_body, (int)h->body_case);
            atomic_store(&s->last_proto, h->protocol_version);
            if (s->behaviour == SHARD_OLD_ID_FIRST)
                shard_reply(s, &f.frames[0], h, h->request_id + 100);
            if (s->behaviour != SHARD_SILENT) shard_reply(s, &f.frames[0], h, h->request_id);
        }
        if (h) ps__header__free_unpacked(h, NULL);
        ps_frames_close(&f);
    }
    return NULL;
}

static fake_shard *shard_start(int i, shard_behaviour b) {
    fake_shard *s = &shards[i];
    memset(s, 0, sizeof *s);
    s->behaviour = b;
    s->zctx = zmq_ctx_new();
    ck_assert_ptr_nonnull(s->zctx);
    s->sock = zmq_socket(s->zctx, ZMQ_ROUTER);
    int linger = 0;
    zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof linger);
    ck_assert_int_eq(zmq_bind(s->sock, "tcp://127.0.0.1:*"), 0);
    char last[64];
    size_t len = sizeof last;
    ck_assert_int_eq(zmq_getsockopt(s->sock, ZMQ_LAST_ENDPOINT, last, &len), 0);
    snprintf(s->endpoint, sizeof s->endpoint, "%.40s", last + strlen("tcp://"));
    ck_assert_int_eq(pthread_create(&s->thread, NULL, shard_main, s), 0);
    s->running = 1;
    return s;
}

static void shard_stop(fake_shard *s) {
    if (!s->running) return;
    atomic_store(&s->stop, 1);
    pthread_join(s->thread, NULL);
    zmq_close(s->sock);
    zmq_ctx_term(s->zctx);
    s->running = 0;
}

/* ---- fixture -------------------------------------------------------------------
 * A failed assertion ends a test with _exit (Check, fork mode): neither the checked
 * teardown nor atexit runs. So every TCase gets a base dir from an unchecked fixture,
 * which runs in the Check parent: $TMPDIR points into it (test dirs, psctl's run dirs
 * and psd dirs of ps_test_psd_start all land there), and after the TCase it kills every
 * process recorded in any test dir under it and removes it all. */

static char *base_dir;
static char *saved_tmpdir;

static void base_setup(void) {
    const char *t = getenv("TMPDIR");
    saved_tmpdir = t ? strdup(t) : NULL;
    base_dir = ps_test_mkdtemp();
    ck_assert_ptr_nonnull(base_dir);
    setenv("TMPDIR", base_dir, 1);
    prctl(PR_SET_CHILD_SUBREAPER, 1); /* orphans of a failed test come here to be reaped */
}

static void base_teardown(void) {
    DIR *d = opendir(base_dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", base_dir, e->d_name);
        if (ps_test_for_each_recorded(path, ps_test_kill_if_alive) > 0)
            fprintf(stderr, "killed processes a failed test left behind (%s)\n", path);
    }
    if (d) closedir(d);
    ps_test_reap_all();
    ps_test_rmdir(base_dir);
    free(base_dir);
    base_dir = NULL;
    if (saved_tmpdir)
        setenv("TMPDIR", saved_tmpdir, 1);
    else
        unsetenv("TMPDIR");
    free(saved_tmpdir);
    saved_tmpdir = NULL;
}

static void setup(void) {
    prctl(PR_SET_CHILD_SUBREAPER, 1); /* orphaned fakes come to us, so we can reap them */
    tdir = ps_test_mkdtemp();         /* under base_dir */
    ck_assert_ptr_nonnull(tdir);
    write_script(fake_psd_path, sizeof fake_psd_path, "fake-psd", fake_psd);
    write_script(fake_worker_path, sizeof fake_worker_path, "fake-worker", fake_worker);
}

/* The test passed: stop what it started, remove its dir. */
static void teardown(void) {
    for (int i = 0; i < MAX_SHARDS; i++)
        shard_stop(&shards[i]);
    if (!tdir) return;
    for_each_recorded(ps_test_kill_if_alive);
    ps_test_reap_all();
    ps_test_rmdir(tdir);
    free(tdir);
    tdir = NULL;
}

/* ---- restarts ------------------------------------------------------------------ */

START_TEST(test_worker_sigkilled_once_is_restarted_and_job_succeeds) {
    const char *args[] = {"psctl",  "local",      "--ps", "1",           "--workers", "2",
                          "--mode", "sync",       "--",   "--die-index", "1",         "--die-how",
                          "kill",   "--die-runs", "1",    NULL};
    const char *env[] = {"FAKE_TOKEN=abc", NULL};
    ps_test_run_result r;
    run_psctl(args, env, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: worker 1 killed by signal 9; restarting (1/3)\n");
    ck_assert_contains(r.err, "psctl: job finished: 1 ps, 2 workers, mode sync\n");
    /* Restarted with the same arguments and environment (PS_PARENT_PID included). */
    char *lines[16];
    int n = read_lines("worker-1.starts", lines);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(lines[0], lines[1]);
    ck_assert_contains(lines[0], "--index 1 ");
    ck_assert_contains(lines[0], "|abc|");
    free_lines(lines, n);
    ck_assert_int_eq(count_lines("worker-0.starts"), 1);
    ck_assert_int_eq(count_lines("psd-0.argv"), 1);
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

/* Nanoseconds between start k and k+1 of worker j (from worker-<j>.times). */
static double start_gap_s(int j, int k) {
    char name[64], *lines[16];
    snprintf(name, sizeof name, "worker-%d.times", j);
    int n = read_lines(name, lines);
    ck_assert_int_gt(n, k + 1);
    double gap = (double)(atoll(lines[k + 1]) - atoll(lines[k])) / 1e9;
    free_lines(lines, n);
    return gap;
}

START_TEST(test_worker_always_failing_gives_up_after_max_restarts) {
    const char *args[] = {"psctl", "local",          "--ps", "1",  "--workers",   "2", "--mode",
                          "async", "--max-restarts", "2",    "--", "--die-index", "1", "--die-how",
                          "3",     "--hang",         NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: worker 1 exited with status 3; restarting (1/2)\n");
    ck_assert_contains(r.err, "psctl: worker 1 exited with status 3; restarting (2/2)\n");
    ck_assert_contains(r.err, "psctl: worker 1 failed (exit status 3); gave up after 2 restarts "
                              "(--max-restarts 2)\n");
    ck_assert_lacks(r.err, "job finished");
    ck_assert_int_eq(count_lines("worker-1.starts"), 3);
    ck_assert_int_eq(count_lines("worker-0.starts"), 1);
    /* Backoff: 0.2 s before the first restart, 0.4 s before the second. */
    double g0 = start_gap_s(1, 0), g1 = start_gap_s(1, 1);
    ck_assert_msg(g0 >= 0.18 && g0 < 3.0, "first restart after %.3f s", g0);
    ck_assert_msg(g1 >= 0.38 && g1 < 3.0, "second restart after %.3f s", g1);
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_sigterm_while_a_restart_is_pending_stops_at_once) {
    /* The third restart waits 0.8 s; SIGTERM then must cancel it, not wait for it. */
    const char *args[] = {
        "psctl", "local", "--ps",        "1", "--workers", "1", "--mode", "sync", "--max-restarts",
        "10",    "--",    "--die-index", "0", "--die-how", "3", NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, term_on_marker, "restarting (3/10)", &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 143, "exit %d, stderr:\n%s",
                  ps_test_run_exit_code(&r), r.err);
    ck_assert_contains(r.err, "psctl: got SIGTERM; stopping all processes\n");
    ck_assert_lacks(r.err, "restarting (4/10)");
    ck_assert_int_eq(count_lines("worker-0.starts"), 3);
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_psd_sigkilled_comes_back_on_its_port) {
    const char *args[] = {"psctl", "local",       "--ps", "2",  "--workers", "1", "--mode",
                          "sync",  "--transport", "tcp",  "--", "--hang",    NULL};
    const char *env[] = {"FAKE_PSD_DIE=1", "FAKE_PSD_DIE_HOW=kill", "FAKE_PSD_DIE_RUNS=1", NULL};
    ps_test_run_result r;
    run_psctl(args, env, term_on_marker, "psd 1 back at", &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 143, "exit %d, stderr:\n%s",
                  ps_test_run_exit_code(&r), r.err);
    ck_assert_contains(r.err, "psctl: psd 1 killed by signal 9; restarting (1/3)\n");
    ck_assert_contains(r.err, "psctl: psd 1 back at 127.0.0.1:22001\n");
    /* First start --port 0, the restart --port 22001; everything else the same. */
    char *lines[16];
    int n = read_lines("psd-1.argv", lines);
    ck_assert_int_eq(n, 2);
    ck_assert_contains(lines[0], "--port 0 ");
    ck_assert_contains(lines[1], "--port 22001 ");
    char *p = strstr(lines[1], "--port 22001 ");
    memmove(p + strlen("--port 0 "), p + strlen("--port 22001 "),
            strlen(p + strlen("--port 22001 ")) + 1);
    memcpy(p, "--port 0 ", strlen("--port 0 "));
    ck_assert_str_eq(lines[0], lines[1]);
    free_lines(lines, n);
    ck_assert_int_eq(count_lines("psd-0.argv"), 1);
    ck_assert_int_eq(count_lines("worker-0.starts"), 1); /* the workers keep running */
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_psd_failing_gives_up_naming_it) {
    const char *args[] = {"psctl", "local",          "--ps", "1",  "--workers", "1", "--mode",
                          "sync",  "--max-restarts", "1",    "--", "--hang",    NULL};
    const char *env[] = {"FAKE_PSD_DIE=0", "FAKE_PSD_DIE_HOW=1", NULL};
    ps_test_run_result r;
    run_psctl(args, env, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: psd 0 exited with status 1; restarting (1/1)\n");
    ck_assert_contains(r.err, "psctl: psd 0 failed (exit status 1); gave up after 1 restart "
                              "(--max-restarts 1)\n");
    ck_assert_int_eq(count_lines("psd-0.argv"), 2);
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_psd_back_on_another_port_stops_job) {
    const char *args[] = {"psctl", "local",       "--ps", "1",  "--workers", "1", "--mode",
                          "sync",  "--transport", "tcp",  "--", "--hang",    NULL};
    const char *env[] = {"FAKE_PSD_DIE=0", "FAKE_PSD_DIE_HOW=kill", "FAKE_PSD_DIE_RUNS=1",
                         "FAKE_PSD_WRONG_PORT=0", NULL};
    ps_test_run_result r;
    run_psctl(args, env, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: psd 0 came back at 127.0.0.1:22100, not at "
                              "127.0.0.1:22000 where the workers expect it; stopping\n");
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_max_restarts_0_stops_everything_at_first_failure) {
    const char *wargs[] = {
        "psctl", "local",          "--ps", "2",      "--workers",   "2", "--mode",
        "sync",  "--max-restarts", "0",    "--",     "--die-index", "1", "--die-how",
        "kill",  "--die-runs",     "1",    "--hang", NULL};
    ps_test_run_result r;
    run_psctl(wargs, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: worker 1 killed by signal 9\n");
    ck_assert_lacks(r.err, "restarting");
    ck_assert_int_eq(count_lines("worker-1.starts"), 1);
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);

    const char *pargs[] = {"psctl", "local",          "--ps", "2",  "--workers", "1", "--mode",
                           "sync",  "--max-restarts", "0",    "--", "--hang",    NULL};
    const char *env[] = {"FAKE_PSD_DIE=1", "FAKE_PSD_DIE_HOW=kill", NULL};
    forget_runs(); /* the fake psd dies once worker 0 has started: this time, not last */
    run_psctl(pargs, env, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: psd 1 killed by signal 9\n");
    ck_assert_lacks(r.err, "restarting");
    ck_assert_int_eq(count_lines("psd-1.argv"), 1);
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_exit_status_2_is_not_restarted) {
    const char *args[] = {"psctl", "local", "--ps",        "1", "--workers", "1", "--mode",
                          "sync",  "--",    "--die-index", "0", "--die-how", "2", NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: worker 0 failed (exit status 2); exit status 2 means bad "
                              "configuration: not restarted\n");
    ck_assert_int_eq(count_lines("worker-0.starts"), 1);
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

/* ---- psd flags ------------------------------------------------------------------- */

START_TEST(test_psd_flags_passed_through) {
    char ckpt[4200], want[4400], sub[4300];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt/run1", tdir); /* two levels made */
    const char *args[] = {"psctl",
                          "local",
                          "--ps",
                          "2",
                          "--workers",
                          "2",
                          "--mode",
                          "sync",
                          "--checkpoint-dir",
                          ckpt,
                          "--checkpoint-every",
                          "30",
                          "--worker-timeout",
                          "5000",
                          "--replicas-to-aggregate",
                          "1",
                          NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    for (int i = 0; i < 2; i++) {
        char name[32], *lines[16];
        snprintf(name, sizeof name, "psd-%d.argv", i);
        int n = read_lines(name, lines);
        ck_assert_int_eq(n, 1);
        snprintf(want, sizeof want,
                 "--checkpoint-dir %s/ps-%d --checkpoint-every 30 --worker-timeout 5000 "
                 "--replicas-to-aggregate 1",
                 ckpt, i);
        ck_assert_contains(lines[0], want);
        ck_assert_lacks(lines[0], "--staleness");
        free_lines(lines, n);
        struct stat st;
        snprintf(sub, sizeof sub, "%s/ps-%d", ckpt, i);
        ck_assert_msg(stat(sub, &st) == 0 && S_ISDIR(st.st_mode), "%s was not made", sub);
    }
    ps_test_run_free(&r);

    /* async: --staleness; without the other flags none of them is passed. */
    const char *async_args[] = {"psctl",  "local", "--ps",        "1", "--workers", "1",
                                "--mode", "async", "--staleness", "4", NULL};
    forget_runs();
    run_psctl(async_args, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    char *lines[16];
    int n = read_lines("psd-0.argv", lines);
    ck_assert_int_eq(n, 1);
    ck_assert_contains(lines[0], "--mode async --ready-file ");
    ck_assert_contains(lines[0], " --staleness 4");
    ck_assert_lacks(lines[0], "--checkpoint");
    ck_assert_lacks(lines[0], "--worker-timeout");
    ck_assert_lacks(lines[0], "--replicas");
    free_lines(lines, n);
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

typedef struct {
    const char *args[20];
    const char *want; /* in stderr */
} bad_case;

#define LOCAL "psctl", "local", "--ps", "1", "--workers", "2"
static const bad_case bad_cases[] = {
    {{LOCAL, "--mode", "sync", "--max-restarts", "-1", NULL}, "--max-restarts needs an integer"},
    {{LOCAL, "--mode", "sync", "--max-restarts", "x", NULL}, "--max-restarts"},
    {{LOCAL, "--mode", "sync", "--max-restarts", "1001", NULL}, "from 0 to 1000"},
    {{LOCAL, "--mode", "sync", "--checkpoint-dir", "", NULL}, "--checkpoint-dir needs"},
    {{LOCAL, "--mode", "sync", "--checkpoint-dir", "d", "--checkpoint-every", "-5", NULL},
     "--checkpoint-every needs an integer"},
    {{LOCAL, "--mode", "sync", "--checkpoint-dir", "d", "--checkpoint-every", "1.5", NULL},
     "--checkpoint-every"},
    {{LOCAL, "--mode", "sync", "--checkpoint-every", "10", NULL},
     "--checkpoint-every needs --checkpoint-dir"},
    {{LOCAL, "--mode", "sync", "--worker-timeout", "abc", NULL}, "--worker-timeout needs"},
    {{LOCAL, "--mode", "sync", "--worker-timeout", "-1", NULL}, "--worker-timeout needs"},
    {{LOCAL, "--mode", "sync", "--replicas-to-aggregate", "-1", NULL}, "--replicas-to-aggregate"},
    {{LOCAL, "--mode", "sync", "--replicas-to-aggregate", "3", NULL},
     "--replicas-to-aggregate 3 is more than the 2 workers"},
    {{LOCAL, "--mode", "async", "--replicas-to-aggregate", "1", NULL}, "--mode sync only"},
    {{LOCAL, "--mode", "async", "--staleness", "-2", NULL}, "--staleness needs an integer"},
    {{LOCAL, "--mode", "sync", "--staleness", "2", NULL}, "--mode async only"},
    {{LOCAL, "--mode", "sync", "--job-id", "a b", NULL}, "--job-id needs 1 to 64 of"},
    {{"psctl", "checkpoint", NULL}, "--ps is required (or TF_CONFIG with cluster.ps)"},
    {{"psctl", "checkpoint", "--ps", "127.0.0.1:1", "--timeout", "0", NULL}, "--timeout needs"},
    {{"psctl", "checkpoint", "--ps", "127.0.0.1:1", "--timeout", "ten", NULL}, "--timeout"},
    {{"psctl", "checkpoint", "--ps", "", NULL}, "--ps lists no ps shards"},
    {{"psctl", "checkpoint", "--ps", "localhost", NULL}, "--ps"},
    {{"psctl", "shutdown", "--ps", "127.0.0.1:0", NULL}, "port 1..65535"},
    {{"psctl", "shutdown", "--ps", "127.0.0.1:1", "stray", NULL}, "unexpected argument 'stray'"},
    {{"psctl", "shutdown", "--bogus", NULL}, "unknown option '--bogus'"},
    {{"psctl", "shutdown", "--ps", NULL}, "needs a value"},
};

START_TEST(test_bad_flag_values_exit_2) {
    const bad_case *c = &bad_cases[_i];
    ps_test_run_result r;
    run_psctl(c->args, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 2, "case %d: exit %d, stderr:\n%s", _i,
                  ps_test_run_exit_code(&r), r.err);
    ck_assert_contains(r.err, c->want);
    ck_assert_int_eq(for_each_recorded(ps_test_proc_alive) + count_lines("psd-0.argv"), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_checkpoint_dir_that_cannot_be_made_exit_2) {
    char file[4200], dir[4300];
    snprintf(file, sizeof file, "%s/a-file", tdir);
    ck_assert_int_eq(ps_test_write_file(file, "x", 1), 0);
    snprintf(dir, sizeof dir, "%s/ckpt", file);
    const char *args[] = {LOCAL, "--mode", "sync", "--checkpoint-dir", dir, NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 2, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl local: --checkpoint-dir: cannot make ");
    ck_assert_int_eq(count_lines("psd-0.argv"), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_help_lists_new_flags_and_commands) {
    const char *top[] = {"psctl", "--help", NULL};
    const char *local[] = {"psctl", "local", "--help", NULL};
    const char *ckpt[] = {"psctl", "checkpoint", "--help", NULL};
    const char *shut[] = {"psctl", "shutdown", "-h", NULL};
    ps_test_run_result r;
    run_psctl(top, NULL, NULL, NULL, &r);
    ck_assert_int_eq(ps_test_run_exit_code(&r), 0);
    ck_assert_contains(r.out, "  checkpoint ");
    ck_assert_contains(r.out, "  shutdown ");
    ps_test_run_free(&r);
    run_psctl(local, NULL, NULL, NULL, &r);
    ck_assert_int_eq(ps_test_run_exit_code(&r), 0);
    const char *flags[] = {"--max-restarts N",
                           "--checkpoint-dir DIR",
                           "DIR/ps-<i>",
                           "--checkpoint-every SECONDS",
                           "--worker-timeout MS",
                           "--replicas-to-aggregate R",
                           "--staleness S",
                           "Restarts:",
                           "--port P",
                           NULL};
    for (const char *const *f = flags; *f; f++)
        ck_assert_contains(r.out, *f);
    ps_test_run_free(&r);
    const char *const *cmds[] = {ckpt, shut};
    for (int i = 0; i < 2; i++) {
        run_psctl(cmds[i], NULL, NULL, NULL, &r);
        ck_assert_int_eq(ps_test_run_exit_code(&r), 0);
        ck_assert_contains(r.out, "--ps HOST:PORT,...");
        ck_assert_contains(r.out, "--timeout SECONDS");
        ck_assert_contains(r.out, "TF_CONFIG");
        ps_test_run_free(&r);
    }
}
END_TEST

/* ---- psctl checkpoint / shutdown ---------------------------------------------------- */

/* Runs `psctl CMD --ps <the shards' endpoints> [extra...]`. */
static void run_admin(const char *cmd, int nshards, const char *const *extra,
                      ps_test_run_result *r) {
    char list[256] = "";
    for (int i = 0; i < nshards; i++) {
        if (i) strcat(list, ",");
        strcat(list, shards[i].endpoint);
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
                 i, shards[i].endpoint, 1234 + i, i, 1234 + i);
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
    snprintf(want, sizeof want, "ps 0 %s: checkpoint version 1234 ", shards[0].endpoint);
    ck_assert_contains(r.out, want);
    snprintf(want, sizeof want, "ps 1 %s: checkpoint failed: EINVAL: no --checkpoint-dir\n",
             shards[1].endpoint);
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
    snprintf(want, sizeof want, "ps 0 %s: no answer within 0.5 s\n", shards[0].endpoint);
    ck_assert_contains(r.err, want);
    snprintf(want, sizeof want, "ps 1 %s: checkpoint version 1235 ", shards[1].endpoint);
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
             shards[0].endpoint, shards[1].endpoint);
    const char *args[] = {"psctl", "shutdown", NULL};
    const char *env[] = {tf, NULL};
    ps_test_run_result r;
    run_psctl(args, env, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    char want[256];
    for (int i = 0; i < 2; i++) {
        snprintf(want, sizeof want, "ps %d %s: shutting down\n", i, shards[i].endpoint);
        ck_assert_contains(r.out, want);
        ck_assert_int_eq(atomic_load(&shards[i].last_body), PS__HEADER__BODY_SHUTDOWN);
    }
    ps_test_run_free(&r);

    /* TF_CONFIG's placeholders are not addresses. */
    const char *bad_env[] = {"TF_CONFIG={\"cluster\": {\"ps\": [\"host1:port\"]}}", NULL};
    run_psctl(args, bad_env, NULL, NULL, &r);
    ck_assert_int_eq(ps_test_run_exit_code(&r), 2);
    ck_assert_contains(r.err, "psctl shutdown: TF_CONFIG: ps 0 'host1:port' is not HOST:PORT");
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

static Suite *psctl_restart_suite(void) {
    Suite *s = suite_create("psctl_restart");
    TCase *sup = tcase_create("supervision");
    tcase_add_unchecked_fixture(sup, base_setup, base_teardown);
    tcase_add_checked_fixture(sup, setup, teardown);
    tcase_set_timeout(sup, 60);
    tcase_add_test(sup, test_worker_sigkilled_once_is_restarted_and_job_succeeds);
    tcase_add_test(sup, test_worker_always_failing_gives_up_after_max_restarts);
    tcase_add_test(sup, test_sigterm_while_a_restart_is_pending_stops_at_once);
    tcase_add_test(sup, test_psd_sigkilled_comes_back_on_its_port);
    tcase_add_test(sup, test_psd_failing_gives_up_naming_it);
    tcase_add_test(sup, test_psd_back_on_another_port_stops_job);
    tcase_add_test(sup, test_max_restarts_0_stops_everything_at_first_failure);
    tcase_add_test(sup, test_exit_status_2_is_not_restarted);
    tcase_add_test(sup, test_psd_flags_passed_through);
    tcase_add_loop_test(sup, test_bad_flag_values_exit_2, 0,
                        (int)(sizeof bad_cases / sizeof bad_cases[0]));
    tcase_add_test(sup, test_checkpoint_dir_that_cannot_be_made_exit_2);
    tcase_add_test(sup, test_help_lists_new_flags_and_commands);
    suite_add_tcase(s, sup);

    TCase *admin = tcase_create("admin");
    tcase_add_unchecked_fixture(admin, base_setup, base_teardown);
    tcase_add_checked_fixture(admin, setup, teardown);
    tcase_set_timeout(admin, 60);
    tcase_add_test(admin, test_checkpoint_every_shard_answers);
    tcase_add_test(admin, test_checkpoint_error_reply_exit_1);
    tcase_add_test(admin, test_checkpoint_silent_shard_times_out);
    tcase_add_test(admin, test_checkpoint_nobody_listening_times_out);
    tcase_add_test(admin, test_shutdown_fake_shards_from_tfconfig);
    suite_add_tcase(s, admin);

    TCase *real = tcase_create("real psd");
    tcase_add_unchecked_fixture(real, base_setup, base_teardown);
    tcase_add_checked_fixture(real, setup, teardown);
    tcase_set_timeout(real, 60);
    tcase_add_test(real, test_shutdown_real_psd);
    tcase_add_test(real, test_checkpoint_real_psd);
    tcase_add_loop_test(real, test_real_psd_sigkilled_comes_back_on_its_port, 0, 2);
    suite_add_tcase(s, real);
    return s;
}

int main(void) {
    return ps_test_run_suite(psctl_restart_suite());
}
