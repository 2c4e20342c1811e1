/* Keras' own model files (tests/fixtures/keras, written by Keras 3 and tf_keras):
 * each parses to the layer graph and variables Keras reports (names, shapes,
 * trainable or not, parameter counts, MobileNetV2 included); the numerical
 * references (weights, a batch, Keras' outputs, losses, gradients and moving
 * statistics after one training forward) are matched; bad files fail naming
 * the layer and the option. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "local_opt.h"
#include "model.h"
#include "model_impl.h"
#include "ps_error.h"
#include "testutil.h"

static cJSON *read_json(const char *rel) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", ps_test_source_root(), rel);
    size_t n = 0;
    char *text = ps_test_slurp(path, &n);
    ck_assert_msg(text != NULL, "cannot read %s", path);
    cJSON *j = cJSON_Parse(text);
    free(text);
    ck_assert_msg(j != NULL, "%s: not JSON", path);
    return j;
}

static ps_model *load_keras(const char *rel, const char *loss) {
    char path[2048], err[512] = "";
    snprintf(path, sizeof path, "%s/%s", ps_test_source_root(), rel);
    ps_model_overrides ov = {.loss = loss, .from_logits = -1};
    ps_model *m = NULL;
    int rc = ps_model_load_with(path, &ov, &m, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "%s: %s", rel, err);
    return m;
}

/* The output shape of layer `name`: its last op's (or the input's). */
static ps_shape layer_shape(const ps_model *m, const char *name, bool *found) {
    *found = false;
    ps_shape s = m->input;
    for (size_t j = 0; j < m->nops; j++) {
        if (strcmp(m->ops[j].prefix, name) == 0) {
            s = m->ops[j].out;
            *found = true;
        }
    }
    return s;
}

/* The fixture's NAME_F.expected.json against the parsed model. */
static void check_expected(const char *model_rel, const char *expected_rel, const char *loss) {
    ps_model *m = load_keras(model_rel, loss);
    cJSON *ex = read_json(expected_rel);
    const cJSON *params = cJSON_GetObjectItem(ex, "params");
    size_t total = (size_t)cJSON_GetObjectItem(params, "total")->valuedouble;
    size_t trainable = (size_t)cJSON_GetObjectItem(params, "trainable")->valuedouble;
    ck_assert_msg(ps_model_num_params(m) == total, "%s: %zu params, Keras says %zu", model_rel,
                  ps_model_num_params(m), total);
    ck_assert_uint_eq(ps_model_num_trainable_params(m), trainable);
    /* the variables: Keras' names, order, shapes, trainable flags */
    const cJSON *w, *weights = cJSON_GetObjectItem(ex, "weights");
    size_t i = 0;
    cJSON_ArrayForEach(w, weights) {
        const ps_model_var *v = ps_model_var_at(m, i);
        ck_assert_msg(v != NULL, "%s: only %zu variables", model_rel, i);
        const char *name = cJSON_GetObjectItem(w, "name")->valuestring;
        ck_assert_msg(strcmp(v->name, name) == 0, "%s: variable %zu is '%s', Keras '%s'", model_rel,
                      i, v->name, name);
        size_t numel = 1;
        const cJSON *d;
        cJSON_ArrayForEach(d, cJSON_GetObjectItem(w, "shape")) numel *= (size_t)d->valuedouble;
        ck_assert_uint_eq(v->numel, numel);
        ck_assert_int_eq(v->trainable, cJSON_IsTrue(cJSON_GetObjectItem(w, "trainable")));
        i++;
    }
    ck_assert_uint_eq(i, ps_model_num_vars(m));
    /* the layers' output shapes */
    const cJSON *l;
    size_t nlayers = 0;
    cJSON_ArrayForEach(l, cJSON_GetObjectItem(ex, "layers")) {
        const char *name = cJSON_GetObjectItem(l, "name")->valuestring;
        const char *cls = cJSON_GetObjectItem(l, "class")->valuestring;
        const cJSON *os = cJSON_GetObjectItem(l, "output_shape");
        int rank = cJSON_GetArraySize(os) - 1;
        ps_shape want = {1, 1, 1};
        if (rank == 3)
            want = (ps_shape){(size_t)cJSON_GetArrayItem(os, 1)->valuedouble,
                              (size_t)cJSON_GetArrayItem(os, 2)->valuedouble,
                              (size_t)cJSON_GetArrayItem(os, 3)->valuedouble};
        else
            want.c = (size_t)cJSON_GetArrayItem(os, 1)->valuedouble;
        bool found;
        ps_shape got = layer_shape(m, name, &found);
        ck_assert_msg(found || strcmp(cls, "InputLayer") == 0, "%s: no op for layer '%s'",
                      model_rel, name);
        ck_assert_msg(got.h == want.h && got.w == want.w && got.c == want.c,
                      "%s: layer '%s' gives %zux%zux%zu, Keras %zux%zux%zu", model_rel, name, got.h,
                      got.w, got.c, want.h, want.w, want.c);
        nlayers++;
    }
    ck_assert_uint_gt(nlayers, 2);
    cJSON_Delete(ex);
    ps_model_free(m);
}

