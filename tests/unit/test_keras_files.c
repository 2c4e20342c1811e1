/* Keras 3's .keras archives and .weights.h5 files (tests/fixtures/keras/NAME.keras,
 * written by Keras 3.15 with make_keras_files.py): each loads into the model its
 * config.json describes and gives Keras' predictions on Keras' inputs; the
 * weights files the same; a wrong shape, a missing or an extra weight, a
 * truncated or damaged file, a zip bomb and member names escaping the archive
 * fail with PS_EFORMAT naming the file and the weight or member. */
#include <check.h>
#include <cjson/cJSON.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "export.h"
#include "keras_file.h"
#include "model.h"
#include "ps_error.h"
#include "testutil.h"

static void fixture(char *path, size_t n, const char *file) {
    snprintf(path, n, "%s/tests/fixtures/keras/%s", ps_test_source_root(), file);
}

static ps_model *load_archive(const char *name, const char *loss) {
    char path[2048], err[1024] = "";
    fixture(path, sizeof path, name);
    ps_model_overrides ov = {.loss = loss, .from_logits = -1};
    ps_model *m = NULL;
    ck_assert_msg(ps_keras_load_model(path, &ov, &m, err, sizeof err) == PS_OK, "%s", err);
    ps_model_init_params(m, 1);
    return m;
}

/* Keras' inputs and predictions (NAME.io.json, NAME.io.f32) against the model's. */
static void check_predictions(ps_model *m, const char *name, double tol) {
    char path[2048];
    fixture(path, sizeof path, name);
    strcat(path, ".io.json");
    char *text = ps_test_slurp(path, NULL);
    ck_assert_ptr_nonnull(text);
    cJSON *j = cJSON_Parse(text);
    free(text);
    size_t n = (size_t)cJSON_GetObjectItem(j, "samples")->valuedouble;
    size_t out = (size_t)cJSON_GetObjectItem(j, "outputs")->valuedouble;
    ck_assert_uint_eq(ps_model_num_params(m),
                      (size_t)cJSON_GetObjectItem(j, "params")->valuedouble);
    cJSON_Delete(j);
    fixture(path, sizeof path, name);
    strcat(path, ".io.f32");
    size_t bytes = 0;
    float *io = (float *)ps_test_slurp(path, &bytes);
    size_t in = ps_model_input_dim(m);
    ck_assert_uint_eq(bytes, n * (in + out) * sizeof(float));
    ck_assert_uint_eq(ps_model_output_dim(m), out);
    float *got = calloc(n * out, sizeof *got), loss;
    int32_t *y = calloc(n, sizeof *y);
    size_t correct;
    ck_assert_int_eq(ps_model_evaluate_out(m, io, y, n, &loss, &correct, got), PS_OK);
    const float *want = io + n * in;
    for (size_t i = 0; i < n * out; i++)
        ck_assert_msg(fabs((double)got[i] - want[i]) <= tol, "%s: output %zu: %.8g, Keras %.8g",
                      name, i, got[i], want[i]);
    free(got);
    free(y);
    free(io);
}

static void check_fixture(const char *name, const char *loss, double tol) {
    char file[256], path[2048], err[1024] = "";
    snprintf(file, sizeof file, "%s.keras", name);
    ps_model *m = load_archive(file, loss);
    fixture(path, sizeof path, file);
    ck_assert_msg(ps_keras_load_weights(m, path, err, sizeof err) == PS_OK, "%s", err);
    check_predictions(m, name, tol);
    /* the bare weights file: the same values */
    ps_model_init_params(m, 2);
    snprintf(file, sizeof file, "%s.weights.h5", name);
    fixture(path, sizeof path, file);
    ck_assert_msg(ps_keras_load_weights(m, path, err, sizeof err) == PS_OK, "%s", err);
    check_predictions(m, name, tol);
    ps_model_free(m);
}

