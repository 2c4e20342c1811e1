/* Job-wide training metrics through real psd and psworker processes on 127.0.0.1:
 * - 2 workers, 2 shards, sync, 2 short epochs, the workers' data shards of
 *   different sizes (--max-train 300 and 260: 150 and 130 samples): each epoch's
 *   job-wide loss in the chief's summary (and its progress line) is the mean of
 *   the workers' own losses (their log lines) weighted by their sample counts,
 *   the accuracy their summed hits over their summed samples; the same under
 *   the mirrored strategy (an all-gather over the ring);
 * - psd's table through libps: a worker's second report of an epoch replaces
 *   its first (a restarted worker does not count twice), the query waits for
 *   the live workers and is bounded, old epochs are dropped (8 kept), and bad
 *   figures are refused by the library and by psd itself (a raw request). */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc.h"
#include "ps.h"
#include "ps_error.h"
#include "raw.h"
#include "testutil.h"

#define EPOCHS 2
#define REL_TOL 1e-6 /* the logged losses have 9 significant digits */

/* ---- the workers' own figures, from their INFO lines ---- */

typedef struct {
    double loss, acc;
    unsigned long n, correct;
} own_fig;

static own_fig own_line(const char *log, unsigned epoch) {
    const char *text = ps_test_text(log);
    char key[64];
    snprintf(key, sizeof key, "epoch %u/%u: this worker's loss ", epoch + 1, EPOCHS);
    const char *at = text ? strstr(text, key) : NULL;
    if (!at) ps_test_dump(log);
    ck_assert_msg(at != NULL, "%s lacks \"%s\"", log, key);
    own_fig f;
    int got = sscanf(at + strlen(key), "%lf - accuracy %lf over %lu samples (%lu correct)", &f.loss,
                     &f.acc, &f.n, &f.correct);
    ck_assert_msg(got == 4, "cannot read the line after \"%s\" in %s", key, log);
    return f;
}

/* The epoch's final progress line of the chief (--progress plain): "steps/steps [" ...
 * "- loss: L - accuracy: A". */
static void progress_figures(const char *log, unsigned epoch, double *loss, double *acc) {
    const char *p = ps_test_text(log);
    char key[64];
    snprintf(key, sizeof key, "Epoch %u/%u\n", epoch + 1, EPOCHS);
    p = p ? strstr(p, key) : NULL;
    ck_assert_msg(p != NULL, "%s lacks \"%s\"", log, key);
    const char *fin = strstr(p, "ms/step - loss: "); /* the final line's */
    ck_assert_msg(fin != NULL, "%s: no final progress line for epoch %u", log, epoch + 1);
    ck_assert_int_eq(sscanf(fin, "ms/step - loss: %lf - accuracy: %lf", loss, acc), 2);
}

static const cJSON *item(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    ck_assert_msg(v != NULL, "summary lacks \"%s\"", key);
    return v;
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = item(o, key);
    ck_assert_msg(cJSON_IsNumber(v), "\"%s\" is not a number", key);
    return v->valuedouble;
}

static void expect_close(double got, double want, const char *what) {
    ck_assert_msg(fabs(got - want) <= REL_TOL * fabs(want) + 1e-12, "%s: %.12g, want %.12g", what,
                  got, want);
}

/* ---- a 2-worker job ---- */

/* TF_CONFIG naming both workers, for worker w of a mirrored job. */
static void tf_config(char *buf, size_t n, char eps[][32], unsigned w) {
    snprintf(buf, n,
             "{\"cluster\": {\"worker\": [\"%s\", \"%s\"]}, \"task\": {\"type\": \"worker\", "
             "\"index\": %u}}",
             eps[0], eps[1], w);
}

/* Runs the job to its end in dir: psd (2 shards, sync) or mirrored; worker 0 with
 * --max-train 300, worker 1 with 260; logs dir/TAG-W.log, the chief's summary
 * dir/TAG.json. */
