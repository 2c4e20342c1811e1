/* Optimizer tests: three steps of each kind against closed-form values written
 * out by hand in double, plus slot counts/initial values, Adam/AdamW details and
 * the vector loops against their scalar tails, bit for bit. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"
#include "testutil.h"

#define N 3
#define STEPS 3
/* optim.c computes in float (as TensorFlow's kernels): each step rounds a few
 * times at 2^-24 (6e-8) relative; over three steps the results here stay within
 * 1e-7 of the exact double values. 1e-6 (about 8 float ulps) leaves room for
 * that, and a wrong formula (a missing term, a wrong bias correction) is off
 * by far more. */
#define RTOL 1e-6

static const double W0[N] = {1.0, -2.0, 0.5};
static const double G[STEPS][N] = {{0.5, -1.0, 2.0}, {0.3, 0.2, -1.5}, {-0.4, 0.7, 1.0}};

/* Runs STEPS updates (t = 1..STEPS) from W0 with the gradients G; slots start at
 * ps_optim_slot_init. Writes the weights to w. */
static void run_steps(const ps_opt_spec *spec, float w[N]) {
    float slot_mem[PS_OPT_MAX_SLOTS][N];
    float *slots[PS_OPT_MAX_SLOTS];
    for (int k = 0; k < PS_OPT_MAX_SLOTS; k++)
        slots[k] = slot_mem[k];
    int ns = ps_optim_num_slots(spec->kind);
    for (int s = 0; s < ns; s++)
        for (int i = 0; i < N; i++)
            slot_mem[s][i] = ps_optim_slot_init(spec, s);
    for (int i = 0; i < N; i++)
        w[i] = (float)W0[i];
    for (int k = 0; k < STEPS; k++) {
        float g[N];
        for (int i = 0; i < N; i++)
            g[i] = (float)G[k][i];
        ps_optim_apply(spec, w, g, slots, N, (uint64_t)k + 1);
    }
}

static void expect_close(const char *what, const float got[N], const double want[N]) {
    for (int i = 0; i < N; i++) {
        double d = fabs((double)got[i] - want[i]);
        ck_assert_msg(d <= RTOL * fabs(want[i]), "%s: w[%d] = %.9g, want %.9g (rel err %.3g)", what,
                      i, (double)got[i], want[i], d / fabs(want[i]));
    }
}

/* The float hyperparameters as the code sees them, widened to double. */
#define D(x) ((double)(x))

START_TEST(sgd_three_steps) {
    ps_opt_spec s = ps_opt_spec_default(PS_OPT_SGD);
    s.lr = 0.1f;
    float w[N];
    run_steps(&s, w);
    double want[N];
    for (int i = 0; i < N; i++)
        want[i] = W0[i] - D(s.lr) * (G[0][i] + G[1][i] + G[2][i]);
    expect_close("sgd", w, want);
}
END_TEST

START_TEST(momentum_three_steps) {
    ps_opt_spec s = ps_opt_spec_default(PS_OPT_MOMENTUM);
    s.lr = 0.1f;
    s.momentum = 0.7f;
    float w[N];
    run_steps(&s, w);
    double lr = D(s.lr), mu = D(s.momentum), want[N];
    /* v1 = -lr g1, v2 = -lr (mu g1 + g2), v3 = -lr (mu^2 g1 + mu g2 + g3); w3 = w0 + v1+v2+v3 */
    for (int i = 0; i < N; i++)
        want[i] = W0[i] - lr * ((1 + mu + mu * mu) * G[0][i] + (1 + mu) * G[1][i] + G[2][i]);
    expect_close("momentum", w, want);
}
END_TEST

START_TEST(nesterov_three_steps) {
    ps_opt_spec s = ps_opt_spec_default(PS_OPT_MOMENTUM);
    s.lr = 0.1f;
    s.momentum = 0.7f;
    s.nesterov = true;
    float w[N];
    run_steps(&s, w);
    double lr = D(s.lr), mu = D(s.momentum), want[N];
    for (int i = 0; i < N; i++) {
        double g1 = G[0][i], g2 = G[1][i], g3 = G[2][i];
        double v1 = -lr * g1, v2 = -lr * (mu * g1 + g2), v3 = -lr * (mu * mu * g1 + mu * g2 + g3);
        want[i] = W0[i] + (mu * v1 - lr * g1) + (mu * v2 - lr * g2) + (mu * v3 - lr * g3);
    }
    expect_close("nesterov", w, want);
}
END_TEST