/* The MLP: one GEMM per layer, the same sums in the same order as XLA's on the
 * CPU within float rounding: 1e-5. */
START_TEST(mlp_predictions) {
    check_fixture("mlp", NULL, 1e-5);
}
END_TEST

/* The CNNs sum convolutions in another order than XLA (im2col + GEMM here) and
 * normalise with rsqrt: 1e-5 still holds on these small outputs (softmax
 * probabilities); kept at 1e-5. */
START_TEST(cnn_predictions) {
    check_fixture("cnn", NULL, 1e-5);
}
END_TEST

/* A functional base used as a layer of a Sequential with a new head: the
 * weights file nests the base's layers under its name. */
START_TEST(nested_predictions) {
    check_fixture("nested", NULL, 1e-5);
}
END_TEST

START_TEST(residual_predictions) {
    /* saved uncompiled: the loss comes from the caller (--loss) */
    char path[2048], err[1024] = "";
    fixture(path, sizeof path, "residual.keras");
    ps_model *m = NULL;
    ck_assert_int_eq(ps_keras_load_model(path, NULL, &m, err, sizeof err), PS_EFORMAT);
    ck_assert_msg(strstr(err, "residual.keras: config.json has no compile_config loss") &&
                      strstr(err, "--loss"),
                  "%s", err);
    check_fixture("residual", "sparse_categorical_crossentropy", 1e-5);
}
END_TEST

START_TEST(compile_config) {
    /* mlp.keras was compiled with Adam(1e-3) and SparseCategoricalCrossentropy(from_logits=True) */
    ps_model *m = load_archive("mlp.keras", NULL);
    ck_assert_int_eq(ps_model_optimizer(m)->kind, PS_OPT_ADAM);
    ck_assert_float_eq_tol(ps_model_optimizer(m)->lr, 1e-3f, 1e-9f);
    ck_assert_str_eq(ps_model_name(m), "mlp");
    ps_model_free(m);
    /* with its own loss, --loss is refused */
    char path[2048], err[1024] = "";
    fixture(path, sizeof path, "mlp.keras");
    ps_model_overrides ov = {.loss = "mse", .from_logits = -1};
    ck_assert_int_eq(ps_keras_load_model(path, &ov, &m, err, sizeof err), PS_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "--loss does not apply"));
    /* a weights file has no architecture */
    fixture(path, sizeof path, "mlp.weights.h5");
    ck_assert_int_eq(ps_model_open(path, NULL, &m, err, sizeof err), PS_EINVAL);
}
END_TEST

/* ---- models that do not match the file ---- */

#define K3_SEQ(layers)                                                                             \
    "{\"keras\": {\"class_name\": \"Sequential\", \"config\": {\"name\": \"mlp\", \"layers\": ["   \
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 784], "                 \
    "\"name\": \"pixels\"}}, " layers "]}}, \"loss\": \"sparse_categorical_crossentropy\"}"
#define K3_DENSE(name, units)                                                                      \
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"" name "\", \"units\": " #units "}}"

static void expect_mismatch(const char *spec, const char *file, const char *want) {
    char path[2048], err[1024] = "";
    ps_model *m = NULL;
    ck_assert_msg(ps_model_from_json(spec, &m, err, sizeof err) == PS_OK, "%s", err);
    fixture(path, sizeof path, file);
    ck_assert_int_eq(ps_keras_load_weights(m, path, err, sizeof err), PS_EFORMAT);
    ck_assert_msg(strstr(err, want), "got '%s', want '%s'", err, want);
    ck_assert_ptr_null(strchr(err, '\n'));
    ps_model_free(m);
}

