/* Finite-difference gradient checks (float forward, central differences summed
 * in double) for Dense, each activation, softmax cross-entropy and whole models. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "layers.h"
#include "model.h"
#include "ps_error.h"
#include "testutil.h"

/* Index of the first i with |ana - num| > atol + rtol * max(|ana|, |num|), or -1. */
static long grad_mismatch(const float *ana, const double *num, size_t n, double atol, double rtol) {
    for (size_t i = 0; i < n; i++) {
        double a = ana[i], m = num[i];
        double scale = fabs(a) > fabs(m) ? fabs(a) : fabs(m);
        if (!(fabs(a - m) <= atol + rtol * scale)) return (long)i;
    }
    return -1;
}

static void expect_grad(const char *what, const float *ana, const double *num, size_t n,
                        double atol, double rtol) {
    long i = grad_mismatch(ana, num, n, atol, rtol);
    ck_assert_msg(i < 0, "%s: d[%ld]: analytic %.7g, numeric %.7g", what, i, i < 0 ? 0 : ana[i],
                  i < 0 ? 0 : num[i]);
}

/* ---- Dense -------------------------------------------------------------- */

enum { DB = 4, DIN = 5, DOUT = 3 };

typedef struct {
    float in[DB * DIN], w[DIN * DOUT], b[DOUT], r[DB * DOUT], out[DB * DOUT];
} dense_case;

/* L = sum(dense(in, w, b) * r), summed in double. */
static double dense_loss(dense_case *c) {
    ps_dense_forward(ps_k_cpu(), c->out, c->in, c->w, c->b, DB, DIN, DOUT);
    double l = 0;
    for (size_t i = 0; i < DB * DOUT; i++)
        l += (double)c->out[i] * c->r[i];
    return l;
}

/* Central differences of dense_loss with respect to x[0..n), one entry at a time. */
static void dense_numgrad(dense_case *c, float *x, size_t n, float h, double *num) {
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        x[i] = v + h;
        double lp = dense_loss(c);
        x[i] = v - h;
        double lm = dense_loss(c);
        x[i] = v;
        num[i] = (lp - lm) / (2.0 * (double)h);
    }
}

static void dense_setup(dense_case *c) {
    ps_test_fill_uniform(c->in, DB * DIN, 1, -1, 1);
    ps_test_fill_uniform(c->w, DIN * DOUT, 2, -1, 1);
    ps_test_fill_uniform(c->b, DOUT, 3, -1, 1);
    ps_test_fill_uniform(c->r, DB * DOUT, 4, -1, 1);
}

START_TEST(dense_grads) {
    dense_case c;
    dense_setup(&c);
    float din[DB * DIN], dw[DIN * DOUT], db[DOUT];
    ps_dense_backward_overwrite(ps_k_cpu(), din, dw, db, c.r, c.in, c.w, DB, DIN, DOUT);
    double num[DB * DIN];
    const float h = 0.05f; /* L is linear in each argument: differences are exact up to rounding */
    dense_numgrad(&c, c.w, DIN * DOUT, h, num);
    expect_grad("dense dw", dw, num, DIN * DOUT, 1e-4, 1e-3);
    dense_numgrad(&c, c.b, DOUT, h, num);
    expect_grad("dense db", db, num, DOUT, 1e-4, 1e-3);
    dense_numgrad(&c, c.in, DB * DIN, h, num);
    expect_grad("dense dx", din, num, DB * DIN, 1e-4, 1e-3);

    /* the comparison is sensitive: a 2% error in one entry is caught */
    dense_numgrad(&c, c.w, DIN * DOUT, h, num);
    dw[7] *= 1.02f;
    ck_assert_int_eq(grad_mismatch(dw, num, DIN * DOUT, 1e-4, 1e-3), 7);

    /* _acc adds the same gradients on top of what is there */
    float dw2[DIN * DOUT], db2[DOUT], din2[DB * DIN];
    for (size_t i = 0; i < DIN * DOUT; i++)
        dw2[i] = 1.0f;
    for (size_t i = 0; i < DOUT; i++)
        db2[i] = -1.0f;
    ps_dense_backward_overwrite(ps_k_cpu(), din, dw, db, c.r, c.in, c.w, DB, DIN, DOUT);
    ps_dense_backward_acc(ps_k_cpu(), din2, dw2, db2, c.r, c.in, c.w, DB, DIN, DOUT);
    for (size_t i = 0; i < DIN * DOUT; i++)
        ck_assert_float_eq_tol(dw2[i], dw[i] + 1.0f, 1e-5f);
    for (size_t i = 0; i < DOUT; i++)
        ck_assert_float_eq_tol(db2[i], db[i] - 1.0f, 1e-5f);
    for (size_t i = 0; i < DB * DIN; i++)
        ck_assert_float_eq_tol(din2[i], din[i], 1e-6f);
}
END_TEST

