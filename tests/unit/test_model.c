/* The model spec parser (good and bad specs), seeded glorot init, a short SGD
 * run that must reduce the loss, evaluation in chunks, and the example specs. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "ps_error.h"
#include "testutil.h"

static ps_model *parse_ok(const char *json) {
    ps_model *m = NULL;
    char err[256] = "";
    int rc = ps_model_from_json(json, &m, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "spec rejected (%s): %s", ps_errname(rc), err);
    return m;
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char *buf = calloc(1, 1 << 16);
    size_t n = fread(buf, 1, (1 << 16) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

START_TEST(default_spec_layout) {
    ps_model *m = parse_ok(ps_model_default_spec());
    ck_assert_str_eq(ps_model_name(m), "mlp");
    ck_assert_uint_eq(ps_model_input_dim(m), 784);
    ck_assert_uint_eq(ps_model_num_classes(m), 10);
    ck_assert_uint_eq(ps_model_batch_size(m), 64);
    ck_assert_uint_eq(ps_model_num_params(m), 101770);
    ck_assert_uint_eq(ps_model_num_vars(m), 4);
    const struct {
        const char *name;
        int rank;
        size_t s0, s1, offset;
    } want[] = {{"dense_0/kernel", 2, 784, 128, 0},
                {"dense_0/bias", 1, 128, 0, 100352},
                {"dense_1/kernel", 2, 128, 10, 100480},
                {"dense_1/bias", 1, 10, 0, 101760}};
    for (size_t i = 0; i < 4; i++) {
        const ps_model_var *v = ps_model_var_at(m, i);
        ck_assert_str_eq(v->name, want[i].name);
        ck_assert_int_eq(v->rank, want[i].rank);
        ck_assert_uint_eq(v->shape[0], want[i].s0);
        if (v->rank == 2) ck_assert_uint_eq(v->shape[1], want[i].s1);
        ck_assert_uint_eq(v->numel, want[i].s0 * (v->rank == 2 ? want[i].s1 : 1));
        ck_assert_uint_eq(v->offset, want[i].offset);
    }
    ck_assert_ptr_null(ps_model_var_at(m, 4));
    const ps_opt_spec *o = ps_model_optimizer(m);
    ck_assert_int_eq(o->kind, PS_OPT_ADAM);
    ck_assert_float_eq_tol(o->lr, 1e-3f, 1e-9f);
    ck_assert_float_eq_tol(o->beta2, 0.999f, 1e-9f);
    ck_assert_ptr_nonnull(ps_model_params(m));
    ck_assert_ptr_nonnull(ps_model_grads(m));
    ck_assert_ptr_ne(ps_model_params(m), ps_model_grads(m));
    ps_model_free(m);

    /* examples/mlp.json is the default spec, byte for byte */
    char path[1024];
    snprintf(path, sizeof path, "%s/examples/mlp.json", ps_test_source_root());
    char *text = read_text(path);
    ck_assert_str_eq(text, ps_model_default_spec());
    free(text);
}
END_TEST

