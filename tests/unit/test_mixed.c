/* Mixed precision: the loss scaler's state machine (worker/model/loss_scale.c), the
 * rounding and scaling kernels, conv2d's reduced-precision GEMMs against the
 * float32 path on rounded inputs, a mixed Dense model's gradient against a
 * reference built from rounded values (and the loss scale's exactness and
 * overflow), and the dtype policy in specs and Keras files. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ew.h"
#include "kernels.h"
#include "loss_scale.h"
#include "model.h"
#include "model_impl.h"
#include "ps_error.h"
#include "testutil.h"

#define ck_assert_has(hay, needle)                                                                 \
    ck_assert_msg(strstr((hay), (needle)) != NULL, "'%s' lacks '%s'", (hay), (needle))

static char err[512];

/* ---- the scaler ------------------------------------------------------------ */

START_TEST(scaler_follows_keras_rules) {
    ps_loss_scale s;
    ps_loss_scale_init(&s);
    ck_assert_float_eq(s.scale, 32768.0f);
    for (int i = 0; i < 1999; i++)
        ck_assert(!ps_loss_scale_update(&s, true));
    ck_assert_float_eq(s.scale, 32768.0f); /* 1999 good steps: not yet */
    ck_assert(!ps_loss_scale_update(&s, true));
    ck_assert_float_eq(s.scale, 65536.0f); /* the 2000th doubles it */
    ck_assert_uint_eq(s.good_steps, 0);
    for (int i = 0; i < 1500; i++)
        ps_loss_scale_update(&s, true);
    ck_assert(ps_loss_scale_update(&s, false)); /* skipped */
    ck_assert_float_eq(s.scale, 32768.0f);      /* halved */
    ck_assert_uint_eq(s.good_steps, 0);         /* and the count restarts */
    ck_assert_uint_eq(s.skipped, 1);
    for (int i = 0; i < 1999; i++)
        ps_loss_scale_update(&s, true);
    ck_assert_float_eq(s.scale, 32768.0f);
    ps_loss_scale_update(&s, true);
    ck_assert_float_eq(s.scale, 65536.0f);
    /* bounds: never to infinity, never below the smallest normal float */
    s.scale = 0x1p127f;
    s.good_steps = 0;
    for (int i = 0; i < 2000; i++)
        ps_loss_scale_update(&s, true);
    ck_assert_float_eq(s.scale, 0x1p127f);
    s.scale = 0x1p-125f;
    ps_loss_scale_update(&s, false);
    ps_loss_scale_update(&s, false);
    ck_assert(s.scale > 0.0f && isnormal(s.scale));
    ck_assert_uint_eq(s.skipped, 3);
}
END_TEST

START_TEST(unscale_divides_and_checks) {
    ps_loss_scale s;
    ps_loss_scale_init(&s);
    float g[5] = {32768.0f, -16384.0f, 3.0f, 0.0f, 1e-30f};
    ck_assert(ps_loss_scale_unscale(&s, g, 5));
    ck_assert_float_eq(g[0], 1.0f);
    ck_assert_float_eq(g[1], -0.5f);
    ck_assert_float_eq(g[2], 3.0f / 32768.0f);
    float bad[3] = {1.0f, INFINITY, 2.0f};
    ck_assert(!ps_loss_scale_unscale(&s, bad, 3));
    float nan[3] = {1.0f, 2.0f, NAN};
    ck_assert(!ps_loss_scale_unscale(&s, nan, 3));
    ck_assert(ps_all_finite(g, 5));
    ck_assert(!ps_all_finite(bad, 3));
}
END_TEST

/* ---- kernels ------------------------------------------------------------- */

