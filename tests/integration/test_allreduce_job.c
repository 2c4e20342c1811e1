/* All-reduce jobs through real psworker processes on 127.0.0.1, started by
 * hand with TensorFlow's TF_CONFIG (only workers: multi_worker_mirrored by
 * default): one epoch trains end to end (also with the source documents'
 * verbatim TF_CONFIG when its ports are free); a replica whose variables
 * drift is caught by the checksum comparison and named (exit status 3), as
 * is a worker killed mid-epoch; the chief's checkpoint resumes a job to the
 * parameters of an uninterrupted run; another job's checkpoint is refused. */
#include <arpa/inet.h>
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "saved.h"
#include "ckpt_file.h"
#include "proc.h"
#include "ps_error.h"
#include "tensorfile.h"
#include "testutil.h"

#define MAXW 3

static int sanitized(void) {
    const char *s = getenv("PS_SANITIZED");
    return s && strcmp(s, "1") == 0;
}

typedef struct {
    unsigned n;
    char eps[MAXW][64];
    char log[MAXW][700];
    pid_t pid[MAXW];
} job;

/* Starts n workers, TF_CONFIG naming eps (free ports unless given), each with
 * common args and its own extra args (per[w], NULL-terminated, may be NULL). */
static void job_start(job *j, unsigned n, const char *dir, const char *tag,
                      const char *const *common, const char *const *const *per) {
    j->n = n;
    for (unsigned w = 0; w < n; w++) {
        if (!j->eps[w][0]) snprintf(j->eps[w], sizeof j->eps[w], "127.0.0.1:%d", ps_test_free_port());
    }
    for (unsigned w = 0; w < n; w++) {
        char tf[1024];
        int len = snprintf(tf, sizeof tf, "{\"cluster\": {\"worker\": [");
        for (unsigned k = 0; k < n; k++)
            len += snprintf(tf + len, sizeof tf - (size_t)len, "%s\"%s\"", k ? ", " : "",
                            j->eps[k]);
        snprintf(tf + len, sizeof tf - (size_t)len,
                 "]}, \"task\": {\"type\": \"worker\", \"index\": %u}}", w);
        snprintf(j->log[w], sizeof j->log[w], "%s/%s-%u.log", dir, tag, w);
        unlink(j->log[w]);
        const char *argv[64] = {getenv("PSWORKER"), "--progress", "plain", NULL};
        int k = 3;
        for (int i = 0; common && common[i] && k < 50; i++)
            argv[k++] = common[i];
        for (int i = 0; per && per[w] && per[w][i] && k < 62; i++)
            argv[k++] = per[w][i];
        argv[k] = NULL;
        setenv("TF_CONFIG", tf, 1);
        j->pid[w] = ps_test_spawn(argv, j->log[w]);
        unsetenv("TF_CONFIG");
        ck_assert_int_gt(j->pid[w], 0);
    }
}

/* Waits for every worker; fills st[w]. Dumps the logs of any with an unexpected status. */
static void job_wait(job *j, int *st, const int *want, int timeout_ms) {
    for (unsigned w = 0; w < j->n; w++)
        st[w] = ps_test_wait(j->pid[w], timeout_ms);
    for (unsigned w = 0; w < j->n; w++)
        if (st[w] != want[w]) ps_test_dump(j->log[w]);
}

static double summary_number(const char *path, const char *key) {
    cJSON *o = cJSON_Parse(ps_test_text(path));
    ck_assert_msg(o != NULL, "no summary at %s", path);
    cJSON *v = cJSON_GetObjectItem(o, key);
    ck_assert_msg(cJSON_IsNumber(v), "summary lacks %s", key);
    double d = v->valuedouble;
    cJSON_Delete(o);
    return d;
}