START_TEST(wrong_shape) {
    expect_mismatch(K3_SEQ(K3_DENSE("hidden", 128) ", " K3_DENSE("logits", 10)), "mlp.weights.h5",
                    "mlp.weights.h5: layers/dense/vars/0: shape [784, 64], the model's "
                    "hidden/kernel is [784, 128]");
    expect_mismatch(K3_SEQ(K3_DENSE("hidden", 64) ", " K3_DENSE("logits", 9)), "mlp.keras",
                    "mlp.keras: layers/dense_1/vars/0: shape [64, 10], the model's "
                    "logits/kernel is [64, 9]");
}
END_TEST

START_TEST(missing_weight) {
    expect_mismatch(
        K3_SEQ(K3_DENSE("hidden", 64) ", " K3_DENSE("logits", 10) ", " K3_DENSE("more", 10)),
        "mlp.keras", "mlp.keras: missing weight: the model's more/kernel");
}
END_TEST

START_TEST(extra_weight) {
    expect_mismatch(K3_SEQ(K3_DENSE("hidden", 64) ", " K3_DENSE("out", 10)), "mlp.keras",
                    "mlp.keras: layers/dense_1/vars/0: a weight of layer 'logits', which the "
                    "model does not have");
    /* a Dense without its bias: vars/1 is one weight too many */
    expect_mismatch(
        K3_SEQ(
            K3_DENSE("hidden", 64) ", "
                                   "{\"class_name\": \"Dense\", \"config\": {\"name\": \"logits\", "
                                   "\"units\": 10, \"use_bias\": false}}"),
        "mlp.weights.h5",
        "mlp.weights.h5: layers/dense_1/vars/1: an extra weight: the model's layer "
        "'logits' has 1");
}
END_TEST

static char *tmpdir;

static void setup(void) {
    tmpdir = ps_test_mkdtemp();
}

static void teardown(void) {
    ps_test_rmdir(tmpdir);
    free(tmpdir);
}

/* ---- written by --export ---- */

/* m's outputs on n random inputs (malloc'd). */
static float *outputs_of(ps_model *m, size_t n) {
    size_t in = ps_model_input_dim(m), out = ps_model_output_dim(m);
    float *x = malloc(n * in * sizeof *x), *y = calloc(n * out, sizeof *y), loss;
    int32_t *lab = calloc(n, sizeof *lab);
    size_t correct;
    ps_test_fill_uniform(x, n * in, 7, 0, 1);
    ck_assert_int_eq(ps_model_evaluate_out(m, x, lab, n, &loss, &correct, y), PS_OK);
    free(x);
    free(lab);
    return y;
}

/* m exported as .keras and .weights.h5, read back: the same outputs, the same
 * variables, the loss and optimizer from compile_config. */