START_TEST(fixtures_parse_as_keras_says) {
    static const char *names[] = {"cnn_seq", "residual", "binary", "reshape", "mobilenetv2"};
    static const char *forms[] = {"k3", "k2"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        for (size_t f = 0; f < 2; f++) {
            char model[256], expected[256];
            if (strcmp(names[i], "mobilenetv2") == 0 && f == 0)
                snprintf(model, sizeof model, "examples/mobilenetv2.json");
            else
                snprintf(model, sizeof model, "tests/fixtures/keras/%s_%s.json", names[i],
                         forms[f]);
            snprintf(expected, sizeof expected, "tests/fixtures/keras/%s_%s.expected.json",
                     names[i], forms[f]);
            const char *loss = strcmp(names[i], "binary") == 0 ? "binary_crossentropy"
                                                               : "sparse_categorical_crossentropy";
            check_expected(model, expected, loss);
        }
    }
}
END_TEST

START_TEST(mobilenetv2_counts) {
    /* what Keras 3's summary says: 423,018 params, 408,938 trainable, 14,080 not */
    ps_model *m = load_keras("examples/mobilenetv2.json", "sparse_categorical_crossentropy");
    ck_assert_uint_eq(ps_model_num_params(m), 423018);
    ck_assert_uint_eq(ps_model_num_trainable_params(m), 408938);
    ck_assert_uint_eq(ps_model_input_dim(m), 32 * 32 * 3);
    ck_assert_uint_eq(ps_model_num_classes(m), 10);
    ck_assert_str_eq(ps_model_var_at(m, 0)->name, "Conv1/kernel");
    ck_assert_str_eq(ps_model_var_at(m, 1)->name, "bn_Conv1/gamma");
    ck_assert_str_eq(ps_model_var_at(m, 3)->name, "bn_Conv1/moving_mean");
    ck_assert(!ps_model_var_at(m, 3)->trainable);
    ck_assert_int_eq(ps_model_var_optimizer(m, 3)->kind, PS_OPT_SGD);
    ck_assert_float_eq(ps_model_var_optimizer(m, 3)->lr, 1.0f);
    ck_assert_ptr_eq(ps_model_var_optimizer(m, 1), ps_model_optimizer(m));
    /* the final softmax is folded into the loss: from_logits follows the model */
    ck_assert_uint_eq(m->nrun, m->nops - 1);
    ps_model_free(m);
    /* the wrapper in examples/ names the file relative to itself */
    char path[2048], err[512];
    snprintf(path, sizeof path, "%s/examples/mobilenetv2_train.json", ps_test_source_root());
    ck_assert_msg(ps_model_load(path, &m, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_uint_eq(ps_model_num_params(m), 423018);
    ck_assert_uint_eq(ps_model_batch_size(m), 64);
    ps_model_free(m);
}
END_TEST

/* ---- numerical references ---- */

typedef struct {
    cJSON *j;
    float *data;
} ref;

static ref ref_open(const char *name) {
    char rel[256], path[2048];
    snprintf(rel, sizeof rel, "tests/fixtures/keras/%s.ref.json", name);
    ref r = {.j = read_json(rel)};
    snprintf(path, sizeof path, "%s/tests/fixtures/keras/%s.ref.f32", ps_test_source_root(), name);
    size_t n = 0;
    r.data = (float *)ps_test_slurp(path, &n);
    ck_assert_ptr_nonnull(r.data);
    return r;
}

/* The i-th tensor of role `role` (or the one named `name` when not NULL). */
static const float *ref_tensor(const ref *r, const char *role, const char *name, size_t i,
                               size_t *count) {
    const cJSON *t;
    size_t k = 0;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(r->j, "tensors")) {
        if (strcmp(cJSON_GetObjectItem(t, "role")->valuestring, role)) continue;
        /* a Sequential model's variable paths start with the model's name */
        const char *tn = cJSON_GetObjectItem(t, "name")->valuestring;
        size_t tl = strlen(tn), nl = name ? strlen(name) : 0;
        if (name && strcmp(tn, name) &&
            !(tl > nl && tn[tl - nl - 1] == '/' && strcmp(tn + tl - nl, name) == 0))
            continue;
        if (!name && k++ != i) continue;
        *count = (size_t)cJSON_GetObjectItem(t, "count")->valuedouble;
        return r->data + (size_t)cJSON_GetObjectItem(t, "offset")->valuedouble;
    }
    return NULL;
}

static void close_to(const char *what, const float *got, const float *want, size_t n, double tol) {
    double big = 1;
    for (size_t i = 0; i < n; i++)
        if (fabs(want[i]) > big) big = fabs(want[i]);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs((double)got[i] - want[i]) <= tol * big, "%s[%zu]: %.7g, Keras %.7g",
                      what, i, got[i], want[i]);
}

