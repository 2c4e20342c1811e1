/* worker/export/export_onnx.c in process (so the sanitizer builds see it; numbers against ONNX
 * Runtime are tests/python/test_onnx.py): the file parses back as an ONNX ModelProto with
 * opset 13 and IR version 7, input and output shaped as docs/FORMATS.md says, every
 * variable an initializer of its name with its values (a conv kernel permuted to OIHW, a
 * depthwise kernel to [c*m, 1, kh, kw], a Dense kernel unchanged), the expected nodes; a
 * bad extension and an unwritable path fail with a reason and leave no file. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "export.h"
#include "model.h"
#include "onnx.pb-c.h"
#include "ps_error.h"
#include "testutil.h"

/* Every layer kind of the project's spec but Add / Concatenate (Keras only: below). */
static const char ALL_LAYERS[] =
    "{\"name\": \"all\", \"input_shape\": [9, 9, 2], \"layers\": ["
    "{\"type\": \"ZeroPadding2D\", \"padding\": [[1, 0], [0, 2]]},"
    "{\"type\": \"Conv2D\", \"filters\": 3, \"kernel_size\": [3, 2], \"strides\": 2,"
    " \"padding\": \"same\", \"activation\": \"gelu\"},"
    "{\"type\": \"BatchNormalization\", \"center\": false, \"scale\": false},"
    "{\"type\": \"DepthwiseConv2D\", \"kernel_size\": 3, \"depth_multiplier\": 2,"
    " \"padding\": \"same\", \"activation\": \"relu6\"},"
    "{\"type\": \"AveragePooling2D\", \"pool_size\": 2, \"padding\": \"same\"},"
    "{\"type\": \"MaxPooling2D\", \"pool_size\": 2, \"strides\": 1},"
    "{\"type\": \"Dropout\", \"rate\": 0.5},"
    "{\"type\": \"Reshape\", \"target_shape\": [2, 2, 6]},"
    "{\"type\": \"Activation\", \"activation\": \"tanh\"},"
    "{\"type\": \"Dense\", \"units\": 4, \"activation\": \"sigmoid\"},"
    "{\"type\": \"BatchNormalization\"},"
    "{\"type\": \"Flatten\"},"
    "{\"type\": \"Dense\", \"units\": 3, \"activation\": \"softmax\"}],"
    "\"loss\": \"sparse_categorical_crossentropy\", \"from_logits\": false}";

typedef struct {
    Onnx__ModelProto *mp;
    uint8_t *bytes;
} loaded;

static loaded export_and_load(ps_model *m, const char *dir) {
    char path[4096], err[512] = "";
    snprintf(path, sizeof path, "%s/m.onnx", dir);
    int rc = ps_export_model(m, path, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "export: %s", err);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    loaded l = {NULL, malloc((size_t)len)};
    ck_assert_int_eq(fread(l.bytes, 1, (size_t)len, f), len);
    fclose(f);
    l.mp = onnx__model_proto__unpack(NULL, (size_t)len, l.bytes);
    ck_assert_msg(l.mp != NULL, "the file is not a ModelProto");
    return l;
}

static void loaded_free(loaded *l) {
    onnx__model_proto__free_unpacked(l->mp, NULL);
    free(l->bytes);
}

static const Onnx__TensorProto *init_named(const Onnx__GraphProto *g, const char *name) {
    for (size_t i = 0; i < g->n_initializer; i++)
        if (strcmp(g->initializer[i]->name, name) == 0) return g->initializer[i];
    return NULL;
}

static size_t count_op(const Onnx__GraphProto *g, const char *op) {
    size_t n = 0;
    for (size_t i = 0; i < g->n_node; i++)
        n += strcmp(g->node[i]->op_type, op) == 0;
    return n;
}

static float raw_at(const Onnx__TensorProto *t, size_t i) {
    const uint8_t *p = t->raw_data.data + 4 * i;
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    float v;
    memcpy(&v, &u, 4);
    return v;
}

static const ps_model_var *var_named(const ps_model *m, const char *name) {
    for (size_t i = 0; i < ps_model_num_vars(m); i++)
        if (strcmp(ps_model_var_at(m, i)->name, name) == 0) return ps_model_var_at(m, i);
    ck_abort_msg("no variable %s", name);
    return NULL;
}