static void round_trip(ps_model *m, const char *what, const char *source) {
    char kpath[4096], wpath[4096], err[1024] = "";
    snprintf(kpath, sizeof kpath, "%s/%s.keras", tmpdir, what);
    snprintf(wpath, sizeof wpath, "%s/%s.weights.h5", tmpdir, what);
    ck_assert_msg(ps_export_model_from(m, source, kpath, err, sizeof err) == PS_OK, "%s: %s", what,
                  err);
    ck_assert_msg(ps_export_model_from(m, source, wpath, err, sizeof err) == PS_OK, "%s: %s", what,
                  err);
    if (source) {
        /* the source archive's own config.json, as Keras wrote it */
        cJSON *a = NULL, *b = NULL;
        char *ta = NULL, *tb = NULL;
        ck_assert_int_eq(ps__keras_read_config(source, &a, &ta, err, sizeof err), PS_OK);
        ck_assert_int_eq(ps__keras_read_config(kpath, &b, &tb, err, sizeof err), PS_OK);
        /* compiled: the text itself (Keras' 0.0 stays 0.0) */
        if (cJSON_GetObjectItem(cJSON_GetObjectItem(a, "compile_config"), "loss"))
            ck_assert_str_eq(ta, tb);
        free(ta);
        free(tb);
        ck_assert_msg(
            cJSON_Compare(cJSON_GetObjectItem(a, "config"), cJSON_GetObjectItem(b, "config"), true),
            "%s: config.json's config differs from %s's", what, source);
        ck_assert_ptr_nonnull(cJSON_GetObjectItem(b, "compile_config"));
        cJSON_Delete(a);
        cJSON_Delete(b);
    }
    size_t n = 5, w = ps_model_output_dim(m);
    float *want = outputs_of(m, n);
    ps_model *b = NULL;
    ck_assert_msg(ps_keras_load_model(kpath, NULL, &b, err, sizeof err) == PS_OK, "%s: %s", what,
                  err);
    ck_assert_uint_eq(ps_model_num_vars(b), ps_model_num_vars(m));
    ck_assert_uint_eq(ps_model_num_params(b), ps_model_num_params(m));
    ck_assert_int_eq(ps_model_optimizer(b)->kind, ps_model_optimizer(m)->kind);
    ck_assert_float_eq(ps_model_optimizer(b)->lr, ps_model_optimizer(m)->lr);
    const char *files[] = {kpath, wpath};
    for (size_t f = 0; f < 2; f++) {
        ps_model_init_params(b, 99);
        ck_assert_msg(ps_keras_load_weights(b, files[f], err, sizeof err) == PS_OK, "%s: %s", what,
                      err);
        ck_assert_int_eq(
            memcmp(ps_model_params(b), ps_model_params(m), ps_model_num_params(m) * sizeof(float)),
            0);
        float *got = outputs_of(b, n);
        for (size_t i = 0; i < n * w; i++)
            ck_assert_msg(got[i] == want[i], "%s: %s: output %zu: %g, before %g", what, files[f], i,
                          got[i], want[i]);
        free(got);
    }
    free(want);
    ps_model_free(b);
}

START_TEST(export_keras_fixtures) {
    static const char *const names[] = {"mlp", "cnn", "residual"};
    for (size_t i = 0; i < 3; i++) {
        char file[64], path[2048], err[1024] = "";
        snprintf(file, sizeof file, "%s.keras", names[i]);
        ps_model *m = load_archive(file, i == 2 ? "sparse_categorical_crossentropy" : NULL);
        fixture(path, sizeof path, file);
        ck_assert_msg(ps_keras_load_weights(m, path, err, sizeof err) == PS_OK, "%s", err);
        round_trip(m, names[i], NULL);
        round_trip(m, names[i], path);
        ps_model_free(m);
    }
}
END_TEST

/* The project's own specs: layers named dense_0, conv2d_1...; a Dense on an image. */
START_TEST(export_keras_specs) {
    static const char *const specs[] = {
        "mlp.json",          "fashion_cnn.json",       "residual_cnn.json",
        "mlp_momentum.json", "binary_classifier.json", "mobilenetv2_train.json"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        char path[2048], err[1024] = "";
        snprintf(path, sizeof path, "%s/examples/%s", ps_test_source_root(), specs[i]);
        ps_model *m = NULL;
        ck_assert_msg(ps_model_load(path, &m, err, sizeof err) == PS_OK, "%s", err);
        ps_model_init_params(m, 3);
        round_trip(m, specs[i], NULL);
        ps_model_free(m);
    }
    const char *img_dense =
        "{\"input_shape\": [6, 6, 2], \"layers\": [{\"type\": \"Conv2D\", "
        "\"filters\": 3, \"kernel_size\": 3}, {\"type\": \"Dense\", "
        "\"units\": 4, \"activation\": \"softmax\"}], "
        "\"loss\": \"sparse_categorical_crossentropy\", \"from_logits\": false}";
    ps_model *m = NULL;
    char err[1024] = "";
    ck_assert_msg(ps_model_from_json(img_dense, &m, err, sizeof err) == PS_OK, "%s", err);
    ps_model_init_params(m, 4);
    round_trip(m, "image_dense", NULL);
    ps_model_free(m);
}
END_TEST