START_TEST(adagrad_three_steps) {
    ps_opt_spec s = ps_opt_spec_default(PS_OPT_ADAGRAD);
    s.lr = 0.1f;
    s.epsilon = 0.01f;
    s.initial_accumulator = 0.25f;
    float w[N];
    run_steps(&s, w);
    double lr = D(s.lr), eps = D(s.epsilon), a0 = D(s.initial_accumulator), want[N];
    for (int i = 0; i < N; i++) {
        double g1 = G[0][i], g2 = G[1][i], g3 = G[2][i];
        double a1 = a0 + g1 * g1, a2 = a1 + g2 * g2, a3 = a2 + g3 * g3;
        want[i] =
            W0[i] - lr * (g1 / (sqrt(a1) + eps) + g2 / (sqrt(a2) + eps) + g3 / (sqrt(a3) + eps));
    }
    expect_close("adagrad", w, want);
}
END_TEST

START_TEST(rmsprop_three_steps) {
    ps_opt_spec s = ps_opt_spec_default(PS_OPT_RMSPROP);
    s.lr = 0.05f;
    s.rho = 0.8f;
    s.epsilon = 0.01f;
    float w[N];
    run_steps(&s, w);
    double lr = D(s.lr), rho = D(s.rho), eps = D(s.epsilon), want[N];
    for (int i = 0; i < N; i++) {
        double g1 = G[0][i], g2 = G[1][i], g3 = G[2][i];
        double s1 = (1 - rho) * g1 * g1;
        double s2 = rho * (1 - rho) * g1 * g1 + (1 - rho) * g2 * g2;
        double s3 =
            rho * rho * (1 - rho) * g1 * g1 + rho * (1 - rho) * g2 * g2 + (1 - rho) * g3 * g3;
        want[i] =
            W0[i] - lr * (g1 / (sqrt(s1) + eps) + g2 / (sqrt(s2) + eps) + g3 / (sqrt(s3) + eps));
    }
    expect_close("rmsprop", w, want);
}
END_TEST

/* The sum of the three Adam steps u_k (without weight decay), per element. */
static void adam_steps(const ps_opt_spec *s, int i, double u[STEPS]) {
    double lr = D(s->lr), b1 = D(s->beta1), b2 = D(s->beta2), eps = D(s->epsilon);
    double g1 = G[0][i], g2 = G[1][i], g3 = G[2][i];
    double m1 = (1 - b1) * g1;
    double m2 = (1 - b1) * (b1 * g1 + g2);
    double m3 = (1 - b1) * (b1 * b1 * g1 + b1 * g2 + g3);
    double v1 = (1 - b2) * g1 * g1;
    double v2 = (1 - b2) * (b2 * g1 * g1 + g2 * g2);
    double v3 = (1 - b2) * (b2 * b2 * g1 * g1 + b2 * g2 * g2 + g3 * g3);
    u[0] = lr * sqrt(1 - b2) / (1 - b1) * m1 / (sqrt(v1) + eps);
    u[1] = lr * sqrt(1 - b2 * b2) / (1 - b1 * b1) * m2 / (sqrt(v2) + eps);
    u[2] = lr * sqrt(1 - b2 * b2 * b2) / (1 - b1 * b1 * b1) * m3 / (sqrt(v3) + eps);
}

START_TEST(adam_three_steps) {
    ps_opt_spec s = ps_opt_spec_default(PS_OPT_ADAM);
    s.lr = 0.1f;
    s.beta1 = 0.8f;
    s.beta2 = 0.95f;
    s.epsilon = 0.01f;
    float w[N];
    run_steps(&s, w);
    double want[N], u[STEPS];
    for (int i = 0; i < N; i++) {
        adam_steps(&s, i, u);
        want[i] = W0[i] - u[0] - u[1] - u[2];
    }
    expect_close("adam", w, want);
}
END_TEST

