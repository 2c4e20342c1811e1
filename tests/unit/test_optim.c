/* Optimizer tests: three steps of each kind against closed-form values written
 * out by hand in double, plus slot counts/initial values, Adam/AdamW details and
 * the vector loops against their scalar tails, bit for bit; the learning-rate
 * schedules against Keras' formulas, the rate each update uses, and weight decay
 * for the kinds other than adamw. */
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

/* Adam's three steps with decoupled weight decay (AdamW, Keras 3's weight_decay):
 * each step w = c*w - u_k with c = 1 - lr*weight_decay. */
static void adamw_expected(const ps_opt_spec *s, double want[N]) {
    double c = 1 - D(s->lr) * D(s->weight_decay), u[STEPS];
    for (int i = 0; i < N; i++) {
        adam_steps(s, i, u);
        want[i] = W0[i] * c * c * c - u[0] * c * c - u[1] * c - u[2];
    }
}

START_TEST(adamw_three_steps) {
    ps_opt_spec s = ps_opt_spec_default(PS_OPT_ADAMW);
    s.lr = 0.1f;
    s.beta1 = 0.8f;
    s.beta2 = 0.95f;
    s.epsilon = 0.01f;
    s.weight_decay = 0.5f;
    float w[N];
    run_steps(&s, w);
    double want[N];
    adamw_expected(&s, want);
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

/* ---- schedules ---- */

/* The rate is the closed form's, rounded once to float (so within 1e-7 relative). */
static void expect_rate(const ps_opt_spec *s, uint64_t step, double want, const char *what) {
    double got = ps_optim_lr(s, step);
    ck_assert_msg(fabs(got - want) <= 1e-7 * fabs(want) + 1e-12,
                  "%s: rate at step %llu = %.9g, want %.9g", what, (unsigned long long)step, got,
                  want);
}

static ps_opt_spec scheduled(ps_lr_kind kind, float lr) {
    ps_opt_spec s = ps_opt_spec_default(PS_OPT_SGD);
    s.lr = lr;
    s.schedule.kind = kind;
    return s;
}

START_TEST(schedule_constant_is_lr_exactly) {
    ps_opt_spec s = ps_opt_spec_default(PS_OPT_ADAM);
    s.lr = nextafterf(0.1f, 1.0f);
    for (uint64_t t = 0; t < 1000000; t += 99999)
        ck_assert(ps_optim_lr(&s, t) == s.lr);
}
END_TEST

/* lr * rate^(step/k), and with staircase rate^floor(step/k): steps 0, k, 2k and between. */
START_TEST(schedule_exponential) {
    const double lr = 0.1, rate = 0.5, k = 10;
    ps_opt_spec s = scheduled(PS_LR_EXPONENTIAL, (float)lr);
    s.schedule.decay_steps = (float)k;
    s.schedule.decay_rate = (float)rate;
    for (int stair = 0; stair < 2; stair++) {
        s.schedule.staircase = stair;
        const char *what = stair ? "exponential staircase" : "exponential";
        expect_rate(&s, 0, (double)(float)lr, what);
        expect_rate(&s, 10, (double)(float)lr * 0.5, what);
        expect_rate(&s, 20, (double)(float)lr * 0.25, what);
        expect_rate(&s, 15, (double)(float)lr * (stair ? 0.5 : pow(0.5, 1.5)), what);
        expect_rate(&s, 29, (double)(float)lr * (stair ? 0.25 : pow(0.5, 2.9)), what);
    }
}
END_TEST

/* lr / (1 + rate * step/k), with staircase floor(step/k). */
START_TEST(schedule_inverse_time) {
    const float lr = 0.1f;
    ps_opt_spec s = scheduled(PS_LR_INVERSE_TIME, lr);
    s.schedule.decay_steps = 10;
    s.schedule.decay_rate = 2;
    for (int stair = 0; stair < 2; stair++) {
        s.schedule.staircase = stair;
        const char *what = stair ? "inverse time staircase" : "inverse time";
        expect_rate(&s, 0, lr, what);
        expect_rate(&s, 10, lr / 3.0, what);
        expect_rate(&s, 20, lr / 5.0, what);
        expect_rate(&s, 15, lr / (stair ? 3.0 : 4.0), what);
    }
}
END_TEST

/* values[0] while step <= boundaries[0], values[i] while boundaries[i-1] < step <=
 * boundaries[i], the last value after the last boundary (Keras' comparisons). */
START_TEST(schedule_piecewise) {
    ps_opt_spec s = scheduled(PS_LR_PIECEWISE, 0.1f);
    s.schedule.n_boundaries = 2;
    s.schedule.boundaries[0] = 10;
    s.schedule.boundaries[1] = 20;
    s.schedule.values[0] = 0.05f;
    s.schedule.values[1] = 0.01f;
    const uint64_t steps[] = {0, 9, 10, 11, 20, 21, 1000000};
    const float want[] = {0.1f, 0.1f, 0.1f, 0.05f, 0.05f, 0.01f, 0.01f};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        ck_assert_msg(ps_optim_lr(&s, steps[i]) == want[i], "piecewise: step %llu: %g, want %g",
                      (unsigned long long)steps[i], (double)ps_optim_lr(&s, steps[i]),
                      (double)want[i]);
}
END_TEST

/* Keras' CosineDecay: without warm-up lr * ((1-alpha) (1+cos(pi min(step,k)/k))/2 + alpha). */
START_TEST(schedule_cosine) {
    const float lr = 0.1f, alpha = 0.1f;
    const double k = 100, a = alpha;
    ps_opt_spec s = scheduled(PS_LR_COSINE, lr);
    s.schedule.decay_steps = (float)k;
    s.schedule.alpha = alpha;
    s.schedule.warmup_target = lr; /* no warm-up */
    for (uint64_t step = 0; step <= 300; step += 25) {
        double x = step < k ? (double)step : k;
        expect_rate(&s, step, lr * ((1 - a) * 0.5 * (1 + cos(M_PI * x / k)) + a), "cosine");
    }
    expect_rate(&s, 0, lr, "cosine");
    expect_rate(&s, 50, lr * ((1 - a) * 0.5 + a), "cosine");
    expect_rate(&s, 100, lr * a, "cosine");
}
END_TEST

/* Keras 3's warm-up: linear from lr to warmup_target over warmup_steps, then the
 * cosine decay from warmup_target over decay_steps, then alpha * warmup_target. */
START_TEST(schedule_cosine_warmup) {
    const float target = 0.2f, lr = 0.02f;
    const double w = 10, k = 100;
    ps_opt_spec s = scheduled(PS_LR_COSINE, lr);
    s.schedule.decay_steps = (float)k;
    s.schedule.warmup_target = target;
    s.schedule.warmup_steps = (float)w;
    expect_rate(&s, 0, lr, "warm-up");
    expect_rate(&s, 5, lr + ((double)target - lr) * 0.5, "warm-up");
    expect_rate(&s, 10, target, "warm-up");
    expect_rate(&s, 60, target * 0.5 * (1 + cos(M_PI * 0.5)), "warm-up");
    expect_rate(&s, 110, 0, "warm-up");
    expect_rate(&s, 5000, 0, "warm-up");
    s.lr = 0; /* a warm-up from 0 */
    expect_rate(&s, 0, 0, "warm-up from 0");
    expect_rate(&s, 2, (double)target * 0.2, "warm-up from 0");
}
END_TEST

/* Update t uses the rate after t - 1 updates (Keras: learning_rate(iterations)). */
START_TEST(schedule_rate_of_each_update) {
    ps_opt_spec s = scheduled(PS_LR_EXPONENTIAL, 0.1f);
    s.schedule.decay_steps = 1;
    s.schedule.decay_rate = 0.5f;
    float w = 1, g = 1;
    double want = 1;
    for (uint64_t t = 1; t <= 4; t++) {
        ps_optim_apply(&s, &w, &g, NULL, 1, t);
        want -= 0.1 * pow(0.5, (double)(t - 1));
        ck_assert_msg(fabs(w - want) < 1e-6, "after update %llu: %.9g, want %.9g",
                      (unsigned long long)t, (double)w, want);
    }
}
END_TEST

/* ---- weight decay for every kind (Keras 3): w -= lr*wd*w, then the update ---- */

START_TEST(weight_decay_sgd) {
    ps_opt_spec s = ps_opt_spec_default(PS_OPT_SGD);
    s.lr = 0.1f;
    s.weight_decay = 0.5f;
    float w[N];
    run_steps(&s, w);
    double c = 1 - D(s.lr) * D(s.weight_decay), want[N];
    for (int i = 0; i < N; i++) {
        double x = W0[i];
        for (int k = 0; k < STEPS; k++)
            x = c * x - D(s.lr) * G[k][i];
        want[i] = x;
    }
    expect_close("sgd weight decay", w, want);
}
END_TEST

START_TEST(weight_decay_momentum) {
    ps_opt_spec s = ps_opt_spec_default(PS_OPT_MOMENTUM);
    s.lr = 0.1f;
    s.momentum = 0.7f;
    s.weight_decay = 0.25f;
    float w[N];
    run_steps(&s, w);
    double c = 1 - D(s.lr) * D(s.weight_decay), want[N];
    for (int i = 0; i < N; i++) {
        double x = W0[i], v = 0;
        for (int k = 0; k < STEPS; k++) {
            v = D(s.momentum) * v - D(s.lr) * G[k][i];
            x = c * x + v;
        }
        want[i] = x;
    }
    expect_close("momentum weight decay", w, want);
}
END_TEST

/* Adam with weight_decay is AdamW's formula (Keras 3: the same decay in the base class). */
START_TEST(weight_decay_adam) {
    ps_opt_spec s = ps_opt_spec_default(PS_OPT_ADAM);
    s.lr = 0.1f;
    s.beta1 = 0.8f;
    s.beta2 = 0.95f;
    s.epsilon = 0.01f;
    s.weight_decay = 0.5f;
    float w[N];
    run_steps(&s, w);
    double want[N];
    adamw_expected(&s, want);
    expect_close("adam weight decay", w, want);
    ps_opt_spec aw = s;
    aw.kind = PS_OPT_ADAMW;
    float w2[N];
    run_steps(&aw, w2);
    ck_assert_msg(memcmp(w, w2, sizeof w) == 0, "adam + weight_decay and adamw differ");
}
END_TEST

/* AdamW gives the bits it gave before schedules and weight decay for every kind:
 * the same float operations, written out here as they were. */
START_TEST(adamw_bits_as_before) {
    ps_opt_spec s = ps_opt_spec_default(PS_OPT_ADAMW);
    s.lr = 0.003f;
    s.weight_decay = 0.07f;
    float w[N], m[N] = {0}, v[N] = {0}, w2[N], m2[N] = {0}, v2[N] = {0};
    for (int i = 0; i < N; i++)
        w[i] = w2[i] = (float)W0[i];
    for (uint64_t t = 1; t <= STEPS; t++) {
        float g[N];
        for (int i = 0; i < N; i++)
            g[i] = (float)G[t - 1][i];
        float *sl[2] = {m, v};
        ps_optim_apply(&s, w, g, sl, N, t);
        double td = (double)t;
        float lr_t = (float)(s.lr * sqrt(1.0 - pow(s.beta2, td)) / (1.0 - pow(s.beta1, td)));
        float decay = (float)((double)s.lr * s.weight_decay);
        float b1 = s.beta1, b2 = s.beta2, ob1 = 1.0f - s.beta1, ob2 = 1.0f - s.beta2;
        for (int i = 0; i < N; i++) {
            volatile float wi = w2[i] - decay * w2[i];
            volatile float mi = b1 * m2[i] + ob1 * g[i];
            volatile float vi = b2 * v2[i] + ob2 * g[i] * g[i];
            m2[i] = mi;
            v2[i] = vi;
            w2[i] = wi - lr_t * mi / (sqrtf(vi) + s.epsilon);
        }
    }
    ck_assert_msg(memcmp(w, w2, sizeof w) == 0 && memcmp(m, m2, sizeof m) == 0 &&
                      memcmp(v, v2, sizeof v) == 0,
                  "adamw: other bits than before");
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
    tc = tcase_create("schedules_and_weight_decay");
    tcase_add_test(tc, schedule_constant_is_lr_exactly);
    tcase_add_test(tc, schedule_exponential);
    tcase_add_test(tc, schedule_inverse_time);
    tcase_add_test(tc, schedule_piecewise);
    tcase_add_test(tc, schedule_cosine);
    tcase_add_test(tc, schedule_cosine_warmup);
    tcase_add_test(tc, schedule_rate_of_each_update);
    tcase_add_test(tc, weight_decay_sgd);
    tcase_add_test(tc, weight_decay_momentum);
    tcase_add_test(tc, weight_decay_adam);
    tcase_add_test(tc, adamw_bits_as_before);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(optim_suite());
}
