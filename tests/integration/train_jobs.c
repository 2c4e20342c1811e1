/* Short psworker jobs for the training-option tests (see train_jobs.h). */
#include "saved.h"
#include "train_jobs.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc.h"
#include "ps_error.h"
#include "testutil.h"

#define MAXW 4
#define SHARDS 2

void job_log(const char *dir, const char *tag, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s-0.log", dir, tag);
}

/* TF_CONFIG naming every worker, for worker w of a mirrored job. */
static void tf_config(char *buf, size_t n, char eps[][32], unsigned workers, unsigned w) {
    int len = snprintf(buf, n, "{\"cluster\": {\"worker\": [");
    for (unsigned j = 0; j < workers; j++)
        len += snprintf(buf + len, n - (size_t)len, "%s\"%s\"", j ? ", " : "", eps[j]);
    snprintf(buf + len, n - (size_t)len, "]}, \"task\": {\"type\": \"worker\", \"index\": %u}}", w);
}

/* SHARDS fresh psd shards for j's workers and mode; their endpoints in ps_list. */
static void start_shards(ps_test_psd *psd, const job_spec *j, char *ps_list, size_t n) {
    char wn[16];
    snprintf(wn, sizeof wn, "%u", j->workers);
    ps_list[0] = '\0';
    for (int s = 0; s < SHARDS; s++) {
        char sh[16];
        snprintf(sh, sizeof sh, "%d", s);
        const char *pa[] = {"--shard",   sh, "--num-shards", "2",
                            "--workers", wn, "--mode",       j->mode ? j->mode : "sync",
                            NULL};
        ck_assert_int_eq(ps_test_psd_start(&psd[s], pa, 10000), 0);
        size_t len = strlen(ps_list);
        snprintf(ps_list + len, n - len, "%s%s", s ? "," : "", psd[s].endpoint);
    }
}

int job_run(const char *dir, const job_spec *j) {
    ck_assert(j->workers >= 1 && j->workers <= MAXW);
    ps_test_psd psd[SHARDS];
    char ps_list[300] = "", wn[16];
    snprintf(wn, sizeof wn, "%u", j->workers);
    int own_shards = j->kind == JOB_PSD && !j->ps;
    if (own_shards) start_shards(psd, j, ps_list, sizeof ps_list);
    if (j->ps) snprintf(ps_list, sizeof ps_list, "%s", j->ps);
    char eps[MAXW][32], logs[MAXW][700], idx[MAXW][16], tf[512], save[700];
    for (unsigned w = 0; w < j->workers; w++)
        snprintf(eps[w], sizeof eps[w], "127.0.0.1:%d", ps_test_free_port());
    snprintf(save, sizeof save, "%s/%s.pstf", dir, j->tag);
    pid_t pid[MAXW];
    for (unsigned w = 0; w < j->workers; w++) {
        snprintf(logs[w], sizeof logs[w], "%s/%s-%u.log", dir, j->tag, w);
        snprintf(idx[w], sizeof idx[w], "%u", w);
        const char *argv[64] = {getenv("PSWORKER"),
                                "--epochs",
                                j->epochs ? j->epochs : "1",
                                "--max-test",
                                "500",
                                "--progress",
                                "none",
                                "--timeout",
                                "60",
                                NULL};
        int k = 9;
        if (w == 0) argv[k++] = "--save", argv[k++] = save;
        if (j->kind == JOB_MIRRORED) {
            tf_config(tf, sizeof tf, eps, j->workers, w);
            argv[k++] = "--strategy", argv[k++] = "mirrored";
            setenv("TF_CONFIG", tf, 1);
        } else if (j->kind == JOB_PSD) {
            argv[k++] = "--ps", argv[k++] = ps_list;
            argv[k++] = "--index", argv[k++] = idx[w];
            argv[k++] = "--workers", argv[k++] = wn;
        } else {
            argv[k++] = "--no-ps", argv[k++] = "yes";
        }
        for (size_t a = 0; j->args && j->args[a] && k < 62; a++)
            argv[k++] = j->args[a];
        argv[k] = NULL;
        pid[w] = ps_test_spawn(argv, logs[w]);
        unsetenv("TF_CONFIG");
    }
    int worst = 0;
    for (unsigned w = 0; w < j->workers; w++) {
        int st = ps_test_wait(pid[w], 120000);
        if (st != 0) ps_test_dump(logs[w]);
        if (st > worst || st < 0) worst = st < 0 ? 255 : st;
    }
    for (int s = 0; own_shards && s < SHARDS; s++)
        ck_assert_int_eq(ps_test_psd_stop(&psd[s], 5000), 0);
    return worst;
}

float *job_params(const char *dir, const job_spec *j, size_t *n) {
    ck_assert_msg(job_run(dir, j) == 0, "job %s failed", j->tag);
    char save[700];
    snprintf(save, sizeof save, "%s/%s.pstf", dir, j->tag);
    return ps_test_read_saved(save, n);
}