/* ---- activations -------------------------------------------------------- */

START_TEST(activation_grads) {
    const ps_k_act acts[] = {PS_K_ACT_LINEAR, PS_K_ACT_RELU, PS_K_ACT_SIGMOID, PS_K_ACT_TANH};
    const char *names[] = {"linear", "relu", "sigmoid", "tanh"};
    enum { N = 41 };
    float x[N], r[N], y[N], dx[N];
    double num[N];
    ps_test_fill_uniform(x, N, 11, -3, 3);
    ps_test_fill_uniform(r, N, 12, -1, 1);
    for (size_t i = 0; i < N; i++) /* keep relu's kink out of reach of +-h */
        if (fabsf(x[i]) < 0.1f) x[i] = x[i] < 0 ? -0.1f - x[i] : 0.1f + x[i];
    const float h = 1e-2f;
    for (size_t a = 0; a < 4; a++) {
        ps_k_dev *d = ps_k_cpu();
        ps_activation_forward(d, acts[a], y, x, N);
        ps_activation_backward_overwrite(d, acts[a], dx, r, y, N);
        for (size_t i = 0; i < N; i++) {
            /* f is element-wise: only element i changes, so difference it alone */
            float xp = x[i] + h, xm = x[i] - h, yp, ym;
            ps_activation_forward(d, acts[a], &yp, &xp, 1);
            ps_activation_forward(d, acts[a], &ym, &xm, 1);
            num[i] = ((double)yp - (double)ym) / (2.0 * (double)h) * r[i];
        }
        expect_grad(names[a], dx, num, N, 2e-5, 2e-4);
    }
}
END_TEST

/* ---- softmax cross-entropy ---------------------------------------------- */

START_TEST(softmax_ce_grads) {
    enum { B = 5, C = 7 };
    float z[B * C], dz[B * C], loss;
    int32_t y[B] = {0, 6, 3, 3, 1};
    double num[B * C];
    ps_test_fill_uniform(z, B * C, 21, -3, 3);
    ps_k_dev *d = ps_k_cpu();
    ck_assert_int_eq(ps_k_softmax_ce_overwrite(d, dz, z, y, B, C, &loss), PS_OK);
    const float h = 1e-2f;
    for (size_t i = 0; i < B * C; i++) {
        float v = z[i], lp, lm;
        z[i] = v + h;
        ck_assert_int_eq(ps_k_softmax_ce_overwrite(d, NULL, z, y, B, C, &lp), PS_OK);
        z[i] = v - h;
        ck_assert_int_eq(ps_k_softmax_ce_overwrite(d, NULL, z, y, B, C, &lm), PS_OK);
        z[i] = v;
        num[i] = ((double)lp - (double)lm) / (2.0 * (double)h);
    }
    expect_grad("softmax_ce dlogits", dz, num, B * C, 1e-4, 1e-2);
    /* each row of dlogits sums to 0 */
    for (size_t r = 0; r < B; r++) {
        double s = 0;
        for (size_t c = 0; c < C; c++)
            s += dz[r * C + c];
        ck_assert_double_lt(fabs(s), 1e-6);
    }
}
END_TEST