static void check_reference(const char *name) {
    ref r = ref_open(name);
    char rel[256];
    snprintf(rel, sizeof rel, "tests/fixtures/keras/%s_k3.json", name);
    ps_model *m = load_keras(rel, "sparse_categorical_crossentropy");
    size_t nv = ps_model_num_vars(m), cnt;
    float *p = ps_model_params(m);
    for (size_t i = 0; i < nv; i++) {
        const ps_model_var *v = ps_model_var_at(m, i);
        const float *w = ref_tensor(&r, "weight", v->name, 0, &cnt);
        ck_assert_msg(w && cnt == v->numel, "%s: no reference weight for %s", name, v->name);
        memcpy(p + v->offset, w, cnt * sizeof(float));
    }
    const cJSON *lj = cJSON_GetObjectItem(r.j, "labels"), *l;
    size_t batch = (size_t)cJSON_GetArraySize(lj), k = 0;
    int32_t *y = calloc(batch, sizeof *y);
    cJSON_ArrayForEach(l, lj) y[k++] = (int32_t)l->valuedouble;
    const float *x = ref_tensor(&r, "input", NULL, 0, &cnt);
    ck_assert_uint_eq(cnt, batch * ps_model_input_dim(m));
    float loss, want;
    size_t correct;
    /* evaluation: batch normalization with the moving statistics */
    ck_assert_int_eq(ps_model_evaluate(m, x, y, batch, &loss, &correct), PS_OK);
    want = (float)cJSON_GetObjectItem(r.j, "loss_eval")->valuedouble;
    ck_assert_msg(fabsf(loss - want) <= 1e-4f * (1 + fabsf(want)), "%s: eval loss %.7g, Keras %.7g",
                  name, loss, want);
    /* a training step: the batch's statistics, Keras' gradients */
    float *before = malloc(ps_model_num_params(m) * sizeof *before);
    memcpy(before, p, ps_model_num_params(m) * sizeof *before);
    ck_assert_int_eq(ps_model_train_step(m, x, y, batch, &loss, &correct), PS_OK);
    want = (float)cJSON_GetObjectItem(r.j, "loss_train")->valuedouble;
    ck_assert_msg(fabsf(loss - want) <= 1e-4f * (1 + fabsf(want)),
                  "%s: train loss %.7g, Keras %.7g", name, loss, want);
    const float *g = ps_model_grads(m);
    for (size_t i = 0; i < nv; i++) {
        const ps_model_var *v = ps_model_var_at(m, i);
        if (!v->trainable) continue;
        const float *kg = ref_tensor(&r, "grad", v->name, 0, &cnt);
        ck_assert_ptr_nonnull(kg);
        close_to(v->name, g + v->offset, kg, v->numel, 1e-4);
    }
    /* the moving statistics after the documented update (SGD, rate 1) */
    ps_local_opt *o = NULL;
    ck_assert_int_eq(ps_local_opt_new(m, &o), PS_OK);
    ps_local_opt_step(o);
    size_t nstat = 0;
    for (size_t i = 0; i < nv; i++) {
        const ps_model_var *v = ps_model_var_at(m, i);
        if (v->trainable) continue;
        const float *after = ref_tensor(&r, "after_train_forward", v->name, 0, &cnt);
        ck_assert_ptr_nonnull(after);
        close_to(v->name, p + v->offset, after, v->numel, 1e-5);
        nstat++;
    }
    /* reshape has no batch normalization; the others have its moving statistics */
    if (strcmp(name, "reshape") == 0)
        ck_assert_uint_eq(nstat, 0);
    else
        ck_assert_uint_gt(nstat, 0);
    ps_local_opt_free(o);
    free(before);
    free(y);
    ps_model_free(m);
    cJSON_Delete(r.j);
    free(r.data);
}