/* j's arguments, then --checkpoint-dir DIR/TAG-ck, --history DIR/TAG-history.json and
 * --summary DIR/TAG.json (only the chief writes those two), under tag `tag`. */
typedef struct {
    const char *args[64];
    char ck[700], history[700], summary[700];
} resume_args;

static void with_resume_args(resume_args *r, const char *dir, const char *ck_tag,
                             const char *tag, const job_spec *j) {
    size_t k = 0;
    for (size_t a = 0; j->args && j->args[a] && k < 56; a++)
        r->args[k++] = j->args[a];
    snprintf(r->ck, sizeof r->ck, "%s/%s-ck", dir, ck_tag);
    snprintf(r->history, sizeof r->history, "%s/%s-history.json", dir, ck_tag);
    snprintf(r->summary, sizeof r->summary, "%s/%s.json", dir, tag);
    r->args[k++] = "--checkpoint-dir", r->args[k++] = r->ck;
    r->args[k++] = "--history", r->args[k++] = r->history;
    r->args[k++] = "--summary", r->args[k++] = r->summary;
    r->args[k] = NULL;
}

/* The summary's number under key (-1: absent). */
static double summary_num(const char *path, const char *key) {
    const char *t = ps_test_text(path), *at = t ? strstr(t, key) : NULL;
    ck_assert_msg(t != NULL, "no summary %s", path);
    return at ? atof(at + strlen(key) + 1) : -1; /* "key":\tN */
}

void job_expect_exact_resume(const char *dir, const job_spec *j) {
    char whole_tag[64], first_tag[64], again_tag[64], ps_list[300];
    snprintf(whole_tag, sizeof whole_tag, "%s-whole", j->tag);
    snprintf(first_tag, sizeof first_tag, "%s-first", j->tag);
    snprintf(again_tag, sizeof again_tag, "%s-again", j->tag);
    ps_test_psd psd[SHARDS];
    resume_args wa, fa, aa;
    with_resume_args(&wa, dir, whole_tag, whole_tag, j);
    with_resume_args(&fa, dir, first_tag, first_tag, j);
    with_resume_args(&aa, dir, first_tag, again_tag, j); /* the first run's checkpoints */
    job_spec whole = *j, first = *j, again = *j;
    whole.tag = whole_tag, whole.epochs = "2", whole.args = wa.args;
    first.tag = first_tag, first.epochs = "1", first.args = fa.args;
    again.tag = again_tag, again.epochs = "2", again.args = aa.args;
    size_t n1 = 0, n2 = 0;
    float *x = job_params(dir, &whole, &n1);
    if (j->kind == JOB_PSD) { /* the shards stay up while every worker restarts */
        start_shards(psd, j, ps_list, sizeof ps_list);
        first.ps = again.ps = ps_list;
    }
    ck_assert_int_eq(job_run(dir, &first), 0);
    float *y = job_params(dir, &again, &n2);
    for (int s = 0; j->kind == JOB_PSD && s < SHARDS; s++)
        ck_assert_int_eq(ps_test_psd_stop(&psd[s], 5000), 0);
    char log[800];
    job_log(dir, again_tag, log, sizeof log);
    ck_assert_msg(ps_test_file_has(log, "epoch 2, step 0 of") ||
                      ps_test_file_has(log, "resuming from checkpoint"),
                  "%s: the second run did not resume:\n%s", j->tag, ps_test_text(log));
    ck_assert_uint_eq(n1, n2);
    size_t differ = 0;
    for (size_t i = 0; i < n1; i++)
        differ += memcmp(&x[i], &y[i], sizeof *x) != 0;
    ck_assert_msg(differ == 0,
                  "%s: %zu of %zu variables' values differ between the uninterrupted job and "
                  "the resumed one (max |diff| %g)",
                  j->tag, differ, n1, max_abs_diff(x, y, n1));
    char *h1 = ps_test_slurp(wa.history, NULL), *h2 = ps_test_slurp(aa.history, NULL);
    ck_assert_msg(h1 && h2 && strcmp(h1, h2) == 0, "%s: the History files differ:\n%s\n%s",
                  j->tag, h1 ? h1 : "(none)", h2 ? h2 : "(none)");
    const char *keys[] = {"\"loss_scale\"", "\"skipped_steps\"", "\"test_loss\"",
                          "\"test_accuracy\""};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        double a = summary_num(wa.summary, keys[k]), b = summary_num(aa.summary, keys[k]);
        ck_assert_msg(a == b, "%s: the summaries' %s differ: %g uninterrupted, %g resumed",
                      j->tag, keys[k], a, b);
    }
    free(h1), free(h2), free(x), free(y);
}

double max_abs_diff(const float *x, const float *y, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)x[i] - (double)y[i]) > d) d = fabs((double)x[i] - (double)y[i]);
    return d;
}