START_TEST(round_and_scale_kernels) {
    ps_k_dev *d = ps_k_cpu();
    enum { N = 4096 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    ps_test_fill_uniform(x, N, 7, -70000.0f, 70000.0f);
    x[0] = 65504.0f; /* the largest fp16 */
    x[1] = 65520.0f; /* rounds up past it: inf */
    x[2] = -1e6f;
    x[3] = 1e-9f; /* below fp16's smallest subnormal (2^-24 / 2): 0 */
    x[4] = 3e-7f; /* an fp16 subnormal */
    x[5] = NAN;
    x[6] = 1.0f + 1.0f / 4096.0f; /* between fp16 neighbours (step 2^-10): to 1 */
    for (int prec = PS_K_PREC_F16; prec <= PS_K_PREC_BF16; prec++) {
        memcpy(y, x, N * sizeof *y);
        ps_k_round(d, (ps_k_prec)prec, y, N);
        for (size_t i = 0; i < N; i++) {
            float want = prec == PS_K_PREC_F16 ? ps_ew_round_f16(x[i]) : ps_ew_round_bf16(x[i]);
            ck_assert_msg(memcmp(&want, &y[i], 4) == 0, "prec %d x=%.9g: %.9g want %.9g", prec,
                          x[i], y[i], want);
        }
    }
    memcpy(y, x, N * sizeof *y);
    ps_k_round(d, PS_K_PREC_F16, y, N);
    ck_assert_float_eq(y[0], 65504.0f);
    ck_assert(isinf(y[1]) && y[1] > 0);
    ck_assert(isinf(y[2]) && y[2] < 0);
    ck_assert_float_eq(y[3], 0.0f);
    ck_assert(y[4] > 0.0f && y[4] != x[4]);
    ck_assert(isnan(y[5]));
    ck_assert_float_eq(y[6], 1.0f);
    memcpy(y, x, N * sizeof *y);
    ps_k_round(d, PS_K_PREC_F32, y, N); /* nothing */
    ck_assert(memcmp(x + 6, y + 6, (N - 6) * sizeof *y) == 0);
    ps_k_scale(d, y + 6, 0.25f, N - 6);
    for (size_t i = 6; i < N; i++)
        ck_assert_float_eq(y[i], x[i] * 0.25f);
    free(x);
    free(y);
}
END_TEST

/* fp16 rounding by its definition: 11 significant bits, nearest even. */
static float f16_by_definition(float x) {
    float a = fabsf(x);
    if (!(a < 65520.0f)) return a != a ? x : copysignf(INFINITY, x);
    if (a < 6.103515625e-05f) return copysignf(rintf(a * 16777216.0f) * 0x1p-24f, x);
    int e;
    frexpf(a, &e);
    float step = ldexpf(1.0f, e - 11);
    return copysignf(rintf(a / step) * step, x);
}

/* ps_ew_round_f16 (bit operations) against the definition: every setting of
 * a float's upper 23 bits (all signs, exponents and the bits around the cut:
 * every tie), with the low 9 bits zero and with a hash, 2^24 floats. */
START_TEST(f16_rounding_matches_definition) {
    uint64_t bad = 0;
    uint32_t first = 0;
    for (uint64_t i = 0; i < (1u << 24); i++) {
        /* even i: the low 9 bits zero (ties included); odd: a hash of i there */
        uint32_t u = (uint32_t)((i >> 1) << 9) |
                     (i & 1 ? (uint32_t)(((i >> 1) * 0x9E3779B97F4A7C15ull) >> 55) : 0u);
        float x, got, want;
        memcpy(&x, &u, 4);
        got = ps_ew_round_f16(x);
        want = f16_by_definition(x);
        if (memcmp(&got, &want, 4) != 0 && !bad++) first = u;
    }
    ck_assert_msg(bad == 0, "%llu floats differ, the first %08x", (unsigned long long)bad, first);
}
END_TEST

static float *rounded(ps_k_prec prec, const float *x, size_t n) {
    float *r = malloc(n * sizeof *r);
    memcpy(r, x, n * sizeof *r);
    ps_k_round(ps_k_cpu(), prec, r, n);
    return r;
}

/* conv2d in prec is conv2d in float32 on inputs rounded to prec (the same
 * sgemm on the same values: bit for bit), and differs from float32 on the
 * unrounded inputs by no more than the rounding. */
START_TEST(conv_half_is_f32_on_rounded_inputs) {
    ps_k_dev *d = ps_k_cpu();
    ps_k_conv p;
    ck_assert_int_eq(ps_k_conv_plan(&p, 3, 7, 6, 4, 3, 3, 5, 1, 1, true), PS_OK);
    size_t nx = 3 * 7 * 6 * 4, nw = 3 * 3 * 4 * 5, ny = 3 * p.oh * p.ow * 5;
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc(5 * 4), *dy = malloc(ny * 4);
    ps_test_fill_uniform(x, nx, 1, -2, 2);
    ps_test_fill_uniform(w, nw, 2, -1, 1);
    ps_test_fill_uniform(b, 5, 3, -1, 1);
    ps_test_fill_uniform(dy, ny, 4, -1, 1);
    float *ws = malloc(ps_k_conv_workspace(&p) * 4);
    float *y16 = malloc(ny * 4), *yref = malloc(ny * 4), *y32 = malloc(ny * 4);
    float *dx16 = malloc(nx * 4), *dxref = malloc(nx * 4), *dw16 = malloc(nw * 4),
          *dwref = malloc(nw * 4), *db16 = malloc(5 * 4), *dbref = malloc(5 * 4);
    for (int prec = PS_K_PREC_F16; prec <= PS_K_PREC_BF16; prec++) {
        float *rx = rounded((ps_k_prec)prec, x, nx), *rw = rounded((ps_k_prec)prec, w, nw);
        float *rdy = rounded((ps_k_prec)prec, dy, ny);
        ps_k_conv ph = p, pf = p;
        ph.prec = (ps_k_prec)prec;
        ps_k_conv2d_forward_overwrite(d, &ph, y16, x, w, b, ws);
        ck_assert_int_eq(ps_k_sync(d), PS_OK);
        ps_k_conv2d_forward_overwrite(d, &pf, yref, rx, rw, b, ws);
        ps_k_conv2d_forward_overwrite(d, &pf, y32, x, w, b, ws);
        ck_assert_msg(memcmp(y16, yref, ny * 4) == 0, "prec %d: forward differs", prec);
        ck_assert_msg(memcmp(y16, y32, ny * 4) != 0, "prec %d: no rounding at all?", prec);
        /* each product's inputs moved by <= 2^-11 (fp16) or 2^-8 (bf16) relative */
        float tol = prec == PS_K_PREC_F16 ? 0.02f : 0.2f;
        ck_assert_int_eq(ps_test_first_mismatch(y16, y32, ny, tol, 0.0f), -1);
        ps_k_conv2d_backward_overwrite(d, &ph, dx16, dw16, db16, dy, x, w, ws);
        ck_assert_int_eq(ps_k_sync(d), PS_OK);
        ps_k_conv2d_backward_overwrite(d, &pf, dxref, dwref, dbref, rdy, rx, rw, ws);
        ck_assert_msg(memcmp(dx16, dxref, nx * 4) == 0, "prec %d: dx differs", prec);
        ck_assert_msg(memcmp(dw16, dwref, nw * 4) == 0, "prec %d: dw differs", prec);
        free(rx);
        free(rw);
        free(rdy);
    }
    free(x), free(w), free(b), free(dy), free(ws), free(y16), free(yref), free(y32);
    free(dx16), free(dxref), free(dw16), free(dwref), free(db16), free(dbref);
}
END_TEST

/* ---- the model ---------------------------------------------------------- */

static const char dense_spec[] =
    "{\"input_shape\": [6], \"layers\": [{\"type\": \"Dense\", \"units\": 3}],"
    " \"loss\": \"sparse_categorical_crossentropy\", \"from_logits\": true,"
    " \"dtype_policy\": \"mixed_float16\"}";

/* One mixed_float16 Dense layer: logits = fp16(round(x) @ round(w) + b); the
 * loss gradient reaching the layer is fp16 too; dw = round(x)^T @ it. */
START_TEST(dense_gradient_matches_rounded_reference) {
    ps_model *m = NULL;
    ck_assert_int_eq(ps_model_from_json(dense_spec, &m, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_model_dtype_policy(m), PS_POLICY_MIXED_FLOAT16);
    ps_model_init_params(m, 5);
    enum { B = 4, I = 6, O = 3 };
    float x[B * I];
    ps_test_fill_uniform(x, B * I, 9, -3, 3);
    int32_t y[B] = {0, 2, 1, 2};
    float loss;
    size_t correct;
    ck_assert_int_eq(ps_model_train_step(m, x, y, B, &loss, &correct), PS_OK);
    const float *w = ps_model_params(m), *bias = w + I * O;
    float g[I * O + O];
    memcpy(g, ps_model_grads(m), sizeof g);
    /* the reference, in double from rounded values */
    float dl[B * O];
    for (int r = 0; r < B; r++) {
        float logit[O];
        double mx = -1e30, sum = 0;
        for (int o = 0; o < O; o++) {
            double s = 0;
            for (int i = 0; i < I; i++)
                s += (double)ps_ew_round_f16(x[r * I + i]) * ps_ew_round_f16(w[i * O + o]);
            logit[o] = ps_ew_round_f16((float)s + bias[o]);
            mx = logit[o] > mx ? logit[o] : mx;
        }
        for (int o = 0; o < O; o++)
            sum += exp(logit[o] - mx);
        for (int o = 0; o < O; o++)
            dl[r * O + o] =
                ps_ew_round_f16((float)((exp(logit[o] - mx) / sum - (o == y[r])) / B));
    }
    for (int i = 0; i < I; i++) {
        for (int o = 0; o < O; o++) {
            double s = 0;
            for (int r = 0; r < B; r++)
                s += (double)ps_ew_round_f16(x[r * I + i]) * dl[r * O + o];
            ck_assert_msg(fabs(g[i * O + o] - s) <= 1e-5 + 1e-3 * fabs(s),
                          "dw[%d,%d] = %.9g, reference %.9g", i, o, g[i * O + o], s);
        }
    }
    for (int o = 0; o < O; o++) {
        double s = 0;
        for (int r = 0; r < B; r++)
            s += dl[r * O + o];
        ck_assert_msg(fabs(g[I * O + o] - s) <= 1e-6 + 1e-4 * fabs(s), "db[%d]", o);
    }
    /* loss scaling by a power of two: exactly the scaled gradient */
    ps_model_set_loss_scale(m, 1024.0f);
    ck_assert_int_eq(ps_model_train_step(m, x, y, B, &loss, &correct), PS_OK);
    for (size_t k = 0; k < I * O + O; k++)
        ck_assert_msg(ps_model_grads(m)[k] == g[k] * 1024.0f, "scaled gradient %zu", k);
    /* too large a scale: the fp16 gradient overflows, as Keras' would */
    ps_model_set_loss_scale(m, 0x1p24f);
    ck_assert_int_eq(ps_model_train_step(m, x, y, B, &loss, &correct), PS_OK);
    ck_assert(!ps_all_finite(ps_model_grads(m), I * O + O));
    /* float32: the same model, no rounding at all */
    ps_model_set_loss_scale(m, 0.0f);
    ps_model_set_dtype_policy(m, PS_POLICY_FLOAT32);
    ck_assert_int_eq(ps_model_train_step(m, x, y, B, &loss, &correct), PS_OK);
    ck_assert(memcmp(ps_model_grads(m), g, sizeof g) != 0);
    ps_model_free(m);
}
END_TEST

START_TEST(spec_policy_parses_and_refuses) {
    ps_model *m = NULL;
    ck_assert_int_eq(ps_model_from_json(ps_model_default_spec(), &m, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_model_dtype_policy(m), PS_POLICY_FLOAT32);
    for (size_t j = 0; j < m->nops; j++)
        ck_assert_int_eq(m->ops[j].prec, PS_K_PREC_F32);
    ps_model_free(m);
    char spec[512];
    snprintf(spec, sizeof spec, "%.*s, \"dtype_policy\": \"mixed_bfloat16\"}",
             (int)(strrchr(dense_spec, ',') - dense_spec), dense_spec);
    ck_assert_int_eq(ps_model_from_json(spec, &m, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_model_dtype_policy(m), PS_POLICY_MIXED_BFLOAT16);
    ck_assert_int_eq(m->ops[0].prec, PS_K_PREC_BF16);
    ps_model_free(m);
    snprintf(spec, sizeof spec, "%.*s, \"dtype_policy\": \"float16\"}",
             (int)(strrchr(dense_spec, ',') - dense_spec), dense_spec);
    ck_assert_int_eq(ps_model_from_json(spec, &m, err, sizeof err), PS_EFORMAT);
    ck_assert_has(err, "'dtype_policy': dtype policy 'float16' is not supported");
    ps_dtype_policy p;
    ck_assert_int_eq(ps_dtype_policy_parse("mixed_float16", &p, NULL, 0), PS_OK);
    ck_assert_int_eq(p, PS_POLICY_MIXED_FLOAT16);
    ck_assert_str_eq(ps_dtype_policy_name(PS_POLICY_MIXED_BFLOAT16), "mixed_bfloat16");
}
END_TEST

static ps_model *load_fixture(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/keras/%s", ps_test_source_root(), name);
    ps_model_overrides ov = {.loss = "sparse_categorical_crossentropy", .from_logits = -1};
    ps_model *m = NULL;
    int rc = ps_model_load_with(path, &ov, &m, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "%s: %s", name, err);
    return m;
}

/* Written by Keras 3 and tf_keras under set_global_policy("mixed_float16"),
 * with a float32 softmax last (make_mixed_fixtures.py): the model is
 * mixed_float16, every op of its mixed layers computes in fp16, the softmax
 * (folded into the loss) in float32. */
START_TEST(keras_mixed_fixtures_parse) {
    const char *names[] = {"mixed_k3.json", "mixed_k2.json"};
    for (int i = 0; i < 2; i++) {
        ps_model *m = load_fixture(names[i]);
        ck_assert_int_eq(ps_model_dtype_policy(m), PS_POLICY_MIXED_FLOAT16);
        ck_assert_uint_eq(ps_model_num_params(m), 43706);
        ck_assert_uint_eq(m->nrun, m->nops - 1); /* the float32 softmax goes into the loss */
        for (size_t j = 0; j < m->nops; j++) {
            ps_k_prec want = j + 1 == m->nops ? PS_K_PREC_F32 : PS_K_PREC_F16;
            ck_assert_msg(m->ops[j].prec == want, "%s op %zu (%s): prec %d", names[i], j,
                          m->ops[j].prefix, (int)m->ops[j].prec);
        }
        ps_model_free(m);
    }
}
END_TEST

#define K3_POLICY(n) "{\"module\": \"keras\", \"class_name\": \"DTypePolicy\", \"config\": {\"name\": \"" n "\"}, \"registered_name\": null}"
#define K3_MODEL(d1, d2)                                                                           \
    "{\"keras\": {\"class_name\": \"Sequential\", \"config\": {\"name\": \"m\", \"layers\": ["   \
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4], \"name\": \"in\"}}," \
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"a\", \"units\": 3, \"dtype\": " d1 "}}," \
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"b\", \"units\": 2, \"dtype\": " d2 "}}"  \
    "]}}, \"loss\": \"sparse_categorical_crossentropy\", \"from_logits\": true"

START_TEST(keras_policies_mixed_and_refused) {
    ps_model *m = NULL;
    /* Keras 2's Policy form, a float32 last layer */
    ck_assert_int_eq(
        ps_model_from_json(K3_MODEL("{\"class_name\": \"Policy\", \"config\": {\"name\": "
                                    "\"mixed_bfloat16\"}}",
                                    "\"float32\"") "}",
                           &m, err, sizeof err),
        PS_OK);
    ck_assert_int_eq(ps_model_dtype_policy(m), PS_POLICY_MIXED_BFLOAT16);
    ck_assert_int_eq(m->ops[0].prec, PS_K_PREC_BF16);
    ck_assert_int_eq(m->ops[1].prec, PS_K_PREC_F32);
    ps_model_free(m);
    /* the wrapper's dtype_policy sets every layer's */
    ck_assert_int_eq(ps_model_from_json(K3_MODEL(K3_POLICY("mixed_float16"), "null")
                                        ", \"dtype_policy\": \"float32\"}",
                                        &m, err, sizeof err),
                     PS_OK);
    ck_assert_int_eq(ps_model_dtype_policy(m), PS_POLICY_FLOAT32);
    ck_assert_int_eq(m->ops[0].prec, PS_K_PREC_F32);
    ps_model_free(m);
    /* two mixed policies in one model */
    ck_assert_int_eq(ps_model_from_json(K3_MODEL(K3_POLICY("mixed_float16"),
                                                 K3_POLICY("mixed_bfloat16")) "}",
                                        &m, err, sizeof err),
                     PS_EFORMAT);
    ck_assert_has(err, "layer 'b' (Dense): dtype policy mixed_bfloat16, but an earlier layer's "
                       "is mixed_float16");
    /* another dtype */
    ck_assert_int_eq(ps_model_from_json(K3_MODEL("\"float64\"", "null") "}", &m, err, sizeof err),
                     PS_EFORMAT);
    ck_assert_has(err, "layer 'a' (Dense): option 'dtype' = \"float64\" is not supported");
}
END_TEST

int main(void) {
    Suite *s = suite_create("mixed");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, scaler_follows_keras_rules);
    tcase_add_test(tc, unscale_divides_and_checks);
    tcase_add_test(tc, f16_rounding_matches_definition);
    tcase_add_test(tc, round_and_scale_kernels);
    tcase_add_test(tc, conv_half_is_f32_on_rounded_inputs);
    tcase_add_test(tc, dense_gradient_matches_rounded_reference);
    tcase_add_test(tc, spec_policy_parses_and_refuses);
    tcase_add_test(tc, keras_mixed_fixtures_parse);
    tcase_add_test(tc, keras_policies_mixed_and_refused);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
