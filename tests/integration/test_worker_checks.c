/* psworker refuses ambiguous input instead of guessing: a TF_CONFIG without a task (or
 * with an index missing, out of range, or no type) exits 2 with a reason; a shard that
 * reports an impossible version (a fake psd: a raw ROUTER in this process) makes the
 * worker fail naming the shard, while version == the job's steps still evaluates. */
#include <check.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "proc.h"
#include "ps_error.h"
#include "raw.h"
#include "testutil.h"
#include "wire.h"

#define RUN_MS 60000

static char *dir; /* per test: logs */

static void setup(void) {
    dir = ps_test_mkdtemp();
    ps_test_children_die_with_me();
    unsetenv("TF_CONFIG");
}

static void teardown(void) {
    ps_test_rmdir(dir);
    free(dir);
    dir = NULL;
}

/* Runs psworker with args (NULL-terminated, after the program name) and TF_CONFIG
 * (NULL: unset) to completion; returns its exit status, output in *out. */
static int run_worker(const char *const *args, const char *tf_config, const char **out) {
    const char *argv[40] = {getenv("PSWORKER")};
    ck_assert_ptr_nonnull(argv[0]);
    int n = 1;
    for (int i = 0; args[i]; i++) {
        ck_assert_int_lt(n, 38);
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    char log[700];
    snprintf(log, sizeof log, "%s/worker.log", dir);
    unlink(log);
    if (tf_config) setenv("TF_CONFIG", tf_config, 1);
    pid_t pid = ps_test_spawn(argv, log);
    unsetenv("TF_CONFIG");
    ck_assert_int_gt(pid, 0);
    int st = ps_test_wait(pid, RUN_MS);
    *out = ps_test_text(log);
    ck_assert_msg(st >= 0, "psworker did not exit within %d ms:\n%s", RUN_MS, *out);
    return st;
}

/* ---- TF_CONFIG ---- */

static const struct {
    const char *tf;
    const char *want;
} AMBIGUOUS[] = {
    /* no task: taken as the chief before, so two such workers were both chief */
    {"{\"cluster\": {\"ps\": [\"127.0.0.1:1\"], \"worker\": [\"127.0.0.1:2\", \"127.0.0.1:3\"]}}",
     "TF_CONFIG has no task"},
    {"{\"cluster\": {\"ps\": [\"127.0.0.1:1\"], \"worker\": [\"127.0.0.1:2\"]}}",
     "TF_CONFIG has no task"},
    /* an index left out in a job of two: both would be worker 0 */
    {"{\"cluster\": {\"ps\": [\"127.0.0.1:1\"], \"worker\": [\"127.0.0.1:2\", \"127.0.0.1:3\"]}, "
     "\"task\": {\"type\": \"worker\"}}",
     "task.index: missing"},
    {"{\"cluster\": {\"ps\": [\"127.0.0.1:1\"], \"worker\": [\"127.0.0.1:2\"]}, "
     "\"task\": {\"type\": \"worker\", \"index\": 1}}",
     "task.index: 1 is out of range"},
    {"{\"cluster\": {\"ps\": [\"127.0.0.1:1\"], \"worker\": [\"127.0.0.1:2\"]}, "
     "\"task\": {\"index\": 0}}",
     "task.type: missing"},
    {"{\"cluster\": {\"ps\": [\"127.0.0.1:1\"], \"worker\": [\"127.0.0.1:2\"]}, "
     "\"task\": {\"type\": \"ps\", \"index\": 0}}",
     "is not a worker or chief"},
};

START_TEST(tf_config_ambiguous_exits_2) {
    const char *args[] = {"--timeout", "1", NULL};
    for (size_t i = 0; i < sizeof AMBIGUOUS / sizeof AMBIGUOUS[0]; i++) {
        const char *out;
        int st = run_worker(args, AMBIGUOUS[i].tf, &out);
        ck_assert_msg(st == 2, "case %zu: exit %d, want 2:\n%s", i, st, out);
        ck_assert_msg(strstr(out, AMBIGUOUS[i].want) != NULL, "case %zu: no '%s' in:\n%s", i,
                      AMBIGUOUS[i].want, out);
    }
}
END_TEST

/* ---- a fake shard: answers Hello with a chosen version, keeps what CreateVars sent and
 * serves it to pulls, answers Goodbye ---- */

typedef struct {
    raw_router router; /* the kit's ROUTER in a thread: its endpoint is the shard's */
    int async;
    uint64_t version, worker_clock; /* what the Welcome says */
    Ps__Header *create;             /* the CreateVars request, kept */
    zmq_msg_t values[64];           /* its initial values */
    size_t n_values;
} fake_shard;

/* The router's handler: answers req as the fake shard; keeps the CreateVars request. */
static int answer(raw_router *r, const zmq_msg_t *id, Ps__Header *req, ps_frames *f, void *user) {
    fake_shard *s = user;
    Ps__Header h = PS__HEADER__INIT;
    if (req->body_case == PS__HEADER__BODY_HELLO) {
        Ps__Welcome w = PS__WELCOME__INIT;
        w.shard_index = 0;
        w.num_shards = 1;
        w.mode = s->async ? PS__MODE__MODE_ASYNC : PS__MODE__MODE_SYNC;
        w.version = s->version;
        w.num_workers = req->hello->num_workers;
        w.incarnation = 7;
        w.worker_clock = s->worker_clock;
        h.body_case = PS__HEADER__BODY_WELCOME;
        h.welcome = &w;
        raw_router_reply(r, id, req->request_id, &h, NULL, 0);
    } else if (req->body_case == PS__HEADER__BODY_CREATE_VARS && !s->create &&
               f->n - 2 <= sizeof s->values / sizeof s->values[0]) {
        Ps__CreateVarsReply cr = PS__CREATE_VARS_REPLY__INIT;
        protobuf_c_boolean created[64];
        for (size_t i = 0; i + 2 < f->n; i++) {
            zmq_msg_init(&s->values[i]);
            zmq_msg_copy(&s->values[i], &f->frames[i + 2]);
            created[i] = 1;
        }
        s->n_values = f->n - 2;
        cr.created = created;
        cr.n_created = s->n_values;
        cr.version = s->version;
        h.body_case = PS__HEADER__BODY_CREATE_VARS_REPLY;
        h.create_vars_reply = &cr;
        raw_router_reply(r, id, req->request_id, &h, NULL, 0);
        s->create = req; /* kept: its metas answer the pulls */
        return 1;
    } else if (req->body_case == PS__HEADER__BODY_PULL && s->create) {
        const Ps__CreateVars *cv = s->create->create_vars;
        Ps__TensorMeta *metas[64];
        ps_payload pl[64];
        size_t n = 0;
        for (size_t i = 0; i < req->pull->n_names && n < 64; i++) {
            for (size_t k = 0; k < cv->n_vars && k < s->n_values; k++) {
                if (strcmp(cv->vars[k]->name, req->pull->names[i]) != 0) continue;
                metas[n] = cv->vars[k];
                pl[n] = (ps_payload){zmq_msg_data(&s->values[k]), zmq_msg_size(&s->values[k]), NULL,
                                     NULL};
                n++;
            }
        }
        Ps__PullReply pr = PS__PULL_REPLY__INIT;
        pr.tensors = metas;
        pr.n_tensors = n;
        pr.version = s->version;
        h.body_case = PS__HEADER__BODY_PULL_REPLY;
        h.pull_reply = &pr;
        raw_router_reply(r, id, req->request_id, &h, pl, n);
    } else if (req->body_case == PS__HEADER__BODY_GOODBYE) {
        Ps__GoodbyeReply gr = PS__GOODBYE_REPLY__INIT;
        h.body_case = PS__HEADER__BODY_GOODBYE_REPLY;
        h.goodbye_reply = &gr;
        raw_router_reply(r, id, req->request_id, &h, NULL, 0);
    } else if (req->body_case != PS__HEADER__BODY_HEARTBEAT) {
        Ps__Error e = PS__ERROR__INIT;
        e.code = PS_EINVAL;
        e.code_name = "EINVAL";
        e.message = "the fake shard does not serve this";
        h.body_case = PS__HEADER__BODY_ERROR;
        h.error = &e;
        raw_router_reply(r, id, req->request_id, &h, NULL, 0);
    }
    return 0;
}

static void shard_start(fake_shard *s, int async, uint64_t version, uint64_t worker_clock) {
    memset(s, 0, sizeof *s);
    s->async = async;
    s->version = version;
    s->worker_clock = worker_clock;
    raw_router_start(&s->router, answer, s);
}

static void shard_stop(fake_shard *s) {
    raw_router_stop(&s->router);
    for (size_t i = 0; i < s->n_values; i++)
        zmq_msg_close(&s->values[i]);
    if (s->create) ps__header__free_unpacked(s->create, NULL);
}

/* The chief of a job of `workers` workers, one epoch of one step (so the job has 1 step
 * per worker), against a fake shard; returns the exit status, output in *out. */
static int chief_against(fake_shard *s, const char *workers, const char **out) {
    const char *args[] = {"--ps",        s->router.endpoint,
                          "--index",     "0",
                          "--workers",   workers,
                          "--epochs",    "1",
                          "--max-steps", "1",
                          "--max-train", "128",
                          "--max-test",  "64",
                          "--timeout",   "10",
                          "--progress",  "none",
                          "--data",      ps_test_data_dir(),
                          NULL};
    return run_worker(args, NULL, out);
}

/* A sync shard beyond the job's steps: an error naming the shard, not a clamp to the end
 * (which skipped all training and exited 0). */
START_TEST(sync_version_beyond_the_job_fails) {
    static const uint64_t versions[] = {UINT64_MAX, 2};
    for (size_t i = 0; i < 2; i++) {
        fake_shard s;
        shard_start(&s, 0, versions[i], 0);
        const char *out;
        int st = chief_against(&s, "1", &out);
        shard_stop(&s);
        ck_assert_msg(st == 1, "version %llu: exit %d, want 1:\n%s",
                      (unsigned long long)versions[i], st, out);
        char want[160];
        snprintf(want, sizeof want, "psd 0 (%s) is at version %llu", s.router.endpoint,
                 (unsigned long long)versions[i]);
        ck_assert_msg(strstr(out, want) != NULL, "no '%s' in:\n%s", want, out);
    }
}
END_TEST

/* An async shard that remembers more pushes from this worker than the job has steps. */
START_TEST(async_clock_beyond_the_job_fails) {
    fake_shard s;
    shard_start(&s, 1, 5, UINT64_MAX);
    const char *out;
    int st = chief_against(&s, "1", &out);
    shard_stop(&s);
    ck_assert_msg(st == 1, "exit %d, want 1:\n%s", st, out);
    ck_assert_msg(strstr(out, "says this worker has made 18446744073709551615 pushes") != NULL,
                  "%s", out);
}
END_TEST

/* version == the job's steps is legitimate: a chief restarted after the job ended
 * evaluates what the job made and exits 0. So is a sync version up to workers x steps
 * (backup workers, or a laggard closing steps alone after the others finished); one
 * more is not. */
START_TEST(version_at_the_end_still_evaluates) {
    static const struct {
        const char *workers;
        uint64_t version;
        int status;
    } cases[] = {{"1", 1, 0}, {"2", 2, 0}, {"2", 3, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fake_shard s;
        shard_start(&s, 0, cases[i].version, 0);
        const char *out;
        int st = chief_against(&s, cases[i].workers, &out);
        shard_stop(&s);
        ck_assert_msg(st == cases[i].status, "case %zu: exit %d, want %d:\n%s", i, st,
                      cases[i].status, out);
        if (st == 0)
            ck_assert_msg(strstr(out, "test accuracy:") != NULL, "no evaluation in:\n%s", out);
        else
            ck_assert_msg(strstr(out, "closes at most 2 steps") != NULL, "%s", out);
    }
}
END_TEST

static Suite *worker_checks_suite(void) {
    Suite *s = suite_create("worker_checks");
    TCase *tc = tcase_create("worker_checks");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 100);
    tcase_add_test(tc, tf_config_ambiguous_exits_2);
    tcase_add_test(tc, sync_version_beyond_the_job_fails);
    tcase_add_test(tc, async_clock_beyond_the_job_fails);
    tcase_add_test(tc, version_at_the_end_still_evaluates);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_main_needing("PSWORKER", worker_checks_suite);
}