/* One epoch of two workers from TF_CONFIG alone. */
static void train_epoch(job *j, const char *dir, const char *tag) {
    char summary[700];
    snprintf(summary, sizeof summary, "%s/%s.json", dir, tag);
    const char *full[] = {"--epochs", "1", "--max-test", "5000", "--summary", summary, NULL};
    const char *quick[] = {"--epochs", "1", "--max-train", "20000", "--max-test", "2000",
                           "--summary", summary, NULL};
    job_start(j, 2, dir, tag, sanitized() ? quick : full, NULL);
    int st[2], want[2] = {0, 0};
    job_wait(j, st, want, 600000);
    ck_assert_int_eq(st[0], 0);
    ck_assert_int_eq(st[1], 0);
    double acc = summary_number(summary, "test_accuracy");
    printf("%s: TF_CONFIG of two workers, one epoch: test accuracy %.4f\n", tag, acc);
    ck_assert_msg(acc >= (sanitized() ? 0.75 : 0.80), "test accuracy %.4f", acc);
    cJSON *o = cJSON_Parse(ps_test_text(summary));
    ck_assert_str_eq(cJSON_GetObjectItem(o, "strategy")->valuestring, "multi_worker_mirrored");
    cJSON_Delete(o);
    const char *c = ps_test_text(j->log[0]), *w = ps_test_text(j->log[1]);
    ck_assert_msg(strstr(c, "ring complete") && strstr(w, "ring complete"),
                  "no 'ring complete' in the logs:\n%s\n%s", c, w);
    ck_assert_msg(strstr(c, "variables broadcast from the chief"), "no broadcast log:\n%s", c);
    ck_assert_msg(strstr(c, "multi_worker_mirrored: worker 0 of 2"), "no rank log:\n%s", c);
    ck_assert_msg(strstr(w, "multi_worker_mirrored: worker 1 of 2"), "no rank log:\n%s", w);
    ck_assert_msg(strstr(c, "val_accuracy:"), "no progress line:\n%s", c);
}

