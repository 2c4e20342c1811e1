/* What the psctl supervision tests (test_psctl_restart, test_psctl_flags,
 * test_psctl_admin) share: fake psd/psworker scripts, psctl run against them, fake shards
 * and the fixtures (see psctl_fakes.h). */
#include "psctl_fakes.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "ps_error.h"
#include "testutil.h"
#include "wire.h"

/* ---- fake binaries ------------------------------------------------------------- */

/* Fake psd: appends its arguments to psd-<shard>.argv (every replica of the shard), writes
 * 127.0.0.1:<port> to its ready file (22000+shard for --port 0, else the port it was given,
 * plus 100 when $FAKE_PSD_WRONG_PORT names it), or ipc://PATH when given --ipc-path PATH. When
 * $FAKE_PSD_DIE names its shard (and $FAKE_PSD_DIE_REPLICA, when set, its --replica), it waits
 * until worker 0 started, then dies ($FAKE_PSD_DIE_HOW: "kill" = SIGKILL, else that exit
 * status) on its first $FAKE_PSD_DIE_RUNS runs (all when unset). Otherwise waits for
 * SIGTERM. */
static const char fake_psd[] =
    "#!/bin/sh\n"
    "echo $$ > \"$FAKE_DIR/pid.psd.$$\"\n"
    "all=\"$*\"; ready=''; shard=''; port=''; ipc=''; replica=0\n"
    "while [ $# -gt 0 ]; do\n"
    "  case \"$1\" in --ready-file) ready=\"$2\"; shift;; --shard) shard=\"$2\"; shift;;\n"
    "    --port) port=\"$2\"; shift;; --ipc-path) ipc=\"$2\"; shift;;\n"
    "    --replica) replica=\"$2\"; shift;; esac\n"
    "  shift\n"
    "done\n"
    "echo \"$all\" >> \"$FAKE_DIR/psd-$shard.argv\"\n"
    "trap 'exit 0' TERM\n"
    "if [ \"$port\" = 0 ]; then port=$((22000 + shard));\n"
    "elif [ \"$FAKE_PSD_WRONG_PORT\" = \"$shard\" ]; then port=$((port + 100)); fi\n"
    "ep=\"127.0.0.1:$port\"; if [ -n \"$ipc\" ]; then ep=\"ipc://$ipc\"; fi\n"
    "echo \"$ep\" > \"$ready.tmp\" && mv \"$ready.tmp\" \"$ready\"\n"
    "echo \"psd $shard up on $port\"\n"
    "if [ \"$FAKE_PSD_DIE\" = \"$shard\" ] &&\n"
    "   [ \"${FAKE_PSD_DIE_REPLICA-$replica}\" = \"$replica\" ]; then\n"
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

/* Fake psworker: appends "ARGS|$FAKE_TOKEN|$PS_PARENT_PID" to worker-<i>.starts, the
 * time in ns to worker-<i>.times and $TF_CONFIG to worker-<i>.tfconfig (i: --index, else
 * TF_CONFIG's task index, as in the all-reduce strategies). If --die-index names it, dies
 * (--die-how kill: SIGKILL, else that exit status) on its first --die-runs runs (all when
 * not given), with --die-wait only once the workers below it recorded as many starts as it
 * did (at most 20 s); with --wait-for NAME waits until tdir/NAME exists (at most 20 s); then
 * hangs with --hang (only on its first --hang-runs runs when given), else exits 0. */