START_TEST(spec_variants) {
    ps_model *m = parse_ok("{\"input_shape\": [28, 28, 1], \"layers\": [{\"type\": \"Flatten\"},"
                           "{\"type\": \"Dense\", \"units\": 32},"
                           "{\"type\": \"Activation\", \"activation\": \"relu\"},"
                           "{\"type\": \"Dense\", \"units\": 10, \"activation\": \"softmax\"}],"
                           "\"from_logits\": false, \"optimizer\": \"rmsprop\"}");
    ck_assert_uint_eq(ps_model_input_dim(m), 784);
    ck_assert_uint_eq(ps_model_num_vars(m), 4);
    ck_assert_uint_eq(ps_model_num_params(m), 784 * 32 + 32 + 32 * 10 + 10);
    ck_assert_str_eq(ps_model_name(m), "model");
    ck_assert_int_eq(ps_model_optimizer(m)->kind, PS_OPT_RMSPROP);
    ck_assert_float_eq_tol(ps_model_optimizer(m)->rho, 0.9f, 1e-9f);
    ps_model_free(m);

    m = parse_ok("{\"input_shape\": [28, 28], \"layers\": [{\"type\": \"Dense\", \"units\": 3}],"
                 "\"optimizer\": {\"name\": \"SGD\", \"learning_rate\": 0.5, \"momentum\": 0.8,"
                 "\"nesterov\": true}, \"batch_size\": 7}");
    ck_assert_uint_eq(ps_model_input_dim(m), 784);
    const ps_opt_spec *o = ps_model_optimizer(m);
    ck_assert_int_eq(o->kind, PS_OPT_MOMENTUM); /* sgd with momentum > 0 */
    ck_assert_float_eq_tol(o->lr, 0.5f, 1e-9f);
    ck_assert_float_eq_tol(o->momentum, 0.8f, 1e-7f);
    ck_assert(o->nesterov);
    ck_assert_uint_eq(ps_model_batch_size(m), 7);
    ps_model_free(m);

    m = parse_ok("{\"input_shape\": [4], \"layers\": [{\"type\": \"Dense\", \"units\": 3}],"
                 "\"optimizer\": {\"name\": \"sgd\"}}");
    ck_assert_int_eq(ps_model_optimizer(m)->kind, PS_OPT_SGD);
    ck_assert_float_eq_tol(ps_model_optimizer(m)->lr, 0.01f, 1e-9f);
    ps_model_free(m);

    m = parse_ok("{\"input_shape\": [4], \"layers\": [{\"type\": \"Dense\", \"units\": 3}],"
                 "\"optimizer\": {\"name\": \"adagrad\", \"initial_accumulator_value\": 0.5,"
                 "\"epsilon\": 1e-6}}");
    ck_assert_int_eq(ps_model_optimizer(m)->kind, PS_OPT_ADAGRAD);
    ck_assert_float_eq_tol(ps_model_optimizer(m)->initial_accumulator, 0.5f, 1e-9f);
    ck_assert_float_eq_tol(ps_model_optimizer(m)->epsilon, 1e-6f, 1e-12f);
    ps_model_free(m);

    m = parse_ok("{\"input_shape\": [4], \"layers\": [{\"type\": \"Dense\", \"units\": 3}],"
                 "\"optimizer\": {\"name\": \"adamw\", \"weight_decay\": 0.01, \"beta_1\": 0.8}}");
    ck_assert_int_eq(ps_model_optimizer(m)->kind, PS_OPT_ADAMW);
    ck_assert_float_eq_tol(ps_model_optimizer(m)->weight_decay, 0.01f, 1e-9f);
    ck_assert_float_eq_tol(ps_model_optimizer(m)->beta1, 0.8f, 1e-7f);
    ps_model_free(m);
}
END_TEST

/* The example CNNs: shapes worked out through conv/pool (valid and same),
 * Keras variable names, glorot fans from the 4-D kernel shape. */