/* ---- whole models ------------------------------------------------------- */

static ps_model *make_model(const char *hidden_act, const char *out_act, bool from_logits) {
    char spec[512], err[256];
    snprintf(spec, sizeof spec,
             "{\"input_shape\": [7], \"layers\": ["
             "{\"type\": \"Dense\", \"units\": 5, \"activation\": \"%s\"},"
             "{\"type\": \"Dense\", \"units\": 4},"
             "{\"type\": \"Activation\", \"activation\": \"sigmoid\"},"
             "{\"type\": \"Dense\", \"units\": 3, \"activation\": \"%s\"}],"
             "\"from_logits\": %s, \"optimizer\": \"sgd\"}",
             hidden_act, out_act, from_logits ? "true" : "false");
    ps_model *m = NULL;
    int rc = ps_model_from_json(spec, &m, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "%s", err);
    ps_model_init_params(m, 1234);
    return m;
}

/* Checks every gradient of ps_model_train_step against central differences of its loss. */
static void model_gradcheck(ps_model *m, const char *what, float *ana_out) {
    enum { B = 6 };
    size_t n = ps_model_num_params(m), in = ps_model_input_dim(m);
    float x[B * 7], loss;
    int32_t y[B] = {0, 1, 2, 2, 1, 0};
    size_t correct;
    ck_assert_uint_eq(in, 7);
    ps_test_fill_uniform(x, B * in, 31, -2, 2);
    ck_assert_int_eq(ps_model_train_step(m, x, y, B, &loss, &correct), PS_OK);
    float *ana = malloc(n * sizeof *ana);
    double *num = malloc(n * sizeof *num);
    memcpy(ana, ps_model_grads(m), n * sizeof *ana);
    float *p = ps_model_params(m);
    const float h = 2e-3f;
    for (size_t i = 0; i < n; i++) {
        float v = p[i], lp, lm;
        p[i] = v + h;
        ck_assert_int_eq(ps_model_train_step(m, x, y, B, &lp, &correct), PS_OK);
        p[i] = v - h;
        ck_assert_int_eq(ps_model_train_step(m, x, y, B, &lm, &correct), PS_OK);
        p[i] = v;
        num[i] = ((double)lp - (double)lm) / (2.0 * (double)h);
    }
    expect_grad(what, ana, num, n, 3e-4, 2e-2);
    if (ana_out) memcpy(ana_out, ana, n * sizeof *ana);
    free(ana);
    free(num);
}

START_TEST(model_grads) {
    ps_model *m = make_model("tanh", "linear", true);
    model_gradcheck(m, "model tanh", NULL);
    ps_model_free(m);
    m = make_model("relu", "linear", true);
    model_gradcheck(m, "model relu", NULL);
    ps_model_free(m);
}
END_TEST

/* A final softmax with from_logits=false gives the same loss and gradients as
 * the logits model, and they match finite differences. */
START_TEST(model_grads_softmax_output) {
    ps_model *a = make_model("tanh", "linear", true), *b = make_model("tanh", "softmax", false);
    size_t n = ps_model_num_params(a);
    ck_assert_uint_eq(n, ps_model_num_params(b));
    float *ga = malloc(n * sizeof *ga), *gb = malloc(n * sizeof *gb);
    model_gradcheck(a, "logits model", ga);
    model_gradcheck(b, "softmax model", gb);
    for (size_t i = 0; i < n; i++)
        ck_assert_float_eq(ga[i], gb[i]);
    free(ga);
    free(gb);
    ps_model_free(a);
    ps_model_free(b);
}
END_TEST

int main(void) {
    Suite *s = suite_create("gradcheck");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, dense_grads);
    tcase_add_test(tc, activation_grads);
    tcase_add_test(tc, softmax_ce_grads);
    tcase_add_test(tc, model_grads);
    tcase_add_test(tc, model_grads_softmax_output);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