static const char fake_worker[] =
    "#!/bin/sh\n"
    "echo $$ > \"$FAKE_DIR/pid.worker.$$\"\n"
    "all=\"$*\"; idx=''; die=''; how=''; runs=''; hang=''; hang_runs=''; die_wait=''\n"
    "wait_for=''\n"
    "while [ $# -gt 0 ]; do\n"
    "  case \"$1\" in --index) idx=\"$2\"; shift;; --die-index) die=\"$2\"; shift;;\n"
    "    --die-how) how=\"$2\"; shift;; --die-runs) runs=\"$2\"; shift;; --hang) hang=1;;\n"
    "    --hang-runs) hang_runs=\"$2\"; shift;; --die-wait) die_wait=1;;\n"
    "    --wait-for) wait_for=\"$2\"; shift;; esac\n"
    "  shift\n"
    "done\n"
    "if [ -z \"$idx\" ]; then\n"
    "  idx=$(printf '%s' \"$TF_CONFIG\" | sed -n 's/.*\"index\": *\\([0-9]*\\).*/\\1/p')\n"
    "fi\n"
    /* a SIGTERM (psctl stopping the workers) waits until all three records are written,
     * so a slow machine cannot leave one without the others */
    "term=''; trap 'term=1' TERM\n"
    "echo \"$all|${FAKE_TOKEN-unset}|${PS_PARENT_PID-unset}\" >> \"$FAKE_DIR/worker-$idx.starts\"\n"
    "date +%s%N >> \"$FAKE_DIR/worker-$idx.times\"\n"
    "echo \"${TF_CONFIG-unset}\" >> \"$FAKE_DIR/worker-$idx.tfconfig\"\n"
    "trap - TERM; if [ -n \"$term\" ]; then kill -TERM $$; fi\n"
    "n=$(wc -l < \"$FAKE_DIR/worker-$idx.starts\")\n"
    "echo \"worker $idx started\"\n"
    "if [ \"$die\" = \"$idx\" ]; then\n"
    "  if [ -z \"$runs\" ] || [ \"$n\" -le \"$runs\" ]; then\n"
    "    k=0; i=0\n" /* --die-wait: the lower workers start this run first (at most 20 s) */
    "    while [ -n \"$die_wait\" ] && [ $k -lt \"$idx\" ] && [ $i -lt 400 ]; do\n"
    "      m=$(cat \"$FAKE_DIR/worker-$k.starts\" 2>/dev/null | wc -l)\n"
    "      if [ \"$m\" -ge \"$n\" ]; then k=$((k + 1)); else sleep 0.05; i=$((i + 1)); fi\n"
    "    done\n"
    "    if [ \"$how\" = kill ]; then kill -9 $$; fi\n"
    "    exit \"$how\"\n"
    "  fi\n"
    "fi\n"
    "i=0\n"
    "while [ -n \"$wait_for\" ] && [ ! -e \"$FAKE_DIR/$wait_for\" ] && [ $i -lt 400 ]; do\n"
    "  sleep 0.05; i=$((i + 1))\n"
    "done\n"
    "if [ -n \"$hang_runs\" ] && [ \"$n\" -gt \"$hang_runs\" ]; then hang=''; fi\n"
    "if [ -n \"$hang\" ]; then\n"
    "  sleep 1000 &\n"
    "  echo $! > \"$FAKE_DIR/pid.sleep.$!\"\n"
    "  echo \"worker $idx hanging\" >&2\n"
    "  wait $!\n"
    "fi\n"
    "exit 0\n";

char *tdir; /* this test's temp dir: scripts, pid files, argv records */
char fake_psd_path[4096], fake_worker_path[4096];

/* ---- processes (the runner is the kit's, run.h) ---------------------------------- */

int for_each_recorded(int (*fn)(pid_t)) {
    return ps_test_for_each_recorded(tdir, fn);
}

/* Waits (up to 3 s) until no recorded process is alive; returns how many still are. */
int recorded_alive_after_wait(void) {
    return ps_test_recorded_alive_after_wait(tdir, 3000);
}