START_TEST(references_cnn_seq) {
    check_reference("cnn_seq");
}
END_TEST

START_TEST(references_residual) {
    check_reference("residual");
}
END_TEST

START_TEST(references_reshape) {
    check_reference("reshape");
}
END_TEST

/* An EfficientNet-style block (make_apps_fixtures.py) with Keras' Normalization:
 * outputs, loss, gradients as Keras computes them, the statistics unchanged. */
START_TEST(references_effnet_block) {
    check_reference("effnet_block");
}
END_TEST

/* keras.applications.EfficientNetB0(weights=None, 32x32x3, 10 classes) with and
 * without its top: Keras' count_params() and trainable count; Normalization's
 * mean, variance and count (one value) are non-trainable. */
START_TEST(efficientnetb0_counts) {
    static const struct {
        const char *file;
        size_t total, trainable, out;
    } nets[] = {{"efficientnetb0_k3.json", 4062381, 4020358, 10},
                {"efficientnetb0_notop_k3.json", 4049571, 4007548, 1280}};
    for (size_t i = 0; i < 2; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "tests/fixtures/keras/%s", nets[i].file);
        ps_model *m = load_keras(rel, "sparse_categorical_crossentropy");
        ck_assert_uint_eq(ps_model_num_params(m), nets[i].total);
        ck_assert_uint_eq(ps_model_num_trainable_params(m), nets[i].trainable);
        ck_assert_uint_eq(ps_model_output_dim(m), nets[i].out);
        static const char *const stats[] = {"/mean", "/variance", "/count"};
        for (size_t k = 0; k < 3; k++) {
            const ps_model_var *v = ps_model_var_at(m, k);
            const char *slash = strrchr(v->name, '/');
            ck_assert_msg(strncmp(v->name, "normalization", 13) == 0 && slash &&
                              strcmp(slash, stats[k]) == 0,
                          "variable %zu: %s", k, v->name);
            ck_assert(!v->trainable);
            ck_assert_uint_eq(v->numel, k < 2 ? 3 : 1);
        }
        ps_model_free(m);
    }
}
END_TEST

/* EfficientNetB0 trains (a few AdamW steps with weight decay on one batch lower
 * its loss) and Normalization's statistics never change: their gradient slots
 * stay 0, so their SGD (rate 1) leaves them bit for bit, while BatchNorm's
 * moving statistics move. */