static void run_job(const char *dir, const char *tag, int mirrored) {
    ps_test_psd psd[2];
    char ps_list[300] = "";
    for (int s = 0; !mirrored && s < 2; s++) {
        char sh[8];
        snprintf(sh, sizeof sh, "%d", s);
        const char *pa[] = {"--shard", sh,       "--num-shards", "2", "--workers",
                            "2",       "--mode", "sync",         NULL};
        ck_assert_int_eq(ps_test_psd_start(&psd[s], pa, 10000), 0);
        size_t len = strlen(ps_list);
        snprintf(ps_list + len, sizeof ps_list - len, "%s%s", s ? "," : "", psd[s].endpoint);
    }
    char eps[2][32], logs[2][700], sum[700], tf[512];
    for (int w = 0; w < 2; w++)
        snprintf(eps[w], sizeof eps[w], "127.0.0.1:%d", ps_test_free_port());
    snprintf(sum, sizeof sum, "%s/%s.json", dir, tag);
    pid_t pid[2];
    for (unsigned w = 0; w < 2; w++) {
        snprintf(logs[w], sizeof logs[w], "%s/%s-%u.log", dir, tag, w);
        const char *argv[40] = {getenv("PSWORKER"),
                                "--epochs",
                                "2",
                                "--max-steps",
                                "3",
                                "--max-test",
                                "100",
                                "--seed",
                                "5",
                                "--timeout",
                                "60",
                                "--max-train",
                                w == 0 ? "300" : "260",
                                "--progress",
                                w == 0 ? "plain" : "none"};
        int k = 15;
        if (w == 0) argv[k++] = "--summary", argv[k++] = sum;
        if (mirrored) {
            tf_config(tf, sizeof tf, eps, w);
            setenv("TF_CONFIG", tf, 1);
            argv[k++] = "--strategy", argv[k++] = "mirrored";
        } else {
            argv[k++] = "--ps", argv[k++] = ps_list;
            argv[k++] = "--index", argv[k++] = w == 0 ? "0" : "1";
            argv[k++] = "--workers", argv[k++] = "2";
        }
        argv[k] = NULL;
        pid[w] = ps_test_spawn(argv, logs[w]);
        unsetenv("TF_CONFIG");
    }
    int st[2];
    for (int w = 0; w < 2; w++)
        st[w] = ps_test_wait(pid[w], 120000);
    for (int w = 0; w < 2; w++)
        if (st[w] != 0) ps_test_dump(logs[w]);
    for (int s = 0; !mirrored && s < 2; s++) {
        if (st[0] || st[1]) ps_test_dump(psd[s].log);
        ck_assert_int_eq(ps_test_psd_stop(&psd[s], 5000), 0);
    }
    ck_assert_msg(st[0] == 0 && st[1] == 0, "%s: workers exited %d, %d", tag, st[0], st[1]);
}

/* The job's summary and logs agree with the weighted combination of the
 * workers' own figures, epoch by epoch. */