/* Runs psctl with the fakes as PSD/PSWORKER (plus extra env), bounded by 30 s. */
void run_psctl(const char *const *args, const char *const *env, ps_test_run_hook hook, void *ctx,
               ps_test_run_result *r) {
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
void term_on_marker(const ps_test_run_result *r, void *ctx) {
    static pid_t signalled;
    if (signalled != r->pid && strstr(r->err, (const char *)ctx)) {
        kill(r->pid, SIGTERM);
        signalled = r->pid;
    }
}

/* The lines of tdir/name (at most 16, each malloc'd); returns how many. */
int read_lines(const char *name, char *lines[16]) {
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

void free_lines(char *lines[16], int n) {
    for (int i = 0; i < n; i++)
        free(lines[i]);
}

int count_lines(const char *name) {
    char *lines[16];
    int n = read_lines(name, lines);
    free_lines(lines, n);
    return n;
}

/* Removes the argv/start records of earlier runs in this test's dir. */
void forget_runs(void) {
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

/* ---- fake shards: a ROUTER in a thread that answers as told ----------------------- */

fake_shard shards[MAX_SHARDS];

static void shard_reply(fake_shard *s, const zmq_msg_t *id, const Ps__Header *req, uint64_t rid) {
    Ps__Header h = PS__HEADER__INIT;
    Ps__CheckpointReply cr = PS__CHECKPOINT_REPLY__INIT;
    Ps__ShutdownReply sr = PS__SHUTDOWN_REPLY__INIT;
    Ps__Error er = PS__ERROR__INIT;
    char path[128];
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
    raw_router_reply(&s->router, id, rid, &h, NULL, 0);
}

/* The router's handler: counts and records the request, answers as s->behaviour says. */
static int shard_answer(raw_router *r, const zmq_msg_t *id, Ps__Header *h, ps_frames *f,
                        void *user) {
    (void)r;
    (void)f;
    fake_shard *s = user;
    atomic_fetch_add(&s->requests, 1);
    atomic_store(&s->last_body, (int)h->body_case);
    atomic_store(&s->last_proto, h->protocol_version);
    if (s->behaviour == SHARD_OLD_ID_FIRST) shard_reply(s, id, h, h->request_id + 100);
    if (s->behaviour != SHARD_SILENT) shard_reply(s, id, h, h->request_id);
    return 0;
}

fake_shard *shard_start(int i, shard_behaviour b) {
    fake_shard *s = &shards[i];
    memset(s, 0, sizeof *s);
    s->behaviour = b;
    raw_router_start(&s->router, shard_answer, s);
    return s;
}

void shard_stop(fake_shard *s) {
    raw_router_stop(&s->router);
}

/* ---- fixture -------------------------------------------------------------------
 * A failed assertion ends a test with _exit (Check, fork mode): neither the checked
 * teardown nor atexit runs. So every TCase gets a base dir from an unchecked fixture,
 * which runs in the Check parent: $TMPDIR points into it (test dirs, psctl's run dirs
 * and psd dirs of ps_test_psd_start all land there), and after the TCase it kills every
 * process recorded in any test dir under it and removes it all. */

static const char *base_dir;

void base_setup(void) {
    base_dir = ps_test_push_tmpdir();
    prctl(PR_SET_CHILD_SUBREAPER, 1); /* orphans of a failed test come here to be reaped */
}

void base_teardown(void) {
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
    ps_test_pop_tmpdir();
    base_dir = NULL;
}

void setup(void) {
    prctl(PR_SET_CHILD_SUBREAPER, 1); /* orphaned fakes come to us, so we can reap them */
    tdir = ps_test_mkdtemp();         /* under base_dir */
    ck_assert_ptr_nonnull(tdir);
    ps_test_write_script(fake_psd_path, sizeof fake_psd_path, tdir, "fake-psd", fake_psd);
    ps_test_write_script(fake_worker_path, sizeof fake_worker_path, tdir, "fake-worker",
                         fake_worker);
}

/* The test passed: stop what it started, remove its dir. */
void teardown(void) {
    for (int i = 0; i < MAX_SHARDS; i++)
        shard_stop(&shards[i]);
    if (!tdir) return;
    for_each_recorded(ps_test_kill_if_alive);
    ps_test_reap_all();
    ps_test_rmdir(tdir);
    free(tdir);
    tdir = NULL;
}

TCase *psctl_fakes_tcase(const char *name) {
    TCase *tc = tcase_create(name);
    tcase_add_unchecked_fixture(tc, base_setup, base_teardown);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    return tc;
}