/* Every variable an initializer of its name, float32, with its element count; dims[0]
 * of the graph input / output symbolic. */
static void check_common(ps_model *m, const Onnx__ModelProto *mp, size_t in_rank) {
    ck_assert_int_eq(mp->ir_version, 7);
    ck_assert_uint_eq(mp->n_opset_import, 1);
    ck_assert_str_eq(mp->opset_import[0]->domain, "");
    ck_assert_int_eq(mp->opset_import[0]->version, 13);
    const Onnx__GraphProto *g = mp->graph;
    ck_assert_uint_eq(g->n_input, 1);
    ck_assert_uint_eq(g->n_output, 1);
    ck_assert_str_eq(g->input[0]->name, "input");
    ck_assert_str_eq(g->output[0]->name, "output");
    const Onnx__TensorShapeProto *is = g->input[0]->type->tensor_type->shape;
    ck_assert_uint_eq(is->n_dim, in_rank + 1);
    ck_assert_str_eq(is->dim[0]->dim_param, "N");
    const Onnx__TensorShapeProto *os = g->output[0]->type->tensor_type->shape;
    ck_assert_int_eq(os->dim[1]->dim_value, (int64_t)ps_model_output_dim(m));
    for (size_t i = 0; i < ps_model_num_vars(m); i++) {
        const ps_model_var *v = ps_model_var_at(m, i);
        const Onnx__TensorProto *t = init_named(g, v->name);
        ck_assert_msg(t != NULL, "no initializer %s", v->name);
        ck_assert_int_eq(t->data_type, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
        ck_assert_uint_eq(t->raw_data.len, 4 * v->numel);
    }
}

START_TEST(all_layers) {
    char *dir = ps_test_mkdtemp();
    char err[512];
    ps_model *m = NULL;
    ck_assert_msg(ps_model_from_json(ALL_LAYERS, &m, err, sizeof err) == PS_OK, "%s", err);
    ps_model_init_params(m, 7);
    float *p = ps_model_params(m);
    for (size_t i = 0; i < ps_model_num_params(m); i++) /* distinct values everywhere */
        p[i] = (float)i * 0.001f - 0.5f;
    loaded l = export_and_load(m, dir);
    const Onnx__GraphProto *g = l.mp->graph;
    check_common(m, l.mp, 3);
    const Onnx__TensorShapeProto *is = g->input[0]->type->tensor_type->shape;
    ck_assert_int_eq(is->dim[1]->dim_value, 9); /* NHWC */
    ck_assert_int_eq(is->dim[3]->dim_value, 2);

    /* conv2d_0/kernel: Keras [3, 2, 2, 3] -> OIHW [3, 2, 3, 2] */
    const ps_model_var *cv = var_named(m, "conv2d_0/kernel");
    const Onnx__TensorProto *ct = init_named(g, "conv2d_0/kernel");
    ck_assert_uint_eq(ct->n_dims, 4);
    int64_t want[4] = {3, 2, 3, 2};
    for (int d = 0; d < 4; d++)
        ck_assert_int_eq(ct->dims[d], want[d]);
    for (size_t o = 0; o < 3; o++)
        for (size_t ci = 0; ci < 2; ci++)
            for (size_t y = 0; y < 3; y++)
                for (size_t x = 0; x < 2; x++)
                    ck_assert_float_eq(raw_at(ct, ((o * 2 + ci) * 3 + y) * 2 + x),
                                       p[cv->offset + ((y * 2 + x) * 2 + ci) * 3 + o]);
    /* depthwise: Keras [3, 3, 3, 2] -> [6, 1, 3, 3], output channel ci*2 + j */
    const ps_model_var *dv = var_named(m, "depthwise_conv2d_0/depthwise_kernel");
    const Onnx__TensorProto *dt = init_named(g, "depthwise_conv2d_0/depthwise_kernel");
    ck_assert_int_eq(dt->dims[0], 6);
    ck_assert_int_eq(dt->dims[1], 1);
    for (size_t ci = 0; ci < 3; ci++)
        for (size_t j = 0; j < 2; j++)
            for (size_t y = 0; y < 3; y++)
                for (size_t x = 0; x < 3; x++)
                    ck_assert_float_eq(raw_at(dt, ((ci * 2 + j) * 3 + y) * 3 + x),
                                       p[dv->offset + ((y * 3 + x) * 3 + ci) * 2 + j]);
    /* a Dense kernel is used as it is */
    const ps_model_var *kv = var_named(m, "dense_0/kernel");
    const Onnx__TensorProto *kt = init_named(g, "dense_0/kernel");
    ck_assert_int_eq(kt->dims[0], 24);
    ck_assert_int_eq(kt->dims[1], 4);
    for (size_t i = 0; i < kv->numel; i++)
        ck_assert_float_eq(raw_at(kt, i), p[kv->offset + i]);

    ck_assert_uint_eq(count_op(g, "Conv"), 2);
    ck_assert_uint_eq(count_op(g, "BatchNormalization"), 2);
    ck_assert_uint_eq(count_op(g, "Pad"), 1);
    ck_assert_uint_eq(count_op(g, "AveragePool"), 1);
    ck_assert_uint_eq(count_op(g, "MaxPool"), 1);
    ck_assert_uint_eq(count_op(g, "Clip"), 1);
    ck_assert_uint_eq(count_op(g, "Erf"), 1);
    ck_assert_uint_eq(count_op(g, "Tanh"), 1);
    ck_assert_uint_eq(count_op(g, "Sigmoid"), 1);
    ck_assert_uint_eq(count_op(g, "Softmax"), 1); /* folded into the loss, still exported */
    ck_assert_uint_eq(count_op(g, "Gemm"), 2);
    ck_assert_uint_eq(count_op(g, "Reshape"), 1);
    ck_assert_uint_eq(count_op(g, "Dropout"), 0);
    /* in, then back to NHWC before the Reshape, to NCHW after it, NHWC before Dense */
    ck_assert_uint_eq(count_op(g, "Transpose"), 4);
    loaded_free(&l);
    ps_model_free(m);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* MobileNetV2 (Keras 3 file: Add, ZeroPadding2D, relu6, BN) and a flat MLP. */
START_TEST(examples) {
    const char *files[] = {"mobilenetv2_train.json", "mlp.json"};
    for (size_t k = 0; k < 2; k++) {
        char *dir = ps_test_mkdtemp();
        char path[4096], err[512];
        snprintf(path, sizeof path, "%s/examples/%s", ps_test_source_root(), files[k]);
        ps_model *m = NULL;
        ck_assert_msg(ps_model_load(path, &m, err, sizeof err) == PS_OK, "%s", err);
        ps_model_init_params(m, 1);
        loaded l = export_and_load(m, dir);
        check_common(m, l.mp, k == 0 ? 3 : 1);
        if (k == 0) {
            ck_assert_uint_eq(count_op(l.mp->graph, "Add"), 10);
            ck_assert_uint_eq(count_op(l.mp->graph, "Conv"), 52);
        }
        loaded_free(&l);
        ps_model_free(m);
        ps_test_rmdir(dir);
        free(dir);
    }
}
END_TEST

START_TEST(failures) {
    char *dir = ps_test_mkdtemp();
    char path[4096], err[512] = "";
    ps_model *m = NULL;
    ck_assert_int_eq(ps_model_from_json(ps_model_default_spec(), &m, err, sizeof err), PS_OK);
    snprintf(path, sizeof path, "%s/m.txt", dir);
    ck_assert_int_eq(ps_export_model(m, path, err, sizeof err), PS_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, ".onnx"));
    snprintf(path, sizeof path, "%s/no/such/dir/m.onnx", dir);
    err[0] = '\0';
    ck_assert_int_eq(ps_export_model(m, path, err, sizeof err), PS_EIO);
    ck_assert_ptr_nonnull(strstr(err, "No such file"));
    ck_assert_int_ne(access(path, F_OK), 0);
    ps_model_free(m);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("export_onnx");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, all_layers);
    tcase_add_test(tc, examples);
    tcase_add_test(tc, failures);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