static void check_job(const char *dir, const char *tag) {
    char logs[2][700], sum[700];
    for (int w = 0; w < 2; w++)
        snprintf(logs[w], sizeof logs[w], "%s/%s-%d.log", dir, tag, w);
    snprintf(sum, sizeof sum, "%s/%s.json", dir, tag);
    char *text = ps_test_slurp(sum, NULL);
    ck_assert_msg(text != NULL, "no summary %s", sum);
    cJSON *j = cJSON_Parse(text);
    ck_assert_msg(j != NULL, "summary is not JSON: %s", text);
    free(text);
    const cJSON *hist = item(j, "history");
    ck_assert_int_eq(cJSON_GetArraySize(hist), EPOCHS);
    for (unsigned e = 0; e < EPOCHS; e++) {
        own_fig a = own_line(logs[0], e), b = own_line(logs[1], e);
        /* the shards differ (150 and 130 samples, batch 64: 3 steps each), so an
         * unweighted mean is not the weighted one */
        ck_assert_uint_eq(a.n, 150);
        ck_assert_uint_eq(b.n, 130);
        double n = (double)(a.n + b.n);
        double loss = (a.loss * (double)a.n + b.loss * (double)b.n) / n;
        double acc = (double)(a.correct + b.correct) / n;
        ck_assert_msg(fabs(loss - (a.loss + b.loss) / 2) > 100 * REL_TOL * loss,
                      "the workers' losses are too close to tell a weighted mean");
        const cJSON *h = cJSON_GetArrayItem(hist, (int)e);
        ck_assert_double_eq(num(h, "epoch"), e + 1);
        expect_close(num(h, "loss"), loss, "epoch loss");
        expect_close(num(h, "accuracy"), acc, "epoch accuracy");
        expect_close(num(h, "accuracy"), (a.acc * (double)a.n + b.acc * (double)b.n) / n,
                     "epoch accuracy from the logged accuracies");
        ck_assert_double_eq(num(h, "samples"), n);
        ck_assert_double_eq(num(h, "workers_reported"), 2);
        const cJSON *ws = item(h, "workers");
        ck_assert_int_eq(cJSON_GetArraySize(ws), 2);
        expect_close(num(cJSON_GetArrayItem(ws, 1), "loss"), b.loss, "worker 1's loss");
        ck_assert_double_eq(num(cJSON_GetArrayItem(ws, 1), "samples"), (double)b.n);
        double pl, pa;
        progress_figures(logs[0], e, &pl, &pa);
        ck_assert_msg(fabs(pl - loss) <= 0.00005 + 1e-9 && fabs(pa - acc) <= 0.00005 + 1e-9,
                      "epoch %u's progress line shows loss %.4f accuracy %.4f, the job's are "
                      "%.6f %.6f",
                      e + 1, pl, pa, loss, acc);
        if (e + 1 == EPOCHS) {
            expect_close(num(j, "loss"), loss, "summary loss");
            expect_close(num(j, "accuracy"), acc, "summary accuracy");
            expect_close(num(j, "chief_loss"), a.loss, "summary chief_loss");
            expect_close(num(j, "chief_accuracy"), a.acc, "summary chief_accuracy");
        }
    }
    cJSON_Delete(j);
}