START_TEST(adamw_three_steps) {
    ps_opt_spec s = ps_opt_spec_default(PS_OPT_ADAMW);
    s.lr = 0.1f;
    s.beta1 = 0.8f;
    s.beta2 = 0.95f;
    s.epsilon = 0.01f;
    s.weight_decay = 0.5f;
    float w[N];
    run_steps(&s, w);
    double c = 1 - D(s.lr) * D(s.weight_decay), want[N], u[STEPS];
    /* each step: w = c*w - u_k */
    for (int i = 0; i < N; i++) {
        adam_steps(&s, i, u);
        want[i] = W0[i] * c * c * c - u[0] * c * c - u[1] * c - u[2];
    }
    expect_close("adamw", w, want);
}
END_TEST

START_TEST(num_slots_per_kind) {
    ck_assert_int_eq(ps_optim_num_slots(PS_OPT_SGD), 0);
    ck_assert_int_eq(ps_optim_num_slots(PS_OPT_MOMENTUM), 1);
    ck_assert_int_eq(ps_optim_num_slots(PS_OPT_ADAGRAD), 1);
    ck_assert_int_eq(ps_optim_num_slots(PS_OPT_RMSPROP), 1);
    ck_assert_int_eq(ps_optim_num_slots(PS_OPT_ADAM), 2);
    ck_assert_int_eq(ps_optim_num_slots(PS_OPT_ADAMW), 2);
    int max = 0;
    for (int k = 0; k < PS_OPT_COUNT; k++)
        max = ps_optim_num_slots((ps_opt_kind)k) > max ? ps_optim_num_slots((ps_opt_kind)k) : max;
    ck_assert_int_eq(PS_OPT_MAX_SLOTS, max);
    ck_assert_int_eq(ps_optim_num_slots(PS_OPT_COUNT), 0);
}
END_TEST

START_TEST(slot_init_values) {
    ps_opt_spec a = ps_opt_spec_default(PS_OPT_ADAGRAD);
    a.initial_accumulator = 0.25f;
    ck_assert_float_eq(ps_optim_slot_init(&a, 0), 0.25f);
    for (int k = 0; k < PS_OPT_COUNT; k++) {
        if (k == PS_OPT_ADAGRAD) continue;
        ps_opt_spec s = ps_opt_spec_default((ps_opt_kind)k);
        s.initial_accumulator = 0.25f; /* must not leak into other kinds */
        for (int slot = 0; slot < ps_optim_num_slots(s.kind); slot++)
            ck_assert_msg(ps_optim_slot_init(&s, slot) == 0.0f, "%s slot %d not 0",
                          ps_opt_kind_name(s.kind), slot);
    }
}
END_TEST

START_TEST(adam_first_step_is_lr_sign_g) {
    ps_opt_spec s = ps_opt_spec_default(PS_OPT_ADAM); /* lr 1e-3, eps 1e-7 */
    float w[4] = {1.0f, -2.0f, 0.5f, 3.0f};
    const float w0[4] = {1.0f, -2.0f, 0.5f, 3.0f};
    const float g[4] = {0.5f, -1e-2f, 20.0f, -3.0f};
    float m[4] = {0}, v[4] = {0};
    float *slots[2] = {m, v};
    ps_optim_apply(&s, w, g, slots, 4, 1);
    for (int i = 0; i < 4; i++) {
        double moved = (double)w0[i] - w[i];
        double want = D(s.lr) * (g[i] > 0 ? 1 : -1);
        ck_assert_msg(fabs(moved - want) <= 1e-3 * D(s.lr), "w[%d] moved %.9g, want %.9g", i, moved,
                      want);
    }
}
END_TEST