START_TEST(efficientnetb0_trains_statistics_fixed) {
    enum { N = 8, STEPS = 6 };
    char path[2048], *k, *spec;
    snprintf(path, sizeof path, "%s/tests/fixtures/keras/efficientnetb0_k3.json",
             ps_test_source_root());
    k = ps_test_slurp(path, NULL);
    ck_assert_ptr_nonnull(k);
    size_t len = strlen(k) + 256;
    spec = malloc(len);
    snprintf(spec, len,
             "{\"keras\": %s, \"loss\": \"sparse_categorical_crossentropy\", \"optimizer\": "
             "{\"name\": \"adamw\", \"learning_rate\": 0.001, \"weight_decay\": 0.1}}",
             k);
    free(k);
    ps_model *m = NULL;
    char err[512];
    ck_assert_msg(ps_model_from_json(spec, &m, err, sizeof err) == PS_OK, "%s", err);
    free(spec);
    ps_model_init_params(m, 5);
    float *p = ps_model_params(m), stats[7], *x = malloc(N * ps_model_input_dim(m) * sizeof *x);
    const float set[7] = {120.0f, 115.5f, 104.25f, 3600.0f, 3300.0f, 3500.0f, 1234.0f};
    const ps_model_var *mean = ps_model_var_at(m, 0), *bn_mean = ps_model_var_at(m, 6);
    ck_assert_str_eq(bn_mean->name, "stem_bn/moving_mean");
    memcpy(p + mean->offset, set, sizeof set); /* mean, variance, count: consecutive */
    float bn0 = p[bn_mean->offset];
    ps_test_fill_uniform(x, N * ps_model_input_dim(m), 22, 0, 255);
    int32_t y[N];
    for (size_t i = 0; i < N; i++)
        y[i] = (int32_t)(i % 10);
    ps_local_opt *o = NULL;
    ck_assert_int_eq(ps_local_opt_new(m, &o), PS_OK);
    float loss, first = 0, best = 1e30f;
    size_t correct;
    for (int s = 0; s < STEPS; s++) {
        /* what a CUDA device's gradient buffer may hold before the step writes it */
        for (size_t i = 0; i < 7; i++)
            ps_model_grads(m)[mean->offset + i] = 7.0f;
        ck_assert_int_eq(ps_model_train_step(m, x, y, N, &loss, &correct), PS_OK);
        ck_assert_msg(isfinite(loss), "step %d: loss %g", s, loss);
        for (size_t i = 0; i < 7; i++)
            ck_assert_msg(ps_model_grads(m)[mean->offset + i] == 0.0f,
                          "step %d: statistic %zu's gradient slot is %g", s, i,
                          ps_model_grads(m)[mean->offset + i]);
        if (s == 0) first = loss;
        if (loss < best) best = loss;
        ps_local_opt_step(o);
    }
    memcpy(stats, p + mean->offset, sizeof stats);
    ck_assert_msg(memcmp(stats, set, sizeof set) == 0, "Normalization's statistics changed");
    ck_assert_msg(p[bn_mean->offset] != bn0, "BatchNorm's moving mean did not move");
    ck_assert_msg(best < first, "loss %g -> best %g: not falling", first, best);
    ps_local_opt_free(o);
    free(x);
    ps_model_free(m);
}
END_TEST

/* ---- malformed and unsupported files ---- */

#define IN3(name)                                                                                  \
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 6, 6, 2], "             \
    "\"name\": \"" name "\"}}"
#define SEQ(layers)                                                                                \
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": [" IN3(            \
        "in") ", " layers "]}}"
#define DENSE_OUT "{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 3}}"
#define FLAT "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"flat\"}}"
#define CONV(extra)                                                                                \
    "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c1\", \"filters\": 2, "                 \
    "\"kernel_size\": 3" extra "}}"
#define WRAP(model) "{\"keras\": " model ", \"loss\": \"sparse_categorical_crossentropy\"}"