/* Normalization's count (an int64 scalar in Keras' files, one float in the
 * model): written as a scalar int64, read back exactly, and read from an int32
 * one (Keras' JAX backend writes int32). */
static void expect_int_scalar(const char *file, const char *dset, hid_t want) {
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert_msg(f >= 0, "%s: cannot open", file);
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT), t = H5Dget_type(d), sp = H5Dget_space(d);
    ck_assert_msg(d >= 0 && H5Tequal(t, want) > 0, "%s: %s is not the integer type", file, dset);
    ck_assert_int_eq(H5Sget_simple_extent_type(sp), H5S_SCALAR);
    H5Sclose(sp), H5Tclose(t), H5Dclose(d), H5Fclose(f);
}

/* Rewrites dataset dset of file as a scalar int32 holding v. */
static void set_int32(const char *file, const char *dset, int32_t v) {
    hid_t f = H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT);
    ck_assert_int_ge(f, 0);
    ck_assert_int_ge(H5Ldelete(f, dset, H5P_DEFAULT), 0);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t d = H5Dcreate2(f, dset, H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert_int_ge(H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v), 0);
    H5Dclose(d), H5Sclose(sp), H5Fclose(f);
}

START_TEST(export_keras_normalization) {
    char path[2048], err[1024] = "";
    fixture(path, sizeof path, "effnet_block_k3.json");
    ps_model_overrides ov = {.loss = "sparse_categorical_crossentropy", .from_logits = -1};
    ps_model *m = NULL;
    ck_assert_msg(ps_model_load_with(path, &ov, &m, err, sizeof err) == PS_OK, "%s", err);
    ps_model_init_params(m, 3);
    const ps_model_var *count = ps_model_var_at(m, 2);
    ck_assert_str_eq(count->name, "normalization/count");
    const float stats[7] = {0.25f, -0.5f, 0.125f, 2.0f, 0.5f, 1.5f, 50000.0f * 32 * 32};
    memcpy(ps_model_params(m), stats, sizeof stats); /* mean, variance, count */
    round_trip(m, "effnet_block", NULL);
    char wpath[4096];
    snprintf(wpath, sizeof wpath, "%s/effnet_block.weights.h5", tmpdir);
    const char *dset = "layers/normalization/vars/2";
    expect_int_scalar(wpath, dset, H5T_STD_I64LE);
    set_int32(wpath, dset, 1234);
    ck_assert_msg(ps_keras_load_weights(m, wpath, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_float_eq(ps_model_params(m)[count->offset], 1234.0f);
    ps_model_free(m);
}
END_TEST

/* ---- hostile files ---- */

/* Loads path into the fixture MLP and expects PS_EFORMAT with `want` in the message. */
static void expect_refused(const char *path, const char *want) {
    ps_model *m = load_archive("mlp.keras", NULL);
    char err[1024] = "";
    int rc = ps_keras_load_weights(m, path, err, sizeof err);
    ck_assert_msg(rc == PS_EFORMAT, "%s: rc %d (%s)", path, rc, err);
    ck_assert_msg(strstr(err, want), "got '%s', want '%s'", err, want);
    ck_assert_ptr_null(strchr(err, '\n'));
    ps_model_free(m);
}

/* The first `keep` bytes of fixture `file` (keep 0: all) into tmpdir/out, with
 * byte `flip` (when < keep) inverted. */
static void cut(const char *file, size_t keep, size_t flip, const char *out, char *path, size_t n) {
    char src[2048];
    fixture(src, sizeof src, file);
    size_t len = 0;
    unsigned char *b = (unsigned char *)ps_test_slurp(src, &len);
    ck_assert_ptr_nonnull(b);
    if (!keep || keep > len) keep = len;
    if (flip < keep) b[flip] ^= 0xff;
    snprintf(path, n, "%s/%s", tmpdir, out);
    ck_assert_int_eq(ps_test_write_file(path, b, keep), 0);
    free(b);
}

START_TEST(truncated) {
    char path[4096];
    cut("mlp.keras", 100000, (size_t)-1, "cut.keras", path, sizeof path);
    expect_refused(path, "cut.keras: not a readable zip archive");
    cut("mlp.weights.h5", 100000, (size_t)-1, "cut.weights.h5", path, sizeof path);
    expect_refused(path, "cut.weights.h5: ");
    cut("mlp.weights.h5", 10, (size_t)-1, "tiny.weights.h5", path, sizeof path);
    expect_refused(path, "tiny.weights.h5: not an HDF5 file, or damaged");
}
END_TEST

START_TEST(corrupted) {
    char path[4096];
    /* a byte of the stored model.weights.h5 changed: the zip's CRC says so */
    cut("mlp.keras", 0, 150000, "flip.keras", path, sizeof path);
    expect_refused(path, "flip.keras: member 'model.weights.h5' is damaged");
    /* the HDF5 superblock damaged */
    cut("mlp.weights.h5", 0, 0, "flip.weights.h5", path, sizeof path);
    expect_refused(path, "flip.weights.h5: not an HDF5 file, or damaged");
}
END_TEST

/* An archive of the given members (name, data, size), deflated. */
static void make_zip(const char *path, const char *const *names, const void *const *data,
                     const size_t *sizes, size_t n) {
    int ze = 0;
    zip_t *z = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &ze);
    ck_assert_ptr_nonnull(z);
    for (size_t i = 0; i < n; i++) {
        zip_source_t *s = zip_source_buffer(z, data[i], sizes[i], 0);
        ck_assert_ptr_nonnull(s);
        zip_int64_t idx = zip_file_add(z, names[i], s, ZIP_FL_ENC_UTF_8);
        ck_assert_int_ge(idx, 0);
        zip_set_file_compression(z, (zip_uint64_t)idx, ZIP_CM_DEFLATE, 9);
    }
    ck_assert_int_eq(zip_close(z), 0);
}

START_TEST(escaping_members) {
    static const char *const bad[] = {"../x", "/etc/passwd", "a/../../x", "..\\x"};
    char path[4096];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "%s/escape%zu.keras", tmpdir, i);
        const char *names[] = {"config.json", bad[i]};
        const void *data[] = {"{}", "x"};
        size_t sizes[] = {2, 1};
        make_zip(path, names, data, sizes, 2);
        char want[256];
        snprintf(want, sizeof want, "escape%zu.keras: member '%s' escapes the archive", i, bad[i]);
        expect_refused(path, want);
    }
}
END_TEST