START_TEST(adam_bias_correction_uses_t) {
    /* From zero slots, applying with t = 10 gives step lr*sqrt(1-b2^10)/(1-b1^10) *
     * (1-b1)|g| / ((1-b2)^.5 |g| + eps): not the t = 1 step. */
    ps_opt_spec s = ps_opt_spec_default(PS_OPT_ADAM);
    s.lr = 0.1f;
    double lr = D(s.lr), b1 = D(s.beta1), b2 = D(s.beta2), eps = D(s.epsilon);
    const float g[1] = {0.5f};
    double gd = 0.5;
    for (int t = 1; t <= 10; t += 9) {
        float w[1] = {1.0f}, m[1] = {0}, v[1] = {0};
        float *slots[2] = {m, v};
        ps_optim_apply(&s, w, g, slots, 1, (uint64_t)t);
        double want = 1.0 - lr * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t)) * (1 - b1) * gd /
                                (sqrt((1 - b2) * gd * gd) + eps);
        ck_assert_msg(fabs(w[0] - want) <= RTOL * fabs(want), "t=%d: w = %.9g, want %.9g", t,
                      (double)w[0], want);
    }
    /* By hand (TF's formula, hyperparameters as floats): t = 1 from zero slots,
     * lr_t = 0.1*sqrt(1-.999)/(1-.9) = 0.0316226, step = lr_t*0.05/(0.0158114+1e-7) =
     * 0.0999994; t = 10: lr_t = 0.1*sqrt(1-.999^10)/(1-.9^10) = 0.0153188, step = 0.0484423. */
    float w1[1] = {1.0f}, w10[1] = {1.0f}, m[2][1] = {{0}, {0}}, v[2][1] = {{0}, {0}};
    float *s1[2] = {m[0], v[0]}, *s10[2] = {m[1], v[1]};
    ps_optim_apply(&s, w1, g, s1, 1, 1);
    ps_optim_apply(&s, w10, g, s10, 1, 10);
    ck_assert_msg(fabs(w1[0] - 0.9000006) <= RTOL, "t=1: w = %.9g", (double)w1[0]);
    ck_assert_msg(fabs(w10[0] - 0.9515577) <= RTOL, "t=10: w = %.9g", (double)w10[0]);
}
END_TEST

START_TEST(adamw_decays_with_zero_gradient) {
    ps_opt_spec s = ps_opt_spec_default(PS_OPT_ADAMW);
    s.lr = 0.1f;
    s.weight_decay = 0.5f;
    float w[N], m[N] = {0}, v[N] = {0};
    float *slots[2] = {m, v};
    const float g[N] = {0, 0, 0};
    for (int i = 0; i < N; i++)
        w[i] = (float)W0[i];
    for (uint64_t t = 1; t <= STEPS; t++)
        ps_optim_apply(&s, w, g, slots, N, t);
    double c = 1 - D(s.lr) * D(s.weight_decay), want[N];
    for (int i = 0; i < N; i++)
        want[i] = W0[i] * c * c * c;
    expect_close("adamw zero grad", w, want);
    /* plain Adam leaves the weights alone with a zero gradient */
    ps_opt_spec a = ps_opt_spec_default(PS_OPT_ADAM);
    float wa[N];
    for (int i = 0; i < N; i++)
        wa[i] = (float)W0[i];
    ps_optim_apply(&a, wa, g, slots, N, 1);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(wa[i], (float)W0[i]);
}
END_TEST

/* Arbitrary values of both signs, away from 0 (slots that must stay >= 0 get |x|). */
static float pseudo(uint32_t *seed, float scale) {
    *seed = *seed * 1664525u + 1013904223u;
    return ((float)(*seed >> 8) / 16777216.0f - 0.5f) * scale;
}

/* The vector loop (all of n at once: vector body, then tail) and the scalar
 * code (one element per call) must give the same bits: optim.c does one IEEE
 * operation at a time, in order, without fused multiply-adds. This is what keeps
 * psd and a worker's --no-ps identical whichever CPU (clone) each runs on. */
/* Two specs are the same optimizer when the kind and the hyperparameters that kind
 * uses agree; fields it does not use do not count. The description lists those. */