START_TEST(psd_sync_weighted_by_samples) {
    char *dir = ps_test_mkdtemp();
    run_job(dir, "psd", 0);
    check_job(dir, "psd");
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(mirrored_weighted_by_samples) {
    char *dir = ps_test_mkdtemp();
    run_job(dir, "mirrored", 1);
    check_job(dir, "mirrored");
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* ---- psd's table through libps ---- */

static ps_client *worker_client(const char *endpoint, unsigned index) {
    const char *eps[] = {endpoint};
    ps_client *c = NULL;
    char err[300];
    ck_assert_int_eq(ps_client_open(&c, eps, 1, index, 2, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_client_hello(c, NULL, NULL), PS_OK);
    return c;
}

START_TEST(psd_table_replaces_waits_and_refuses) {
    ps_test_psd psd;
    const char *pa[] = {"--workers", "2", "--worker-timeout", "60000", NULL};
    ck_assert_int_eq(ps_test_psd_start(&psd, pa, 10000), 0);
    ps_client *c0 = worker_client(psd.endpoint, 0), *c1 = worker_client(psd.endpoint, 1);
    int kept = 0;
    /* worker 1 reports epoch 0, then (restarted) again: the second replaces the first */
    ck_assert_int_eq(ps_client_report_metrics(c1, 0, &(ps_metric_sums){10.0, 3, 5}, &kept), PS_OK);
    ck_assert_int_eq(kept, 1);
    /* only 1 of the 2 live workers: the query waits its bound, then says so */
    ps_epoch_metrics m;
    long long t0 = ps_test_now_ms();
    ck_assert_int_eq(ps_client_query_metrics(c0, 0, 300, &m, NULL, 0), PS_OK);
    ck_assert_int_ge(ps_test_now_ms() - t0, 300);
    ck_assert_uint_eq(m.reported, 1);
    ck_assert_uint_eq(m.expected, 2);
    ck_assert_int_eq(ps_client_report_metrics(c1, 0, &(ps_metric_sums){4.5, 2, 4}, &kept), PS_OK);
    ck_assert_int_eq(ps_client_report_metrics(c0, 0, &(ps_metric_sums){6.0, 1, 2}, NULL), PS_OK);
    ps_worker_metrics each[2];
    t0 = ps_test_now_ms();
    ck_assert_int_eq(ps_client_query_metrics(c0, 0, 30000, &m, each, 2), PS_OK);
    ck_assert_int_lt(ps_test_now_ms() - t0, 10000); /* complete: answered without the wait */
    ck_assert_uint_eq(m.reported, 2);
    ck_assert_uint_eq(m.expected, 2);
    ck_assert_double_eq(m.total.loss_sum, 10.5);
    ck_assert_uint_eq(m.total.correct, 3);
    ck_assert_uint_eq(m.total.samples, 6);
    ck_assert_uint_eq(each[0].worker, 0);
    ck_assert_uint_eq(each[1].worker, 1);
    ck_assert_double_eq(each[1].sums.loss_sum, 4.5);
    /* bounded: epochs 1..9 push epoch 0 and 1 out (8 kept); an old report is not kept */
    for (uint32_t e = 1; e <= 9; e++)
        ck_assert_int_eq(ps_client_report_metrics(c0, e, &(ps_metric_sums){1.0, 1, 1}, NULL),
                         PS_OK);
    ck_assert_int_eq(ps_client_query_metrics(c0, 0, 0, &m, NULL, 0), PS_OK);
    ck_assert_uint_eq(m.reported, 0);
    ck_assert_int_eq(ps_client_report_metrics(c1, 1, &(ps_metric_sums){1.0, 1, 1}, &kept), PS_OK);
    ck_assert_int_eq(kept, 0);
    ck_assert_int_eq(ps_client_query_metrics(c0, 9, 0, &m, NULL, 0), PS_OK);
    ck_assert_uint_eq(m.reported, 1);
    ck_assert_uint_eq(m.total.samples, 1);
    /* the library refuses bad figures */
    ck_assert_int_eq(ps_client_report_metrics(c0, 3, &(ps_metric_sums){NAN, 1, 1}, NULL),
                     PS_EINVAL);
    ck_assert_int_eq(ps_client_report_metrics(c0, 3, &(ps_metric_sums){1.0, 2, 1}, NULL),
                     PS_EINVAL);
    ck_assert_int_eq(ps_client_report_metrics(c0, 3, &(ps_metric_sums){1.0, 0, 0}, NULL),
                     PS_EINVAL);
    /* and psd does too, from a request the library would not send */
    raw_conn r;
    raw_open(&r, psd.endpoint);
    Ps__Header h = PS__HEADER__INIT;
    Ps__ReportMetrics rm = PS__REPORT_METRICS__INIT;
    h.protocol_version = PS_PROTOCOL_VERSION;
    h.body_case = PS__HEADER__BODY_REPORT_METRICS;
    h.report_metrics = &rm;
    rm.worker_index = 1;
    rm.epoch = 9;
    rm.loss_sum = INFINITY;
    rm.samples = 4;
    h.request_id = 71;
    raw_send_hdr(&r, &h, NULL, NULL, 0);
    raw_expect_error_text(&r, 71, PS_EINVAL, "out of range", 5000);
    rm.loss_sum = 1.0;
    rm.correct = 5;
    h.request_id = 72;
    raw_send_hdr(&r, &h, NULL, NULL, 0);
    raw_expect_error_text(&r, 72, PS_EINVAL, "out of range", 5000);
    rm.correct = 1;
    rm.worker_index = 2;
    h.request_id = 73;
    raw_send_hdr(&r, &h, NULL, NULL, 0);
    raw_expect_error_text(&r, 73, PS_EINVAL, "worker index 2 out of range", 5000);
    raw_close(&r);
    /* nothing of the refused requests went into epoch 9 */
    ck_assert_int_eq(ps_client_query_metrics(c0, 9, 0, &m, NULL, 0), PS_OK);
    ck_assert_uint_eq(m.reported, 1);
    ps_client_close(c0);
    ps_client_close(c1);
    ck_assert_int_eq(ps_test_psd_stop(&psd, 5000), 0);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("job_metrics");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, psd_table_replaces_waits_and_refuses);
    tcase_add_test(tc, psd_sync_weighted_by_samples);
    tcase_add_test(tc, mirrored_weighted_by_samples);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_main_needing("PSD PSWORKER", make_suite);
}