START_TEST(zip_bomb) {
    char path[4096], err[1024] = "";
    /* 17 MiB of spaces deflate to a few KiB: refused from the stated size */
    size_t big = (size_t)17 << 20;
    char *spaces = malloc(big);
    memset(spaces, ' ', big);
    snprintf(path, sizeof path, "%s/bomb.keras", tmpdir);
    const char *names[] = {"config.json", "metadata.json", "model.weights.h5"};
    const void *data[] = {spaces, "{}", "x"};
    size_t sizes[] = {big, 2, 1};
    make_zip(path, names, data, sizes, 3);
    ps_model *m = NULL;
    ck_assert_int_eq(ps_keras_load_model(path, NULL, &m, err, sizeof err), PS_EFORMAT);
    ck_assert_msg(strstr(err, "bomb.keras: member 'config.json' is 17825792 bytes uncompressed: "
                              "more than the 16 MiB accepted"),
                  "%s", err);
    /* weights that are not HDF5 */
    expect_refused(path, "bomb.keras: member 'model.weights.h5' is not an HDF5 file");
    /* no weights at all */
    make_zip(path, names, data, sizes, 2);
    expect_refused(path, "bomb.keras: no member 'model.weights.h5'");
    free(spaces);
}
END_TEST

/* HDF5 links that make loops or lead out of the file. */
START_TEST(link_tricks) {
    char path[4096];
    snprintf(path, sizeof path, "%s/loop.weights.h5", tmpdir);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t ls = H5Gcreate2(f, "layers", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    for (int i = 0; i < 10; i++) {
        char name[16];
        snprintf(name, sizeof name, "g%d", i);
        hid_t g = H5Gcreate2(ls, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        ck_assert_int_ge(H5Lcreate_hard(g, "/layers", g, "layers", H5P_DEFAULT, H5P_DEFAULT), 0);
        H5Gclose(g);
    }
    H5Gclose(ls);
    H5Fclose(f);
    expect_refused(path, "loop.weights.h5: layers/g0/layers/g0/layers/g0/layers/g0/layers/g0/");
    expect_refused(path, "models nested too deep");
    snprintf(path, sizeof path, "%s/ext.weights.h5", tmpdir);
    f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    ls = H5Gcreate2(f, "layers", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert_int_ge(
        H5Lcreate_external("/etc/other.h5", "/x", ls, "dense", H5P_DEFAULT, H5P_DEFAULT), 0);
    ck_assert_int_ge(H5Lcreate_soft("/nowhere", ls, "soft", H5P_DEFAULT, H5P_DEFAULT), 0);
    H5Gclose(ls);
    H5Fclose(f);
    expect_refused(path, "ext.weights.h5: layers/dense: not a group");
    /* a weight whose values live in another file */
    snprintf(path, sizeof path, "%s/raw.weights.h5", tmpdir);
    f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t v = H5Gcreate2(f, "layers/dense_1/vars", lcpl, H5P_DEFAULT, H5P_DEFAULT);
    const char *name = "hidden";
    hid_t st = H5Tcopy(H5T_C_S1), sc = H5Screate(H5S_SCALAR);
    H5Tset_size(st, H5T_VARIABLE);
    hid_t a = H5Acreate2(v, "name", st, sc, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, st, &name);
    hsize_t dims[2] = {784, 64};
    hid_t sp = H5Screate_simple(2, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    ck_assert_int_ge(H5Pset_external(dcpl, "/etc/hostname", 0, 784 * 64 * 4), 0);
    hid_t d = H5Dcreate2(v, "0", H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ck_assert_int_ge(d, 0);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Aclose(a);
    H5Sclose(sc);
    H5Tclose(st);
    H5Pclose(lcpl);
    H5Gclose(v);
    H5Fclose(f);
    expect_refused(path, "raw.weights.h5: layers/dense_1/vars/0: its data is stored outside the "
                         "file (the model's hidden/kernel)");
}
END_TEST

int main(void) {
    Suite *s = suite_create("keras_files");
    TCase *tc = tcase_create("fixtures");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, mlp_predictions);
    tcase_add_test(tc, cnn_predictions);
    tcase_add_test(tc, residual_predictions);
    tcase_add_test(tc, nested_predictions);
    tcase_add_test(tc, compile_config);
    tcase_add_test(tc, wrong_shape);
    tcase_add_test(tc, missing_weight);
    tcase_add_test(tc, extra_weight);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("export");
    tcase_set_timeout(te, 60);
    tcase_add_checked_fixture(te, setup, teardown);
    tcase_add_test(te, export_keras_fixtures);
    tcase_add_test(te, export_keras_specs);
    tcase_add_test(te, export_keras_normalization);
    suite_add_tcase(s, te);
    TCase *th = tcase_create("hostile");
    tcase_set_timeout(th, 60);
    tcase_add_checked_fixture(th, setup, teardown);
    tcase_add_test(th, truncated);
    tcase_add_test(th, corrupted);
    tcase_add_test(th, escaping_members);
    tcase_add_test(th, zip_bomb);
    tcase_add_test(th, link_tricks);
    suite_add_tcase(s, th);
    return ps_test_run_suite(s);
}
