/* The exact ROC AUC of an evaluation (worker/auc.c): hand-worked sets, ties
 * counted half, a class absent, and random sets against the definition (every
 * positive-negative pair compared), with integer and float labels; the spec's
 * "metrics": ["auc"] and its refusal for a model that is not a binary classifier. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "auc.h"
#include "model.h"
#include "ps_error.h"

static double auc_of(const float *s, const int32_t *y, size_t n) {
    ps_auc a = {0};
    ck_assert_int_eq(ps_auc_add(&a, s, y, n), PS_OK);
    double v = ps_auc_value(&a);
    ps_auc_free(&a);
    return v;
}

START_TEST(hand_worked) {
    /* perfect, reversed, and one pair out of order among 2 x 2 */
    const float s[4] = {0.1f, 0.4f, 0.35f, 0.8f};
    const int32_t perfect[4] = {0, 1, 0, 1}, reversed[4] = {1, 0, 1, 0}, mixed[4] = {0, 0, 1, 1};
    ck_assert(auc_of(s, perfect, 4) == 1.0);
    ck_assert(auc_of(s, reversed, 4) == 0.0);
    ck_assert(auc_of(s, mixed, 4) == 0.75); /* 0.35 (pos) < 0.4 (neg): 3 of 4 pairs */
    /* ties: every score equal gives 1/2; one tie among four pairs gives 3.5/4 */
    const float same[4] = {0.5f, 0.5f, 0.5f, 0.5f}, tie[4] = {0.1f, 0.4f, 0.4f, 0.8f};
    ck_assert(auc_of(same, perfect, 4) == 0.5);
    ck_assert(auc_of(tie, mixed, 4) == 0.875);
    /* one class only: no pairs */
    const int32_t ones[4] = {1, 1, 1, 1};
    ck_assert(auc_of(s, ones, 4) == -1);
    ps_auc a = {0};
    ck_assert(ps_auc_value(&a) == -1);
    /* negative scores and infinities order as numbers */
    const float neg[4] = {-INFINITY, -2.0f, -0.0f, INFINITY};
    ck_assert(auc_of(neg, mixed, 4) == 1.0);
}
END_TEST

START_TEST(against_every_pair) {
    enum { N = 3000 };
    float *s = malloc(N * sizeof *s), *yf = malloc(N * sizeof *yf);
    int32_t *y = malloc(N * sizeof *y);
    unsigned long long st = 12345;
    for (size_t i = 0; i < N; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        y[i] = (int32_t)((st >> 40) % 3 == 0);
        /* scores on a coarse grid (many ties), leaning towards the positives */
        s[i] = (float)((st >> 20) % 50) / 50.0f + (y[i] ? 0.1f : 0.0f);
        yf[i] = (float)y[i];
    }
    double wins = 0, pairs = 0;
    for (size_t i = 0; i < N; i++)
        for (size_t j = 0; j < N; j++)
            if (y[i] && !y[j]) {
                pairs++;
                wins += s[i] > s[j] ? 1 : s[i] == s[j] ? 0.5 : 0;
            }
    /* added in uneven pieces, as batches are */
    ps_auc a = {0}, b = {0};
    for (size_t i = 0; i < N;) {
        size_t n = i + 7 < N ? 7 + i % 300 : N - i;
        if (i + n > N) n = N - i;
        ck_assert_int_eq(ps_auc_add(&a, s + i, y + i, n), PS_OK);
        ck_assert_int_eq(ps_auc_add_f(&b, s + i, yf + i, n), PS_OK);
        i += n;
    }
    double want = wins / pairs;
    ck_assert_msg(fabs(ps_auc_value(&a) - want) < 1e-12, "%.15f vs %.15f", ps_auc_value(&a), want);
    ck_assert(ps_auc_value(&b) == ps_auc_value(&a));
    ck_assert(want > 0.55 && want < 0.95); /* a set where the answer is neither end */
    ps_auc_free(&a);
    ps_auc_free(&b);
    free(s), free(y), free(yf);
}
END_TEST

static int spec(const char *json, char *err, size_t errlen) {
    ps_model *m = NULL;
    int rc = ps_model_from_json(json, &m, err, errlen);
    if (rc == PS_OK) {
        ck_assert(ps_model_wants_auc(m));
        ps_model_free(m);
    }
    return rc;
}

START_TEST(spec_metric) {
    char err[256] = "";
    ck_assert_int_eq(spec("{\"input_shape\": [3], \"layers\": [{\"type\": \"Dense\", \"units\": 1,"
                          " \"activation\": \"sigmoid\"}], \"loss\": \"binary_crossentropy\","
                          " \"from_logits\": false, \"metrics\": [\"accuracy\", \"auc\"]}",
                          err, sizeof err),
                     PS_OK);
    ck_assert_int_eq(spec("{\"input_shape\": [3], \"layers\": [{\"type\": \"Dense\", \"units\": 4}],"
                          " \"loss\": \"sparse_categorical_crossentropy\", \"metrics\": [\"AUC\"]}",
                          err, sizeof err),
                     PS_EFORMAT);
    ck_assert_msg(strstr(err, "\"auc\" is for a binary classifier"), "%s", err);
    ck_assert_int_eq(spec("{\"input_shape\": [3], \"layers\": [{\"type\": \"Dense\", \"units\": 1}],"
                          " \"loss\": \"mse\", \"metrics\": [\"auc\"]}",
                          err, sizeof err),
                     PS_EFORMAT);
    ck_assert_int_eq(spec("{\"input_shape\": [3], \"layers\": [{\"type\": \"Dense\", \"units\": 1}],"
                          " \"loss\": \"mse\", \"metrics\": [\"precision\"]}",
                          err, sizeof err),
                     PS_EFORMAT);
    ck_assert_msg(strstr(err, "not precision"), "%s", err);
}
END_TEST

int main(void) {
    Suite *s = suite_create("auc");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, hand_worked);
    tcase_add_test(tc, against_every_pair);
    tcase_add_test(tc, spec_metric);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
