/* The sparse optimizers against their formulas, computed here in double over
 * a few steps of a row (closed forms written out independently of
 * optim_rows.c): SGD, Adagrad, row-wise Adagrad (one accumulator per row),
 * lazy Adam (a row pushed at steps 1 and 3 only keeps its moments in step 2,
 * and a row pushed every step moves as dense Adam does), FTRL-Proximal (with
 * L1 holding a weight at exactly 0, and L2). */
#include <check.h>
#include <math.h>
#include <string.h>

#include "optim.h"
#include "optim_rows.h"
#include "ps_error.h"
#include "testutil.h"

#define DIM 3

static const float G[3][DIM] = {{0.5f, -1.0f, 2.0f}, {0.25f, 0.0f, -3.0f}, {-1.5f, 0.75f, 0.1f}};
static const float W0[DIM] = {0.1f, -0.2f, 0.3f};

static void close_to(const float *got, const double *want, double tol, const char *what) {
    for (int i = 0; i < DIM; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= tol * (1.0 + fabs(want[i])),
                      "%s[%d]: %.9g, want %.9g", what, i, (double)got[i], want[i]);
}

START_TEST(names_and_slots) {
    ps_row_opt_kind k;
    const char *names[] = {"sgd", "adagrad", "rowwise_adagrad", "lazy_adam", "ftrl"};
    size_t slots[] = {0, 7, 1, 14, 14};
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(ps_row_opt_parse_kind(names[i], &k), 0);
        ck_assert_int_eq(k, i);
        ck_assert_str_eq(ps_row_opt_kind_name(k), names[i]);
        ck_assert_uint_eq(ps_row_opt_slot_floats(k, 7), slots[i]);
    }
    ck_assert_int_eq(ps_row_opt_parse_kind("adam", &k), -1);
}
END_TEST

START_TEST(sgd_and_adagrad) {
    ps_row_opt o = ps_row_opt_default(PS_ROW_SGD, 0.1f);
    float w[DIM], s[DIM];
    memcpy(w, W0, sizeof w);
    double ref[DIM], acc[DIM];
    for (int i = 0; i < DIM; i++) ref[i] = W0[i];
    for (int t = 0; t < 3; t++) {
        ps_row_opt_apply(&o, w, NULL, G[t], DIM, (uint64_t)t + 1);
        for (int i = 0; i < DIM; i++) ref[i] -= 0.1 * G[t][i];
    }
    close_to(w, ref, 1e-6, "sgd");
    o = ps_row_opt_default(PS_ROW_ADAGRAD, 0.1f);
    memcpy(w, W0, sizeof w);
    ps_row_opt_init(&o, s, DIM);
    for (int i = 0; i < DIM; i++) ref[i] = W0[i], acc[i] = 0.1;
    for (int t = 0; t < 3; t++) {
        ps_row_opt_apply(&o, w, s, G[t], DIM, (uint64_t)t + 1);
        for (int i = 0; i < DIM; i++) {
            acc[i] += (double)G[t][i] * G[t][i];
            ref[i] -= 0.1 * G[t][i] / (sqrt(acc[i]) + 1e-7);
        }
    }
    close_to(w, ref, 1e-6, "adagrad");
    close_to(s, acc, 1e-6, "adagrad accumulator");
}
END_TEST

START_TEST(rowwise_adagrad_one_accumulator) {
    ps_row_opt o = ps_row_opt_default(PS_ROW_ROWWISE_ADAGRAD, 0.05f);
    float w[DIM], a;
    memcpy(w, W0, sizeof w);
    ps_row_opt_init(&o, &a, DIM);
    ck_assert(a == 0.1f);
    double ref[DIM], A = 0.1;
    for (int i = 0; i < DIM; i++) ref[i] = W0[i];
    for (int t = 0; t < 3; t++) {
        ps_row_opt_apply(&o, w, &a, G[t], DIM, (uint64_t)t + 1);
        double ms = 0;
        for (int i = 0; i < DIM; i++) ms += (double)G[t][i] * G[t][i];
        A += ms / DIM;
        for (int i = 0; i < DIM; i++) ref[i] -= 0.05 * G[t][i] / (sqrt(A) + 1e-7);
    }
    close_to(w, ref, 1e-6, "rowwise_adagrad");
    ck_assert(fabs(a - A) < 1e-5);
}
END_TEST

/* Adam's step in double for a row pushed at the steps in `pushed` (t counts the
 * table's updates, 1-based). */