START_TEST(spec_same_and_describe) {
    ps_opt_spec a = ps_opt_spec_default(PS_OPT_SGD), b = a;
    b.beta1 = 0.5f; /* not used by sgd */
    b.momentum = 0.3f;
    ck_assert(ps_opt_spec_same(&a, &b));
    b.lr = 0.02f;
    ck_assert(!ps_opt_spec_same(&a, &b));
    char buf[200];
    ck_assert_str_eq(ps_opt_spec_describe(&a, buf, sizeof buf), "sgd lr=0.01");
    ps_opt_spec m = ps_opt_spec_default(PS_OPT_MOMENTUM), n = m;
    n.nesterov = true;
    ck_assert(!ps_opt_spec_same(&m, &n));
    ck_assert_str_eq(ps_opt_spec_describe(&n, buf, sizeof buf),
                     "momentum lr=0.01 momentum=0.9 nesterov=true");
    ps_opt_spec w = ps_opt_spec_default(PS_OPT_ADAMW), w2 = w;
    w2.weight_decay = 0.005f;
    ck_assert(!ps_opt_spec_same(&w, &w2));
    ck_assert_str_eq(ps_opt_spec_describe(&w, buf, sizeof buf),
                     "adamw lr=0.001 beta1=0.9 beta2=0.999 epsilon=1e-07 weight_decay=0.004");
    ps_opt_spec ad = ps_opt_spec_default(PS_OPT_ADAM);
    ck_assert(!ps_opt_spec_same(&w, &ad)); /* another kind */
    ad.lr = nextafterf(0.1f, 1.0f);        /* %g alone would print it as 0.1 */
    const char *lr = strstr(ps_opt_spec_describe(&ad, buf, sizeof buf), "lr=");
    ck_assert_ptr_nonnull(lr);
    ck_assert(strtof(lr + 3, NULL) == ad.lr);
}
END_TEST

START_TEST(vector_matches_scalar_bitwise) {
    enum { NV = 67 }; /* 4 AVX-512 vectors, 8 AVX2 vectors and a tail of 3 */
    for (int k = 0; k <= PS_OPT_COUNT; k++) {
        /* k == PS_OPT_COUNT: momentum with nesterov */
        ps_opt_spec s = ps_opt_spec_default(k == PS_OPT_COUNT ? PS_OPT_MOMENTUM : (ps_opt_kind)k);
        s.nesterov = k == PS_OPT_COUNT;
        if (s.kind == PS_OPT_MOMENTUM) s.momentum = 0.9f;
        if (s.kind == PS_OPT_ADAMW) s.weight_decay = 0.01f;
        float w[2][NV], w0[NV], g[NV], sl[2][2][NV];
        uint32_t seed = 7u + (uint32_t)k;
        for (int i = 0; i < NV; i++) {
            w0[i] = w[0][i] = w[1][i] = pseudo(&seed, 4.0f);
            g[i] = pseudo(&seed, 1.0f);
            for (int j = 0; j < 2; j++)
                sl[0][j][i] = sl[1][j][i] = fabsf(pseudo(&seed, 0.1f)) + 1e-4f;
        }
        for (uint64_t t = 1; t <= 3; t++) {
            float *all[2] = {sl[0][0], sl[0][1]};
            ps_optim_apply(&s, w[0], g, all, NV, t);
            for (int i = 0; i < NV; i++) {
                float *one[2] = {&sl[1][0][i], &sl[1][1][i]};
                ps_optim_apply(&s, &w[1][i], &g[i], one, 1, t);
            }
        }
        const char *name = k == PS_OPT_COUNT ? "nesterov" : ps_opt_kind_name(s.kind);
        ck_assert_msg(memcmp(w[0], w[1], sizeof w[0]) == 0, "%s: weights differ", name);
        ck_assert_msg(memcmp(sl[0], sl[1], sizeof sl[0]) == 0, "%s: slots differ", name);
        ck_assert_msg(memcmp(w[0], w0, sizeof w0) != 0, "%s: weights unchanged", name);
    }
}
END_TEST

static Suite *optim_suite(void) {
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("formulas");
    tcase_add_test(tc, sgd_three_steps);
    tcase_add_test(tc, momentum_three_steps);
    tcase_add_test(tc, nesterov_three_steps);
    tcase_add_test(tc, adagrad_three_steps);
    tcase_add_test(tc, rmsprop_three_steps);
    tcase_add_test(tc, adam_three_steps);
    tcase_add_test(tc, adamw_three_steps);
    suite_add_tcase(s, tc);
    tc = tcase_create("slots_and_details");
    tcase_add_test(tc, num_slots_per_kind);
    tcase_add_test(tc, slot_init_values);
    tcase_add_test(tc, adam_first_step_is_lr_sign_g);
    tcase_add_test(tc, adam_bias_correction_uses_t);
    tcase_add_test(tc, adamw_decays_with_zero_gradient);
    tcase_add_test(tc, vector_matches_scalar_bitwise);
    tcase_add_test(tc, spec_same_and_describe);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(optim_suite());
}
