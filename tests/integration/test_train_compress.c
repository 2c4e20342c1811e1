/* psworker --compression through real psd processes on 127.0.0.1: 2 shards, 2
 * workers, a short epoch in sync mode with none, fp16, bf16 and topk:0.05 (and
 * async with fp16 and top-k). psd's stats count the push payload bytes: fp16 and
 * bf16 pushes are exactly half of none's, top-k's a small part; the chief's
 * summary states the bytes it sent per step (its share of psd's count), and every
 * encoding trains to a sensible accuracy. A bad --compression is refused. */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc.h"
#include "stats.h"
#include "testutil.h"

typedef struct {
    double accuracy, bytes_per_step;
    int steps;
    unsigned long long push_bytes; /* both shards */
} job_result;

static job_result run_job(const char *mode, const char *compression, const char *dir) {
    ps_test_psd psd[2];
    for (int i = 0; i < 2; i++) {
        const char *args[] = {"--shard", i ? "1" : "0", "--num-shards", "2", "--workers",
                              "2",       "--mode",      mode,           NULL};
        ck_assert_int_eq(ps_test_psd_start(&psd[i], args, 10000), 0);
    }
    char ps[300], summary[600], log0[600], log1[600];
    snprintf(ps, sizeof ps, "%s,%s", psd[0].endpoint, psd[1].endpoint);
    snprintf(summary, sizeof summary, "%s/summary-%s-%s.json", dir, mode, compression);
    snprintf(log0, sizeof log0, "%s/chief-%s-%s.log", dir, mode, compression);
    snprintf(log1, sizeof log1, "%s/worker1-%s-%s.log", dir, mode, compression);
    const char *w[2][32];
    for (int i = 0; i < 2; i++) {
        const char *a[] = {getenv("PSWORKER"), "--ps", ps, "--index", i ? "1" : "0",
                           "--workers", "2", "--epochs", "1", "--max-train", "4000",
                           "--max-test", "500", "--batch", "32", "--progress", "none",
                           "--timeout", "60", "--compression", compression,
                           "--summary", summary, NULL};
        size_t n = sizeof a / sizeof a[0];
        memcpy(w[i], a, n * sizeof a[0]);
        if (i) w[i][n - 3] = NULL; /* the chief writes the summary */
    }
    pid_t p0 = ps_test_spawn(w[0], log0), p1 = ps_test_spawn(w[1], log1);
    int s0 = ps_test_wait(p0, 120000), s1 = ps_test_wait(p1, 120000);
    if (s0 != 0 || s1 != 0) {
        ps_test_dump(log0);
        ps_test_dump(log1);
        ps_test_dump(psd[0].log);
    }
    job_result r = {0};
    for (int i = 0; i < 2; i++) {
        ps_stats hold;
        ps_stats *st = ps_test_shard_stats(psd[i].endpoint, &hold);
        r.push_bytes += st->push_bytes;
        ps_stats_free(st);
        ck_assert_int_eq(ps_test_psd_stop(&psd[i], 5000), 0);
    }
    ck_assert_int_eq(s0, 0);
    ck_assert_int_eq(s1, 0);
    const char *text = ps_test_text(summary);
    ck_assert_msg(text != NULL, "no summary written");
    cJSON *j = cJSON_Parse(text);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "compression")->valuestring,
                     strncmp(compression, "topk", 4) == 0 ? "topk" : compression);
    ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(j, "bytes_sent_per_step")));
    r.accuracy = cJSON_GetObjectItem(j, "test_accuracy")->valuedouble;
    r.bytes_per_step = cJSON_GetObjectItem(j, "bytes_sent_per_step")->valuedouble;
    r.steps = cJSON_GetObjectItem(j, "steps")->valueint;
    cJSON_Delete(j);
    fprintf(stderr, "%s %s: accuracy %.4f, %d steps, psd push bytes %llu, chief %.0f per step\n",
            mode, compression, r.accuracy, r.steps, r.push_bytes, r.bytes_per_step);
    return r;
}

START_TEST(sync_encodings) {
    char *dir = ps_test_mkdtemp();
    job_result none = run_job("sync", "none", dir);
    job_result h = run_job("sync", "fp16", dir);
    job_result b = run_job("sync", "bf16", dir);
    job_result tk = run_job("sync", "topk:0.05", dir);
    /* 784-128-10 MLP: 101770 floats a push */
    ck_assert_int_eq(none.steps, 63); /* 2000 samples a worker / 32, rounded up */
    ck_assert_uint_eq(none.push_bytes, 2ull * 63 * 101770 * 4);
    ck_assert_double_eq(none.bytes_per_step, 101770.0 * 4);
    ck_assert_uint_eq(h.push_bytes * 2, none.push_bytes);
    ck_assert_uint_eq(b.push_bytes * 2, none.push_bytes);
    ck_assert_double_eq(h.bytes_per_step * 2, none.bytes_per_step);
    /* top-k: 5% of each tensor, 8 bytes a pair: about a tenth */
    ck_assert_msg(tk.push_bytes * 8 < none.push_bytes && tk.push_bytes * 12 > none.push_bytes,
                  "top-k pushed %llu bytes, none %llu", tk.push_bytes, none.push_bytes);
    ck_assert_double_eq(tk.bytes_per_step * 2 * tk.steps, (double)tk.push_bytes);
    ck_assert_msg(none.accuracy >= 0.70, "none: accuracy %.4f", none.accuracy);
    ck_assert_msg(h.accuracy >= none.accuracy - 0.03, "fp16: accuracy %.4f", h.accuracy);
    ck_assert_msg(b.accuracy >= none.accuracy - 0.05, "bf16: accuracy %.4f", b.accuracy);
    ck_assert_msg(tk.accuracy >= 0.60, "topk: accuracy %.4f", tk.accuracy);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(async_encodings) {
    char *dir = ps_test_mkdtemp();
    job_result h = run_job("async", "fp16", dir);
    job_result tk = run_job("async", "topk:0.05", dir);
    ck_assert_uint_eq(h.push_bytes, 2ull * 63 * 101770 * 2);
    ck_assert_msg(h.accuracy >= 0.70, "async fp16: accuracy %.4f", h.accuracy);
    ck_assert_msg(tk.accuracy >= 0.60, "async topk: accuracy %.4f", tk.accuracy);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(bad_compression_refused) {
    char *dir = ps_test_mkdtemp();
    char log[600];
    snprintf(log, sizeof log, "%s/out.log", dir);
    const char *bad[] = {"topk:0", "topk:2", "fp8", "topk:x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *argv[] = {getenv("PSWORKER"), "--ps", "127.0.0.1:1", "--compression", bad[i],
                              NULL};
        unlink(log);
        ck_assert_int_eq(ps_test_wait(ps_test_spawn(argv, log), 30000), 2);
        const char *out = ps_test_text(log);
        ck_assert_msg(out && strstr(out, "--compression"), "%s: no reason given:\n%s", bad[i],
                      out ? out : "");
    }
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

static void setup(void) {
    ps_test_children_die_with_me(); /* in the test's own process (Check forks) */
}

int main(void) {
    Suite *s = suite_create("train_compress");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 240);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, bad_compression_refused);
    tcase_add_test(tc, sync_encodings);
    tcase_add_test(tc, async_encodings);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