static void adam_ref(const int *pushed, int n, double *w) {
    double m[DIM] = {0}, v[DIM] = {0};
    for (int i = 0; i < DIM; i++) w[i] = W0[i];
    for (int k = 0; k < n; k++) {
        int t = pushed[k];
        const float *g = G[k];
        double lr_t = 0.01 * sqrt(1 - pow(0.999, t)) / (1 - pow(0.9, t));
        for (int i = 0; i < DIM; i++) {
            m[i] = 0.9 * m[i] + 0.1 * g[i];
            v[i] = 0.999 * v[i] + 0.001 * (double)g[i] * g[i];
            w[i] -= lr_t * m[i] / (sqrt(v[i]) + 1e-7);
        }
    }
}

START_TEST(lazy_adam_moves_pushed_rows_only) {
    ps_row_opt o = ps_row_opt_default(PS_ROW_LAZY_ADAM, 0.01f);
    float w[DIM], s[2 * DIM];
    memcpy(w, W0, sizeof w);
    ps_row_opt_init(&o, s, DIM);
    /* pushed at the table's steps 1 and 3: in step 2 neither it nor its moments change */
    ps_row_opt_apply(&o, w, s, G[0], DIM, 1);
    ps_row_opt_apply(&o, w, s, G[1], DIM, 3); /* bias-corrected for the table's step 3 */
    int pushed[2] = {1, 3};
    double ref[DIM];
    adam_ref(pushed, 2, ref);
    close_to(w, ref, 1e-5, "lazy_adam");
    /* pushed every step, it is dense Adam (optim.h) */
    ps_opt_spec spec = ps_opt_spec_default(PS_OPT_ADAM);
    spec.lr = 0.01f;
    float d[DIM], dm[DIM] = {0}, dv[DIM] = {0}, *dslots[2] = {dm, dv};
    memcpy(d, W0, sizeof d);
    memcpy(w, W0, sizeof w);
    ps_row_opt_init(&o, s, DIM);
    for (int t = 0; t < 3; t++) {
        ps_row_opt_apply(&o, w, s, G[t], DIM, (uint64_t)t + 1);
        ps_optim_apply(&spec, d, G[t], dslots, DIM, (uint64_t)t + 1);
    }
    for (int i = 0; i < DIM; i++)
        ck_assert_msg(fabsf(w[i] - d[i]) <= 1e-6f, "[%d] lazy %.9g dense %.9g", i, (double)w[i],
                      (double)d[i]);
}
END_TEST

/* FTRL-Proximal in double, as Keras writes it (learning_rate_power -0.5). */
static void ftrl_ref(double lr, double l1, double l2, int steps, double *w) {
    double z[DIM] = {0}, n[DIM];
    for (int i = 0; i < DIM; i++) w[i] = W0[i], n[i] = 0.1;
    for (int t = 0; t < steps; t++)
        for (int i = 0; i < DIM; i++) {
            double g = G[t][i], n2 = n[i] + g * g;
            z[i] += g - (sqrt(n2) - sqrt(n[i])) / lr * w[i];
            n[i] = n2;
            w[i] = fabs(z[i]) <= l1 ? 0.0
                                    : -(z[i] - (z[i] > 0 ? l1 : -l1)) / (sqrt(n2) / lr + 2 * l2);
        }
}

START_TEST(ftrl_proximal) {
    double params[3][2] = {{0, 0}, {0.3, 0.1}, {10, 0}}; /* l1, l2: none, both, an L1 wall */
    for (int c = 0; c < 3; c++) {
        ps_row_opt o = ps_row_opt_default(PS_ROW_FTRL, 0.2f);
        o.l1 = (float)params[c][0], o.l2 = (float)params[c][1];
        float w[DIM], s[2 * DIM];
        memcpy(w, W0, sizeof w);
        ps_row_opt_init(&o, s, DIM);
        for (int t = 0; t < 3; t++) ps_row_opt_apply(&o, w, s, G[t], DIM, (uint64_t)t + 1);
        double ref[DIM];
        ftrl_ref(0.2, params[c][0], params[c][1], 3, ref);
        close_to(w, ref, 1e-5, "ftrl");
        if (c == 2)
            for (int i = 0; i < DIM; i++) ck_assert(w[i] == 0.0f); /* exactly, not nearly */
    }
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("optim_rows");
    TCase *tc = tcase_create("rows");
    tcase_add_test(tc, names_and_slots);
    tcase_add_test(tc, sgd_and_adagrad);
    tcase_add_test(tc, rowwise_adagrad_one_accumulator);
    tcase_add_test(tc, lazy_adam_moves_pushed_rows_only);
    tcase_add_test(tc, ftrl_proximal);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(suite());
}