START_TEST(tf_config_of_workers_trains) {
    char *dir = ps_test_mkdtemp();
    job j = {0};
    train_epoch(&j, dir, "free-ports");
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

static int port_free(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1; /* as a server binds: a closed connection in TIME_WAIT does not count */
    if (s >= 0) setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int ok = s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0;
    if (s >= 0) close(s);
    return ok;
}

/* The source documents' TF_CONFIG, verbatim: localhost:20000 and :20001. */
START_TEST(verbatim_tf_config_trains) {
    if (!port_free(20000) || !port_free(20001)) {
        printf("verbatim TF_CONFIG: port 20000 or 20001 is taken on this machine: skipped "
               "(the same job on free ports is tf_config_of_workers_trains)\n");
        return;
    }
    char *dir = ps_test_mkdtemp();
    job j = {0};
    snprintf(j.eps[0], sizeof j.eps[0], "localhost:20000");
    snprintf(j.eps[1], sizeof j.eps[1], "localhost:20001");
    train_epoch(&j, dir, "verbatim");
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* Fault injection: worker 1 nudges a variable after step 7; the comparison
 * after step 10 finds it and every worker stops with status 3, naming it. */
START_TEST(divergence_is_named) {
    char *dir = ps_test_mkdtemp();
    job j = {0};
    const char *common[] = {"--epochs", "1", "--max-train", "3000", "--max-test", "500",
                            "--batch", "16", "--check-every", "5", NULL};
    const char *w1[] = {"--perturb-at-step", "7", NULL};
    const char *const *per[] = {NULL, w1};
    job_start(&j, 2, dir, "diverge", common, per);
    int st[2], want[2] = {3, 3};
    job_wait(&j, st, want, 180000);
    ck_assert_int_eq(st[0], 3);
    ck_assert_int_eq(st[1], 3);
    for (unsigned w = 0; w < 2; w++) {
        const char *out = ps_test_text(j.log[w]);
        ck_assert_msg(strstr(out, "diverged after step 10: worker 1"),
                      "worker %u does not name the diverged worker:\n%s", w, out);
    }
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* kill -9 of one worker mid-epoch: the other stops within --worker-timeout
 * (no hang), exit status 3, naming the dead worker's endpoint. */
START_TEST(dead_worker_is_named) {
    char *dir = ps_test_mkdtemp();
    job j = {0};
    const char *common[] = {"--epochs", "1", "--max-train", "6000", "--max-test", "500",
                            "--batch", "16", "--slow-ms", "20", "--worker-timeout", "3000", NULL};
    job_start(&j, 2, dir, "dead", common, NULL);
    ck_assert_msg(ps_test_wait_file_has(j.log[0], "ring complete", 60000, j.pid[0]),
                  "the ring did not form:\n%s", ps_test_text(j.log[0]));
    ck_assert_msg(ps_test_wait_file_has(j.log[0], "variables broadcast", 60000, j.pid[0]),
                  "no broadcast:\n%s", ps_test_text(j.log[0]));
    ps_test_nap_ms(1500); /* the scenario: mid-epoch (187 steps of >= 20 ms) */
    kill(j.pid[1], SIGKILL);
    long long t0 = ps_test_now_ms();
    int st = ps_test_wait(j.pid[0], 60000);
    long long took = ps_test_now_ms() - t0;
    ps_test_wait(j.pid[1], 5000);
    const char *out = ps_test_text(j.log[0]);
    if (st != 3) ps_test_dump(j.log[0]);
    ck_assert_int_eq(st, 3);
    const char *port = strrchr(j.eps[1], ':') + 1;
    ck_assert_msg(strstr(out, port), "the chief's error does not name %s:\n%s", j.eps[1], out);
    /* one error line, psworker's, with the ring's reason (the ring logs it at info) */
    int errors = 0;
    const char *e = strstr(out, " error: ");
    for (const char *p = e; p; p = strstr(p + 1, " error: "))
        errors++;
    const char *eol = e ? strchr(e, '\n') : NULL, *broke = e ? strstr(e, "ring broke") : NULL;
    ck_assert_msg(errors == 1 && broke && (!eol || broke < eol),
                  "want one error line, the all-reduce's:\n%s", out);
    printf("dead worker: the chief stopped %lld ms after the kill\n", took);
    ck_assert_msg(took < 30000, "the chief took %lld ms to notice", took);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* The saved model's values, concatenated (malloc'd). */
static float *read_model(const char *path, size_t *n) {
    return ps_test_read_saved(path, n);
}

/* Checkpoint-resume: epoch 1 with --checkpoint-dir, then a second run of
 * epochs 2 resumes after step 10 and ends where one uninterrupted run of two
 * epochs does. A third run with another --job-id is refused (status 2). */
static int ckpt_accept(void *user, ps_tf_file *f, const ps_ckpt_loaded_var *v, size_t n,
                       const ps_ckpt_meta *m, char *why, size_t whylen) {
    (void)f, (void)v, (void)why, (void)whylen;
    *(size_t *)user = n;
    ck_assert_str_eq(m->job_id, "resume-test");
    return PS_OK;
}

START_TEST(checkpoint_resume_equals_uninterrupted) {
    char *dir = ps_test_mkdtemp();
    char ckdir[700], whole[700], resumed[700];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", dir);
    snprintf(whole, sizeof whole, "%s/whole.pstf", dir);
    snprintf(resumed, sizeof resumed, "%s/resumed.pstf", dir);
    int st[2], ok[2] = {0, 0};
    /* a small MLP with adam: slots and the update count must survive the checkpoint too */
    char model[700];
    snprintf(model, sizeof model, "%s/adam.json", dir);
    const char *spec = "{\"input_shape\": [784], \"layers\": [{\"type\": \"Dense\", \"units\": "
                       "32, \"activation\": \"relu\"}, {\"type\": \"Dense\", \"units\": 10}], "
                       "\"loss\": \"sparse_categorical_crossentropy\", \"from_logits\": true, "
                       "\"optimizer\": {\"name\": \"adam\", \"learning_rate\": 0.001}}";
    ck_assert_int_eq(ps_test_write_file(model, spec, strlen(spec)), 0);

    job a = {0};
    const char *run_a[] = {"--model", model, "--epochs", "2", "--max-train", "3000", "--max-test",
                           "500", "--batch", "16", "--max-steps", "10", "--save", whole, NULL};
    job_start(&a, 2, dir, "whole", run_a, NULL);
    job_wait(&a, st, ok, 180000);
    ck_assert(st[0] == 0 && st[1] == 0);

    job b = {0};
    const char *run_b1[] = {"--model", model, "--epochs", "1", "--max-train", "3000",
                            "--max-test", "500", "--batch", "16", "--max-steps", "10",
                            "--checkpoint-dir", ckdir, "--checkpoint-every-steps", "4",
                            "--job-id", "resume-test", NULL};
    job_start(&b, 2, dir, "first", run_b1, NULL);
    job_wait(&b, st, ok, 180000);
    ck_assert(st[0] == 0 && st[1] == 0);
    /* the chief's checkpoints: after steps 4, 8 and the last (10), in psd's format */
    size_t nvars = 0;
    ps_ckpt_meta m;
    char path[1200], err[600];
    ck_assert_msg(ps_ckpt_read_newest(ckdir, ckpt_accept, &nvars, &m, path, sizeof path, err,
                                      sizeof err) == PS_OK,
                  "%s", err);
    ck_assert_uint_eq(m.version, 10);
    ck_assert_uint_eq(nvars, 4);
    ck_assert_msg(strstr(ps_test_text(b.log[0]), "checkpoint after step 4 written"),
                  "no periodic checkpoint:\n%s", ps_test_text(b.log[0]));

    job c = {0};
    const char *run_b2[] = {"--model", model, "--epochs", "2", "--max-train", "3000",
                            "--max-test", "500", "--batch", "16", "--max-steps", "10",
                            "--checkpoint-dir", ckdir, "--job-id", "resume-test", "--save",
                            resumed, NULL};
    job_start(&c, 2, dir, "second", run_b2, NULL);
    job_wait(&c, st, ok, 180000);
    ck_assert(st[0] == 0 && st[1] == 0);
    const char *out = ps_test_text(c.log[0]);
    ck_assert_msg(strstr(out, "resuming from checkpoint") && strstr(out, "10 steps done"),
                  "the chief did not resume:\n%s", out);
    ck_assert_msg(strstr(ps_test_text(c.log[1]), "starting at step 10"),
                  "worker 1 did not resume:\n%s", ps_test_text(c.log[1]));

    size_t n1, n2;
    float *x = read_model(whole, &n1), *y = read_model(resumed, &n2);
    ck_assert_uint_eq(n1, n2);
    double d = 0;
    for (size_t i = 0; i < n1; i++)
        if (fabs((double)x[i] - (double)y[i]) > d) d = fabs((double)x[i] - (double)y[i]);
    ck_assert_msg(d <= 1e-5, "max |resumed - uninterrupted| = %g", d);
    free(x);
    free(y);

    /* --init-from: the chief's file reaches every worker (checked equal after step 1) */
    job g = {0};
    const char *run_init[] = {"--model", model, "--epochs", "1", "--max-train", "3000",
                              "--max-test", "500", "--batch", "16", "--max-steps", "1",
                              "--check-every", "1", "--init-from", whole, NULL};
    job_start(&g, 2, dir, "init", run_init, NULL);
    job_wait(&g, st, ok, 180000);
    ck_assert(st[0] == 0 && st[1] == 0);
    ck_assert_msg(strstr(ps_test_text(g.log[0]), "initial values from"),
                  "the chief did not load --init-from:\n%s", ps_test_text(g.log[0]));

    job e = {0};
    const char *run_other[] = {"--model", model, "--epochs", "2", "--max-train", "3000",
                               "--batch", "16", "--max-steps", "10", "--checkpoint-dir", ckdir,
                               "--job-id", "another-job", NULL};
    job_start(&e, 2, dir, "other", run_other, NULL);
    int bad[2] = {2, 2};
    job_wait(&e, st, bad, 180000);
    ck_assert_int_eq(st[0], 2);
    ck_assert_int_eq(st[1], 2);
    ck_assert_msg(strstr(ps_test_text(e.log[0]), "holds job 'resume-test'"),
                  "the chief does not say whose checkpoint it is:\n%s", ps_test_text(e.log[0]));
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* Workers with different models: the chief's description is compared at
 * join, and every worker stops, naming the one that differs (status 2). */
START_TEST(different_models_are_named) {
    char *dir = ps_test_mkdtemp();
    char small[700];
    snprintf(small, sizeof small, "%s/small.json", dir);
    const char *spec = "{\"input_shape\": [784], \"layers\": [{\"type\": \"Dense\", \"units\": "
                       "16, \"activation\": \"relu\"}, {\"type\": \"Dense\", \"units\": 10}], "
                       "\"loss\": \"sparse_categorical_crossentropy\", \"from_logits\": true}";
    ck_assert_int_eq(ps_test_write_file(small, spec, strlen(spec)), 0);
    job j = {0};
    const char *common[] = {"--epochs", "1", "--max-train", "3000", "--max-steps", "2", NULL};
    const char *w1[] = {"--model", small, NULL};
    const char *const *per[] = {NULL, w1};
    job_start(&j, 2, dir, "models", common, per);
    int st[2], want[2] = {2, 2};
    job_wait(&j, st, want, 120000);
    ck_assert_int_eq(st[0], 2);
    ck_assert_int_eq(st[1], 2);
    for (unsigned w = 0; w < 2; w++)
        ck_assert_msg(strstr(ps_test_text(j.log[w]), "worker 1's model differs from the chief's"),
                      "worker %u:\n%s", w, ps_test_text(j.log[w]));
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* Configuration errors are named, exit status 2, before any network use. */
START_TEST(bad_configurations) {
    char *dir = ps_test_mkdtemp();
    char log[700];
    snprintf(log, sizeof log, "%s/bad.log", dir);
    struct {
        const char *tf, *arg1, *arg2, *needle, *arg3, *arg4;
    } cases[] = {
        {"{\"cluster\": {\"worker\": [\"localhost:1\", \"example.com:2\"]}, \"task\": "
         "{\"type\": \"worker\", \"index\": 0}}",
         "--strategy", "mirrored", "worker 1 is at 'example.com:2'"},
        {"{\"cluster\": {\"worker\": [\"localhost:1\", \"localhost:2\"]}, \"task\": "
         "{\"type\": \"worker\", \"index\": 0}}",
         "--communication", "nccl", "--communication nccl needs a CUDA device"},
        {NULL, "--strategy", "multi_worker_mirrored", "needs every worker's address"},
        {"{\"cluster\": {\"worker\": [\"localhost:1\"], \"ps\": [\"localhost:3\"]}, \"task\": "
         "{\"type\": \"worker\", \"index\": 0}}",
         "--strategy", "mirrored", "trains without psd"},
        {NULL, "--no-ps", "yes", "--no-ps keeps no checkpoints", "--checkpoint-dir", "/tmp"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unlink(log);
        if (cases[i].tf) setenv("TF_CONFIG", cases[i].tf, 1);
        /* on the CPU: a GPU host's default device would make nccl valid */
        const char *argv[] = {getenv("PSWORKER"), cases[i].arg1, cases[i].arg2, "--device", "cpu",
                              cases[i].arg3, cases[i].arg4, NULL};
        int st = ps_test_wait(ps_test_spawn(argv, log), 30000);
        unsetenv("TF_CONFIG");
        const char *out = ps_test_text(log);
        ck_assert_msg(st == 2 && strstr(out, cases[i].needle), "case %zu: status %d, output:\n%s",
                      i, st, out);
    }
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

static void setup(void) {
    ps_test_children_die_with_me(); /* in the test's own process (Check forks) */
}

static Suite *make_suite(void) {
    Suite *s = suite_create("allreduce_job");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 900);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, bad_configurations);
    tcase_add_test(tc, different_models_are_named);
    tcase_add_test(tc, divergence_is_named);
    tcase_add_test(tc, dead_worker_is_named);
    tcase_add_test(tc, checkpoint_resume_equals_uninterrupted);
    tcase_add_test(tc, tf_config_of_workers_trains);
    tcase_add_test(tc, verbatim_tf_config_trains);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_main_needing("PSWORKER", make_suite);
}