START_TEST(cnn_examples) {
    char path[1024], err[256];
    ps_model *m = NULL;
    snprintf(path, sizeof path, "%s/examples/fashion_cnn.json", ps_test_source_root());
    ck_assert_msg(ps_model_load(path, &m, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_uint_eq(ps_model_input_dim(m), 784);
    ck_assert_uint_eq(ps_model_num_classes(m), 10);
    /* 28 -conv3 same-> 28 -pool-> 14 -conv3 same-> 14 -pool-> 7: 7*7*64 = 3136 features */
    const struct {
        const char *name;
        size_t s0, s1;
    } want[] = {{"conv2d_0/kernel", 9, 32},    {"conv2d_0/bias", 32, 0},
                {"conv2d_1/kernel", 288, 64},  {"conv2d_1/bias", 64, 0},
                {"dense_0/kernel", 3136, 128}, {"dense_0/bias", 128, 0},
                {"dense_1/kernel", 128, 10},   {"dense_1/bias", 10, 0}};
    ck_assert_uint_eq(ps_model_num_vars(m), 8);
    size_t total = 0;
    for (size_t i = 0; i < 8; i++) {
        const ps_model_var *v = ps_model_var_at(m, i);
        ck_assert_str_eq(v->name, want[i].name);
        ck_assert_uint_eq(v->shape[0], want[i].s0);
        ck_assert_uint_eq(v->shape[1], want[i].s1);
        total += v->numel;
    }
    ck_assert_uint_eq(ps_model_num_params(m), total);
    ck_assert_uint_eq(ps_model_var_at(m, 2)->fan_in, 3 * 3 * 32);
    ck_assert_uint_eq(ps_model_var_at(m, 2)->fan_out, 3 * 3 * 64);
    ps_model_free(m);

    snprintf(path, sizeof path, "%s/examples/cifar10_cnn.json", ps_test_source_root());
    ck_assert_msg(ps_model_load(path, &m, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_uint_eq(ps_model_input_dim(m), 32 * 32 * 3);
    /* 32 -same-> 32 -valid-> 30 -pool-> 15 -same-> 15 -valid-> 13 -pool-> 6: 6*6*64 */
    ck_assert_str_eq(ps_model_var_at(m, 8)->name, "dense_0/kernel");
    ck_assert_uint_eq(ps_model_var_at(m, 8)->shape[0], 6 * 6 * 64);
    ck_assert_uint_eq(ps_model_var_at(m, 0)->shape[0], 3 * 3 * 3);
    ps_model_free(m);

    /* strides, non-square windows, same padding, no bias */
    m = parse_ok("{\"input_shape\": [9, 7, 2], \"layers\": ["
                 "{\"type\": \"Conv2D\", \"filters\": 4, \"kernel_size\": [3, 2], \"strides\": 2,"
                 " \"padding\": \"same\", \"use_bias\": false},"
                 "{\"type\": \"AveragePooling2D\", \"pool_size\": [2, 3], \"strides\": 1},"
                 "{\"type\": \"Dense\", \"units\": 3}]}");
    /* same, stride 2: 9 -> 5, 7 -> 4; pool 2x3 stride 1 valid: 5 -> 4, 4 -> 2 */
    ck_assert_uint_eq(ps_model_num_vars(m), 3);
    ck_assert_str_eq(ps_model_var_at(m, 0)->name, "conv2d_0/kernel");
    ck_assert_uint_eq(ps_model_var_at(m, 0)->shape[0], 3 * 2 * 2);
    ck_assert_str_eq(ps_model_var_at(m, 1)->name, "dense_0/kernel");
    ck_assert_uint_eq(ps_model_var_at(m, 1)->shape[0], 4 * 2 * 4);
    ps_model_free(m);
}
END_TEST

#define L1 "{\"input_shape\": [4], \"layers\": ["
#define DENSE3 "{\"type\": \"Dense\", \"units\": 3}"
#define IMG "{\"input_shape\": [8, 6, 2], \"layers\": ["

START_TEST(bad_specs) {
    const struct {
        const char *json;
        int rc;
        const char *msg; /* must appear in the error text */
    } cases[] = {
        {"{\"input_shape\": [4], \"layers\": [", PS_EFORMAT, "JSON syntax error"},
        {"[]", PS_EFORMAT, "JSON object"},
        {L1 "{\"type\": \"Conv3D\", \"filters\": 3}]}", PS_EFORMAT,
         "layer 0: unknown type 'Conv3D'"},
        {L1 DENSE3 ", {\"type\": \"Dense\", \"units\": 2, \"activation\": \"mish\"}]}", PS_EFORMAT,
         "layer 1 (Dense): unknown activation 'mish'"},
        {L1 "{\"type\": \"Conv2D\", \"filters\": 3, \"kernel_size\": 3}, " DENSE3 "]}", PS_EFORMAT,
         "layer 0 (Conv2D): needs an image input"},
        {IMG "{\"type\": \"Flatten\"}, {\"type\": \"MaxPooling2D\"}, " DENSE3 "]}", PS_EFORMAT,
         "layer 1 (MaxPooling2D): needs an image input"},
        {IMG "{\"type\": \"Conv2D\", \"kernel_size\": 3}, " DENSE3 "]}", PS_EFORMAT,
         "layer 0 (Conv2D): missing key 'filters'"},
        {IMG "{\"type\": \"Conv2D\", \"filters\": 2}, " DENSE3 "]}", PS_EFORMAT,
         "layer 0 (Conv2D): missing key 'kernel_size'"},
        {IMG "{\"type\": \"Conv2D\", \"filters\": 0, \"kernel_size\": 3}, " DENSE3 "]}", PS_EFORMAT,
         "'filters'"},
        {IMG "{\"type\": \"Conv2D\", \"filters\": 2, \"kernel_size\": [3]}, " DENSE3 "]}",
         PS_EFORMAT, "'kernel_size' must be an integer or a pair"},
        {IMG "{\"type\": \"Conv2D\", \"filters\": 2, \"kernel_size\": 9}, " DENSE3 "]}", PS_EFORMAT,
         "window 9x9 is larger than its input 8x6"},
        {IMG "{\"type\": \"Conv2D\", \"filters\": 2, \"kernel_size\": 3, \"strides\": 0}, " DENSE3
             "]}",
         PS_EFORMAT, "'strides'"},
        {IMG "{\"type\": \"Conv2D\", \"filters\": 2, \"kernel_size\": 3, \"padding\": "
             "\"full\"}, " DENSE3 "]}",
         PS_EFORMAT, "'padding' must be \"valid\" or \"same\""},
        {IMG
         "{\"type\": \"Conv2D\", \"filters\": 2, \"kernel_size\": 3, \"dilation_rate\": 2}, " DENSE3
         "]}",
         PS_EFORMAT, "layer 0 (Conv2D): unknown key 'dilation_rate'"},
        {IMG "{\"type\": \"Conv2D\", \"filters\": 2, \"kernel_size\": 3, \"use_bias\": 1}, " DENSE3
             "]}",
         PS_EFORMAT, "'use_bias' must be true or false"},
        {IMG "{\"type\": \"Dropout\", \"rate\": 1}, " DENSE3 "]}", PS_EFORMAT,
         "layer 0 (Dropout): 'rate' must be a number in [0, 1)"},
        {IMG "{\"type\": \"Dropout\"}, " DENSE3 "]}", PS_EFORMAT, "'rate'"},
        {IMG "{\"type\": \"Conv2D\", \"filters\": 2, \"kernel_size\": 3}]}", PS_EFORMAT,
         "the last layer must give a flat output"},
        {IMG DENSE3 ", {\"type\": \"Dense\", \"units\": 1}], \"loss\": \"binary_crossentropy\","
                    " \"from_logits\": false}",
         PS_EFORMAT, "from_logits=false needs a sigmoid"},
        {IMG "{\"type\": \"Dense\", \"units\": 3, \"activation\": \"softmax\"}],"
             " \"loss\": \"binary_crossentropy\", \"from_logits\": false}",
         PS_EFORMAT, "binary_crossentropy needs a sigmoid"},
        {IMG DENSE3 "], \"loss\": \"mse\", \"from_logits\": true}", PS_EFORMAT,
         "'from_logits' does not apply to the mse loss"},
        {L1 "{\"type\": \"Dense\"}]}", PS_EFORMAT, "layer 0 (Dense): missing key 'units'"},
        {L1 "{\"type\": \"Dense\", \"units\": 0}]}", PS_EFORMAT, "'units'"},
        {L1 "{\"type\": \"Dense\", \"units\": -3}]}", PS_EFORMAT, "'units'"},
        {L1 "{\"type\": \"Dense\", \"units\": 2.5}]}", PS_EFORMAT, "'units'"},
        {L1 "{\"type\": \"Dense\", \"units\": \"128\"}]}", PS_EFORMAT, "'units'"},
        {L1 DENSE3 ", {\"type\": \"Dense\", \"unit\": 3}]}", PS_EFORMAT,
         "layer 1 (Dense): unknown key 'unit'"},
        {L1 "{\"type\": \"Flatten\", \"units\": 3}, " DENSE3 "]}", PS_EFORMAT,
         "layer 0 (Flatten): unknown key 'units'"},
        {L1 "{\"type\": \"Activation\"}, " DENSE3 "]}", PS_EFORMAT,
         "layer 0 (Activation): missing key 'activation'"},
        {L1 DENSE3 ", {\"type\": \"Activation\", \"activation\": 3}]}", PS_EFORMAT,
         "'activation' must be a string"},
        {L1 "{\"units\": 3}]}", PS_EFORMAT, "layer 0: missing string key 'type'"},
        {L1 "3]}", PS_EFORMAT, "layer 0: not an object"},
        {L1 "]}", PS_EFORMAT, "'layers'"},
        {L1 "{\"type\": \"Flatten\"}]}", PS_EFORMAT, "at least one layer with weights"},
        {"{\"layers\": [" DENSE3 "]}", PS_EFORMAT, "'input_shape'"},
        {"{\"input_shape\": [4096, 4096], \"layers\": [{\"type\": \"Dense\", \"units\": 4096}]}",
         PS_EFORMAT, "parameters, more than the limit"},
        {"{\"input_shape\": [0], \"layers\": [" DENSE3 "]}", PS_EFORMAT, "'input_shape'"},
        {"{\"input_shape\": \"784\", \"layers\": [" DENSE3 "]}", PS_EFORMAT, "'input_shape'"},
        {L1 "{\"type\": \"Dense\", \"units\": 5, \"activation\": \"softmax\"}, " DENSE3
            "], \"from_logits\": false}",
         PS_EFORMAT, "softmax is only allowed as the final activation"},
        {L1 "{\"type\": \"Dense\", \"units\": 3, \"activation\": \"softmax\"}]}", PS_EFORMAT,
         "from_logits"},
        {L1 DENSE3 "], \"from_logits\": false}", PS_EFORMAT, "from_logits=false needs a softmax"},
        {L1 DENSE3 "], \"from_logits\": \"yes\"}", PS_EFORMAT, "'from_logits'"},
        {L1 DENSE3 "], \"loss\": \"hinge\"}", PS_EFORMAT, "'loss'"},
        {L1 DENSE3 "], \"batch_size\": 0}", PS_EFORMAT, "'batch_size'"},
        {L1 DENSE3 "], \"batch_size\": \"64\"}", PS_EFORMAT, "'batch_size'"},
        {L1 DENSE3 "], \"lr\": 0.1}", PS_EFORMAT, "unknown top-level key 'lr'"},
        {L1 DENSE3 "], \"metrics\": [\"auc\"]}", PS_EFORMAT, "'metrics'"},
        {L1 DENSE3 "], \"optimizer\": \"adamax\"}", PS_EFORMAT, "unknown name 'adamax'"},
        {L1 DENSE3 "], \"optimizer\": 3}", PS_EFORMAT, "'optimizer'"},
        {L1 DENSE3 "], \"optimizer\": {\"learning_rate\": 0.1}}", PS_EFORMAT, "'name'"},
        {L1 DENSE3 "], \"optimizer\": {\"name\": \"adam\", \"learning_rate\": \"fast\"}}",
         PS_EFORMAT, "'learning_rate' must be a number"},
        {L1 DENSE3 "], \"optimizer\": {\"name\": \"adam\", \"learning_rat\": 0.1}}", PS_EFORMAT,
         "unknown key 'learning_rat'"},
        {L1 DENSE3 "], \"optimizer\": {\"name\": \"sgd\", \"beta_1\": 0.9}}", PS_EFORMAT,
         "'beta_1' does not apply"},
        {L1 DENSE3 "], \"optimizer\": {\"name\": \"adam\", \"nesterov\": true}}", PS_EFORMAT,
         "'nesterov' does not apply"},
        {L1 DENSE3 "], \"optimizer\": {\"name\": \"sgd\", \"nesterov\": 1}}", PS_EFORMAT,
         "'nesterov'"},
        {L1 DENSE3 "], \"optimizer\": {\"name\": \"adam\", \"learning_rate\": -1}}", PS_EINVAL,
         "learning_rate"},
        {L1 DENSE3 "], \"optimizer\": {\"name\": \"sgd\", \"momentum\": 1.5}}", PS_EINVAL,
         "momentum"},
        {L1 DENSE3 "], \"optimizer\": {\"name\": \"adam\", \"beta_2\": 1}}", PS_EINVAL, "beta_2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ps_model *m = (ps_model *)&m; /* must be reset to NULL on failure */
        char err[256] = "";
        int rc = ps_model_from_json(cases[i].json, &m, err, sizeof err);
        ck_assert_msg(rc == cases[i].rc, "case %zu (%s): got %s, want %s; err '%s'", i,
                      cases[i].json, ps_errname(rc), ps_errname(cases[i].rc), err);
        ck_assert_ptr_null(m);
        ck_assert_msg(strstr(err, cases[i].msg) != NULL, "case %zu: message '%s' lacks '%s'", i,
                      err, cases[i].msg);
        ck_assert_msg(strchr(err, '\n') == NULL, "case %zu: message is not one line", i);
    }
    ps_model *m = NULL;
    char err[256] = "";
    ck_assert_int_eq(ps_model_load("/nonexistent/spec.json", &m, err, sizeof err), PS_EIO);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/spec.json"));
}
END_TEST

/* Keras' variance-scaling initializers: the spread each promises. */
START_TEST(init_variance_scaling) {
    ps_model *m = parse_ok(
        "{\"input_shape\": [12, 12, 8], \"layers\": ["
        "{\"type\": \"Conv2D\", \"filters\": 64, \"kernel_size\": 3,"
        " \"kernel_initializer\": \"he_normal\"},"
        "{\"type\": \"Conv2D\", \"filters\": 32, \"kernel_size\": 3,"
        " \"kernel_initializer\": {\"class_name\": \"VarianceScaling\", \"config\":"
        " {\"scale\": 0.5, \"mode\": \"fan_out\", \"distribution\": \"uniform\","
        " \"seed\": null}}},"
        "{\"type\": \"Flatten\"},"
        "{\"type\": \"Dense\", \"units\": 10, \"kernel_initializer\": \"lecun_normal\"}]}");
    ps_model_init_params(m, 5);
    const float *p = ps_model_params(m);
    /* var 0: He normal, fan_in 72, truncated at 2 sd; var 2: uniform, limit sqrt(3 * 0.5 / 288);
     * var 4: LeCun normal, fan_in 8 x 8 x 32 = 2048 */
    const struct {
        size_t var;
        double sd, bound;
    } want[] = {{0, sqrt(2.0 / 72), 2 * sqrt(2.0 / 72) / 0.87962566103423978},
                {2, sqrt(3 * 0.5 / 288) / sqrt(3.0), sqrt(3 * 0.5 / 288)},
                {4, sqrt(1.0 / 2048), 2 * sqrt(1.0 / 2048) / 0.87962566103423978}};
    for (size_t k = 0; k < 3; k++) {
        const ps_model_var *v = ps_model_var_at(m, want[k].var);
        double ss = 0;
        for (size_t j = 0; j < v->numel; j++) {
            const float x = p[v->offset + j];
            ck_assert_msg(fabs(x) <= want[k].bound * (1 + 1e-6), "%s[%zu] = %g beyond %g",
                          v->name, j, x, want[k].bound);
            ss += (double)x * x;
        }
        double sd = sqrt(ss / (double)v->numel);
        ck_assert_msg(fabs(sd - want[k].sd) < 0.05 * want[k].sd, "%s: sd %g, want %g", v->name,
                      sd, want[k].sd);
    }
    ps_model_free(m);
}
END_TEST

START_TEST(init_deterministic) {
    ps_model *a = parse_ok(ps_model_default_spec()), *b = parse_ok(ps_model_default_spec());
    size_t n = ps_model_num_params(a);
    ps_model_init_params(a, 42);
    ps_model_init_params(b, 42);
    ck_assert_int_eq(memcmp(ps_model_params(a), ps_model_params(b), n * sizeof(float)), 0);
    ps_model_init_params(b, 43);
    ck_assert_int_ne(memcmp(ps_model_params(a), ps_model_params(b), n * sizeof(float)), 0);
    /* pinned values: the generator is the same on every machine */
    const float *p = ps_model_params(a);
    ck_assert_float_eq(p[0], 0.0461736247f);
    ck_assert_float_eq(p[1], -0.0435969867f);
    ck_assert_float_eq(p[100351], -0.0755052641f);
    ck_assert_float_eq(p[100480], -0.0811701044f);
    for (size_t i = 0; i < ps_model_num_vars(a); i++) {
        const ps_model_var *v = ps_model_var_at(a, i);
        const float *q = p + v->offset;
        if (v->rank == 1) {
            for (size_t j = 0; j < v->numel; j++)
                ck_assert_float_eq(q[j], 0.0f);
            continue;
        }
        double limit = sqrt(6.0 / (double)(v->shape[0] + v->shape[1]));
        double sum = 0, mx = 0;
        for (size_t j = 0; j < v->numel; j++) {
            ck_assert_msg(fabs(q[j]) <= limit, "%s[%zu] = %g beyond %g", v->name, j, q[j], limit);
            sum += q[j];
            mx = fabs(q[j]) > mx ? fabs(q[j]) : mx;
        }
        /* uniform on [-limit, limit]: mean near 0, extremes near the limit */
        ck_assert_double_lt(fabs(sum / (double)v->numel), 0.05 * limit);
        ck_assert_double_gt(mx, 0.95 * limit);
    }
    ps_model_free(a);
    ps_model_free(b);
}
END_TEST

/* Three Gaussian blobs in 6-D, one per class. */
static void make_blobs(float *x, int32_t *y, size_t n, uint64_t seed) {
    ps_test_rng r;
    ps_test_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) {
        int c = (int)(i % 3);
        y[i] = c;
        for (int j = 0; j < 6; j++)
            x[i * 6 + j] = (j == 2 * c ? 2.0f : 0.0f) + ps_test_rng_uniform(&r, -1, 1);
    }
}

START_TEST(sgd_reduces_loss) {
    ps_model *m = parse_ok("{\"input_shape\": [6], \"layers\": ["
                           "{\"type\": \"Dense\", \"units\": 8, \"activation\": \"relu\"},"
                           "{\"type\": \"Dense\", \"units\": 3}], \"optimizer\": \"sgd\"}");
    ps_model_init_params(m, 7);
    enum { N = 2400, B = 32 };
    float *x = malloc(N * 6 * sizeof *x);
    int32_t *y = malloc(N * sizeof *y);
    make_blobs(x, y, N, 99);
    float loss0, loss1, l;
    size_t c0, c1, c;
    ck_assert_int_eq(ps_model_evaluate(m, x, y, N, &loss0, &c0), PS_OK);
    size_t n = ps_model_num_params(m);
    float *p = ps_model_params(m), *g = ps_model_grads(m);
    for (size_t step = 0; step < 300; step++) {
        size_t off = (step * B) % (N - B);
        ck_assert_int_eq(ps_model_train_step(m, x + off * 6, y + off, B, &l, &c), PS_OK);
        for (size_t i = 0; i < n; i++)
            p[i] -= 0.1f * g[i];
    }
    ck_assert_int_eq(ps_model_evaluate(m, x, y, N, &loss1, &c1), PS_OK);
    ck_assert_msg(loss1 < 0.5f * loss0, "loss %g -> %g", loss0, loss1);
    ck_assert_msg(c1 > (size_t)(0.9 * N), "accuracy %zu/%d", c1, N);
    ps_model_free(m);
    free(x);
    free(y);
}
END_TEST

START_TEST(train_and_evaluate_contract) {
    ps_model *m = parse_ok("{\"input_shape\": [6], \"layers\": ["
                           "{\"type\": \"Dense\", \"units\": 5, \"activation\": \"tanh\"},"
                           "{\"type\": \"Dense\", \"units\": 3}]}");
    ps_model_init_params(m, 3);
    enum { N = 2500 };
    float *x = malloc(N * 6 * sizeof *x);
    int32_t *y = malloc(N * sizeof *y);
    make_blobs(x, y, N, 5);
    float l, le, lt;
    size_t c, ce, ct;
    /* batch 0 and a bad label are refused */
    ck_assert_int_eq(ps_model_train_step(m, x, y, 0, &l, &c), PS_EINVAL);
    ck_assert_int_eq(ps_model_evaluate(m, x, y, 0, &l, &c), PS_EINVAL);
    y[3] = 3;
    ck_assert_int_eq(ps_model_train_step(m, x, y, 8, &l, &c), PS_EINVAL);
    ck_assert_int_eq(ps_model_evaluate(m, x, y, 8, &l, &c), PS_EINVAL);
    y[3] = -1;
    ck_assert_int_eq(ps_model_train_step(m, x, y, 8, &l, &c), PS_EINVAL);
    y[3] = 0;
    /* growing and shrinking batches; train_step's loss equals evaluate's */
    const size_t batches[] = {5, 70, 3, 1, 64};
    for (size_t i = 0; i < 5; i++) {
        ck_assert_int_eq(ps_model_train_step(m, x, y, batches[i], &lt, &ct), PS_OK);
        ck_assert_int_eq(ps_model_evaluate(m, x, y, batches[i], &le, &ce), PS_OK);
        ck_assert_float_eq_tol(lt, le, 1e-6f);
        ck_assert_uint_eq(ct, ce);
        ck_assert_uint_le(ct, batches[i]);
    }
    /* evaluate over 2500 samples (3 chunks) = weighted mean of its parts */
    float la, lb;
    size_t ca, cb;
    ck_assert_int_eq(ps_model_evaluate(m, x, y, N, &le, &ce), PS_OK);
    ck_assert_int_eq(ps_model_evaluate(m, x, y, 1700, &la, &ca), PS_OK);
    ck_assert_int_eq(ps_model_evaluate(m, x + 1700 * 6, y + 1700, 800, &lb, &cb), PS_OK);
    ck_assert_float_eq_tol(le, (la * 1700 + lb * 800) / N, 1e-5f);
    ck_assert_uint_eq(ce, ca + cb);
    /* grads are overwritten, not accumulated: two identical steps, identical grads */
    size_t n = ps_model_num_params(m);
    float *g1 = malloc(n * sizeof *g1);
    ck_assert_int_eq(ps_model_train_step(m, x, y, 16, &l, &c), PS_OK);
    memcpy(g1, ps_model_grads(m), n * sizeof *g1);
    ck_assert_int_eq(ps_model_train_step(m, x, y, 16, &l, &c), PS_OK);
    ck_assert_int_eq(memcmp(g1, ps_model_grads(m), n * sizeof *g1), 0);
    free(g1);
    free(x);
    free(y);
    ps_model_free(m);
}
END_TEST

START_TEST(examples_parse) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/examples", ps_test_source_root());
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s", dir);
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0) continue;
        char path[2048], err[256] = "";
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ps_model *m = NULL;
        int rc = ps_model_load(path, &m, err, sizeof err);
        if (rc != PS_OK && strstr(err, "a Keras model file carries no loss")) {
            /* a bare Keras file (to_json()): the loss comes from the caller */
            ps_model_overrides ov = {.loss = "sparse_categorical_crossentropy", .from_logits = -1};
            rc = ps_model_load_with(path, &ov, &m, err, sizeof err);
        }
        ck_assert_msg(rc == PS_OK, "%s: %s", e->d_name, err);
        /* a recommender's parameters may all be in its embedding tables */
        ck_assert_msg(ps_model_num_params(m) > 0 || ps_model_num_embeddings(m) > 0,
                      "%s: no parameters", e->d_name);
        found++;
        ps_model_free(m);
    }
    closedir(d);
    ck_assert_int_ge(found, 2);
}
END_TEST

int main(void) {
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, default_spec_layout);
    tcase_add_test(tc, spec_variants);
    tcase_add_test(tc, bad_specs);
    tcase_add_test(tc, cnn_examples);
    tcase_add_test(tc, init_deterministic);
    tcase_add_test(tc, init_variance_scaling);
    tcase_add_test(tc, sgd_reduces_loss);
    tcase_add_test(tc, train_and_evaluate_contract);
    tcase_add_test(tc, examples_parse);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