START_TEST(bad_files) {
    static const struct {
        const char *json;
        const char *msg[3]; /* all must appear */
    } cases[] = {
        {SEQ(CONV("") ", " FLAT ", " DENSE_OUT), {"carries no loss", "--loss", NULL}},
        {WRAP(SEQ("{\"class_name\": \"LSTM\", \"config\": {\"name\": \"lstm_1\"}}, " DENSE_OUT)),
         {"layer 'lstm_1' (LSTM)", "not supported", "DepthwiseConv2D"}},
        {WRAP(SEQ(CONV(", \"dilation_rate\": [2, 2]") ", " FLAT ", " DENSE_OUT)),
         {"layer 'c1' (Conv2D)", "'dilation_rate'", "only 1"}},
        {WRAP(SEQ(CONV(", \"kernel_regularizer\": {\"class_name\": \"L2\"}") ", " FLAT
                                                                             ", " DENSE_OUT)),
         {"layer 'c1' (Conv2D)", "'kernel_regularizer'", "only null"}},
        {WRAP(SEQ(CONV(", \"kernel_initializer\": {\"class_name\": \"Orthogonal\"}") ", " FLAT
                                                                                     ", " DENSE_OUT)),
         {"layer 'c1' (Conv2D)", "'kernel_initializer'", "HeNormal"}},
        {WRAP(SEQ(CONV(", \"kernel_initializer\": {\"class_name\": \"HeNormal\", \"config\": "
                       "{\"seed\": 42}}") ", " FLAT ", " DENSE_OUT)),
         {"layer 'c1' (Conv2D)", "'kernel_initializer'", "seed null"}},
        {WRAP(SEQ(CONV("") ", " FLAT ", {\"class_name\": \"Dropout\", \"config\": {\"name\": "
                  "\"drop\", \"rate\": 0.5, \"noise_shape\": [null, 5]}}, " DENSE_OUT)),
         {"layer 'drop' (Dropout)", "'noise_shape'", "whole samples"}},
        {WRAP(SEQ(CONV(", \"fancy\": 1") ", " FLAT ", " DENSE_OUT)),
         {"layer 'c1' (Conv2D)", "option 'fancy'", "filters, kernel_size"}},
        {WRAP(SEQ("{\"class_name\": \"ReLU\", \"config\": {\"name\": \"r\", \"negative_slope\": "
                  "0.1}}, " FLAT ", " DENSE_OUT)),
         {"layer 'r' (ReLU)", "'negative_slope'", NULL}},
        {WRAP(SEQ(DENSE_OUT)), {"layer 'out' (Dense)", "last axis", "Flatten"}},
        {WRAP(SEQ("{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"bn\", "
                  "\"axis\": 1}}, " FLAT ", " DENSE_OUT)),
         {"layer 'bn' (BatchNormalization)", "'axis'", NULL}},
        {WRAP(SEQ("{\"class_name\": \"Normalization\", \"config\": {\"name\": \"n\", "
                  "\"axis\": [1, 2]}}, " FLAT ", " DENSE_OUT)),
         {"layer 'n' (Normalization)", "'axis'", "only the channel axis"}},
        {WRAP(SEQ("{\"class_name\": \"Normalization\", \"config\": {\"name\": \"n\", "
                  "\"axis\": null}}, " FLAT ", " DENSE_OUT)),
         {"layer 'n' (Normalization)", "'axis'", "only the channel axis"}},
        {WRAP(SEQ("{\"class_name\": \"Normalization\", \"config\": {\"name\": \"n\", "
                  "\"invert\": true}}, " FLAT ", " DENSE_OUT)),
         {"layer 'n' (Normalization)", "'invert'", "only false"}},
        {WRAP(SEQ("{\"class_name\": \"Normalization\", \"config\": {\"name\": \"n\", "
                  "\"mean\": [0.5, 0.5], \"variance\": [1, 1]}}, " FLAT ", " DENSE_OUT)),
         {"layer 'n' (Normalization)", "'mean' given in the config", "weights file"}},
        {WRAP(SEQ("{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c1\", \"filters\": 2, "
                  "\"kernel_size\": 3, \"dtype\": \"float64\"}}, " FLAT ", " DENSE_OUT)),
         {"layer 'c1' (Conv2D)", "'dtype'", "float32, mixed_float16 or mixed_bfloat16"}},
        {WRAP("{\"class_name\": \"Functional\", \"config\": {\"name\": \"f\", \"layers\": ["
              "{\"class_name\": \"InputLayer\", \"name\": \"in\", \"config\": {\"batch_shape\": "
              "[null, 4], \"name\": \"in\"}, \"inbound_nodes\": []},"
              "{\"class_name\": \"Dense\", \"name\": \"d\", \"config\": {\"name\": \"d\", "
              "\"units\": 4}, \"inbound_nodes\": [[[\"in\", 0, 0, {}]]]},"
              "{\"class_name\": \"Dense\", \"name\": \"out\", \"config\": {\"name\": \"out\", "
              "\"units\": 3}, \"inbound_nodes\": [[[\"d\", 1, 0, {}]]]}],"
              "\"input_layers\": [[\"in\", 0, 0]], \"output_layers\": [[\"out\", 0, 0]]}}"),
         {"layer 'out' (Dense)", "shared layers", NULL}},
        {WRAP("{\"class_name\": \"Functional\", \"config\": {\"name\": \"f\", \"layers\": ["
              "{\"class_name\": \"InputLayer\", \"name\": \"in\", \"config\": {\"batch_shape\": "
              "[null, 4], \"name\": \"in\"}, \"inbound_nodes\": []},"
              "{\"class_name\": \"Dense\", \"name\": \"out\", \"config\": {\"name\": \"out\", "
              "\"units\": 3}, \"inbound_nodes\": [[[\"nowhere\", 0, 0, {}]]]}],"
              "\"input_layers\": [[\"in\", 0, 0]], \"output_layers\": [[\"out\", 0, 0]]}}"),
         {"layer 'out' (Dense)", "'nowhere'", NULL}},
        {WRAP("{\"class_name\": \"Functional\", \"config\": {\"name\": \"f\", \"layers\": ["
              "{\"class_name\": \"InputLayer\", \"name\": \"in\", \"config\": {\"batch_shape\": "
              "[null, 4], \"name\": \"in\"}, \"inbound_nodes\": []},"
              "{\"class_name\": \"Dense\", \"name\": \"a\", \"config\": {\"name\": \"a\", "
              "\"units\": 3}, \"inbound_nodes\": [[[\"in\", 0, 0, {}]]]},"
              "{\"class_name\": \"Dense\", \"name\": \"b\", \"config\": {\"name\": \"b\", "
              "\"units\": 5}, \"inbound_nodes\": [[[\"in\", 0, 0, {}]]]},"
              "{\"class_name\": \"Add\", \"name\": \"sum\", \"config\": {\"name\": \"sum\"}, "
              "\"inbound_nodes\": [[[\"a\", 0, 0, {}], [\"b\", 0, 0, {}]]]}],"
              "\"input_layers\": [[\"in\", 0, 0]], \"output_layers\": [[\"sum\", 0, 0]]}}"),
         {"layer 'sum' (Add)", "input 1 has shape 1x1x5", NULL}},
        {"{\"keras\": \"no-such-file.json\", \"loss\": \"mse\"}",
         {"relative to the spec file", NULL}},
        {"{\"keras\": " SEQ(FLAT ", " DENSE_OUT) "}", {"needs a 'loss'", NULL}},
        {WRAP("{\"class_name\": \"Model2\", \"config\": {}}"), {"'Model2' is not supported", NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512] = "";
        ps_model *m = NULL;
        int rc = ps_model_from_json(cases[i].json, &m, err, sizeof err);
        ck_assert_msg(rc != PS_OK && m == NULL, "case %zu parsed", i);
        for (int k = 0; k < 3 && cases[i].msg[k]; k++)
            ck_assert_msg(strstr(err, cases[i].msg[k]) != NULL, "case %zu: '%s' lacks '%s'", i, err,
                          cases[i].msg[k]);
    }
}
END_TEST

/* MobileNetV2 trains: a few steps on one fixed batch (the in-worker
 * optimizer, Adam) lower its training loss, and evaluation (moving statistics)
 * runs. Bounded: 12 steps of 16 images. */
START_TEST(mobilenetv2_trains) {
    enum { N = 16, STEPS = 12 };
    char path[2048], err[512];
    snprintf(path, sizeof path, "%s/examples/mobilenetv2_train.json", ps_test_source_root());
    ps_model *m = NULL;
    ck_assert_msg(ps_model_load(path, &m, err, sizeof err) == PS_OK, "%s", err);
    ps_model_init_params(m, 3);
    size_t in = ps_model_input_dim(m), correct;
    float *x = malloc(N * in * sizeof *x), first = 0, loss = 0, best = 1e30f;
    int32_t y[N];
    ps_test_fill_uniform(x, N * in, 21, 0, 1);
    for (size_t i = 0; i < N; i++)
        y[i] = (int32_t)(i % 10);
    ps_local_opt *o = NULL;
    ck_assert_int_eq(ps_local_opt_new(m, &o), PS_OK);
    for (int s = 0; s < STEPS; s++) {
        ck_assert_int_eq(ps_model_train_step(m, x, y, N, &loss, &correct), PS_OK);
        ck_assert_msg(isfinite(loss), "step %d: loss %g", s, loss);
        if (s == 0) first = loss;
        if (loss < best) best = loss;
        ps_local_opt_step(o);
    }
    ck_assert_msg(best < 0.8f * first, "loss %g -> best %g (last %g): not falling", first, best,
                  loss);
    float eval;
    ck_assert_int_eq(ps_model_evaluate(m, x, y, N, &eval, &correct), PS_OK);
    ck_assert(isfinite(eval));
    /* the moving statistics moved away from their initial 0 / 1 */
    const ps_model_var *mm = ps_model_var_at(m, 3);
    ck_assert_str_eq(mm->name, "bn_Conv1/moving_mean");
    double moved = 0;
    for (size_t i = 0; i < mm->numel; i++)
        moved += fabs(ps_model_params(m)[mm->offset + i]);
    ck_assert_msg(moved > 1e-4, "moving mean did not move (%g)", moved);
    ps_local_opt_free(o);
    free(x);
    ps_model_free(m);
}
END_TEST

START_TEST(epochs_exposed) {
    char err[256];
    ps_model *m = NULL;
    ck_assert_int_eq(ps_model_from_json(ps_model_default_spec(), &m, err, sizeof err), PS_OK);
    ck_assert_uint_eq(ps_model_epochs(m), 0);
    ps_model_free(m);
    ck_assert_int_eq(ps_model_from_json("{\"input_shape\": [4], \"layers\": [{\"type\": "
                                        "\"Dense\", \"units\": 2}], \"epochs\": 7}",
                                        &m, err, sizeof err),
                     PS_OK);
    ck_assert_uint_eq(ps_model_epochs(m), 7);
    ps_model_free(m);
    ck_assert_int_eq(ps_model_from_json(WRAP(SEQ(FLAT ", " DENSE_OUT)), &m, err, sizeof err),
                     PS_OK);
    ck_assert_uint_eq(ps_model_epochs(m), 0);
    ps_model_free(m);
}
END_TEST

int main(void) {
    Suite *s = suite_create("model_keras");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, fixtures_parse_as_keras_says);
    tcase_add_test(tc, mobilenetv2_counts);
    tcase_add_test(tc, references_cnn_seq);
    tcase_add_test(tc, references_residual);
    tcase_add_test(tc, references_reshape);
    tcase_add_test(tc, references_effnet_block);
    tcase_add_test(tc, efficientnetb0_counts);
    tcase_add_test(tc, efficientnetb0_trains_statistics_fixed);
    tcase_add_test(tc, bad_files);
    tcase_add_test(tc, epochs_exposed);
    tcase_add_test(tc, mobilenetv2_trains);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
