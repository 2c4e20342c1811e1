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

int job_run(const char *dir, const job_spec *j) {
    ck_assert(j->workers >= 1 && j->workers <= MAXW);
    ps_test_psd psd[SHARDS];
    char ps_list[300] = "", wn[16];
    snprintf(wn, sizeof wn, "%u", j->workers);
    int own_shards = j->kind == JOB_PSD && !j->ps;
    for (int s = 0; own_shards && s < SHARDS; s++) {
        char sh[16];
        snprintf(sh, sizeof sh, "%d", s);
        const char *pa[] = {"--shard",   sh, "--num-shards", "2",
                            "--workers", wn, "--mode",       j->mode ? j->mode : "sync",
                            NULL};
        ck_assert_int_eq(ps_test_psd_start(&psd[s], pa, 10000), 0);
        size_t len = strlen(ps_list);
        snprintf(ps_list + len, sizeof ps_list - len, "%s%s", s ? "," : "", psd[s].endpoint);
    }
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

double max_abs_diff(const float *x, const float *y, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)x[i] - (double)y[i]) > d) d = fabs((double)x[i] - (double)y[i]);
    return d;
}
