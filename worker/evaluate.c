/* psworker --evaluate (see evaluate.h). */
#include "evaluate.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "adapt.h"
#include "cifar.h"
#include "data.h"
#include "dataspec.h"
#include "input.h"
#include "order.h"
#include "pipeline.h"
#include "prepare.h"
#include "keras_file.h"
#include "kernels.h"
#include "labels.h"
#include "log.h"
#include "model.h"
#include "ps_error.h"
#include "tensorfile.h"
#include "saved_model.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The saved values into m: every variable by name, with its size. */
static int load_values(ps_model *m, const char *path, char *err, size_t errlen) {
    if (ends_with(path, ".onnx")) {
        snprintf(err, errlen,
                 "--evaluate %s: reads a model saved with --save (a tensor file); an ONNX "
                 "export is for ONNX runtimes",
                 path);
        return PS_EINVAL;
    }
    return ps_saved_model_load(m, path, "--evaluate", err, errlen);
}

/* The test set as the chief sees it in training: loaded, adapted to the
 * model's input, relabelled. */
static int load_test(const ps_train_config *cfg, ps_model *m, ps_dataset *test, char *err,
                     size_t errlen) {
    const char *ds = cfg->dataset ? cfg->dataset : "auto";
    int cifar = strcmp(ds, "cifar10") == 0 ||
                (strcmp(ds, "auto") == 0 && ps_cifar10_dir_detect(cfg->data_dir));
    int rc = cifar ? ps_dataset_load_cifar10_dir(cfg->data_dir, 0, cfg->max_test, test, err, errlen)
                   : ps_dataset_load_dir(cfg->data_dir, 0, cfg->max_test, test, err, errlen);
    if (rc != PS_OK) return rc;
    size_t h, w, c, mh, mw, mc;
    ps_adapt_data_shape(test, &h, &w, &c);
    ps_model_input_shape(m, &mh, &mw, &mc);
    ps_adapt_plan plan;
    rc = ps_adapt_plan_make(h, w, c, mh, mw, mc, (ps_adapt_mode)cfg->input_adapt, cfg->rgb_to_gray,
                            &plan, err, errlen);
    if (rc == PS_OK && !plan.identity) rc = ps_adapt_dataset(&plan, test, err, errlen);
    if (rc != PS_OK) return rc;
    ps_label_spec flag;
    const ps_label_spec *spec = ps_model_labels(m);
    const char *what = "the model spec's \"labels\"";
    if (cfg->positive_classes) {
        rc = ps_labels_parse_positive(cfg->positive_classes, &flag, err, errlen);
        spec = &flag, what = "--positive-classes";
    } else if (cfg->label_map) {
        rc = ps_labels_parse_map(cfg->label_map, &flag, err, errlen);
        spec = &flag, what = "--label-map";
    }
    int32_t table[PS_LABELS_MAX];
    size_t classes = ps_model_num_classes(m);
    if (rc == PS_OK)
        rc = ps_labels_resolve(spec, what, test->num_classes, classes, table, err, errlen);
    if (rc == PS_OK && spec->kind != PS_LABELS_NONE) ps_labels_apply(test, table, (int)classes);
    return rc;
}

/* A streamed test set (any format but IDX and CIFAR-10) through the input
 * pipeline, in order, with the spec's deterministic preprocessing: the mean
 * loss, the hits, the samples and (when out is not NULL) the outputs, grown in
 * *out. */
static int evaluate_streamed(const ps_train_config *cfg, ps_model *m, const ps_data_spec *spec,
                             float **out, size_t *n, float *loss, size_t *correct, char *err,
                             size_t errlen) {
    ps_source *src = NULL;
    ps_prep *prep = NULL;
    ps_pipeline *pl = NULL;
    size_t mh, mw, mc, cols = ps_model_output_dim(m), cap = 0;
    ps_model_input_shape(m, &mh, &mw, &mc);
    ps_data_spec sp = *spec; /* decoded images get the model's channels unless the spec says */
    if (sp.opts.channels == 0 && (mc == 1 || mc == 3)) sp.opts.channels = (int)mc;
    int rc = ps_data_spec_open(&sp, &src, err, errlen);
    if (rc == PS_OK) rc = ps_input_source_check(src, m, err, errlen);
    if (rc == PS_OK && (ps_model_num_embeddings(m) || src->float_target)) {
        snprintf(err, errlen, "--evaluate: a model with Embedding layers or float targets is "
                              "evaluated during training (its tables live on psd)");
        rc = PS_EINVAL;
    }
    if (rc == PS_OK) rc = ps_prep_new(spec->preprocess, mh, mw, mc, cfg->rgb_to_gray, &prep, err,
                                      errlen);
    size_t take = src && cfg->max_test && cfg->max_test < src->n ? cfg->max_test : src ? src->n : 0;
    size_t *recs = rc == PS_OK ? malloc(take * sizeof *recs) : NULL;
    if (rc == PS_OK && !recs) rc = PS_ENOMEM;
    for (size_t i = 0; recs && i < take; i++) recs[i] = i;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    ps_pipeline_cfg pc = {.src = src, .out_h = mh, .out_w = mw, .out_c = mc,
                          .prepare = ps_prep_run, .prepare_ctx = prep,
                          .num_classes = (int)(ps_model_num_classes(m) == 1 ? 2
                                                                            : ps_model_num_classes(m)),
                          .batch = 256, .threads = cpus < 1 ? 1 : cpus > 8 ? 8 : (unsigned)cpus,
                          .memory_bytes = cfg->input_memory, .skip_bad = spec->skip_bad,
                          .records = recs, .n_records = take, .count = 1,
                          .shuffle_buffer = PS_ORDER_IN_ORDER, .seed = cfg->seed};
    if (rc == PS_OK) rc = ps_pipeline_open(&pl, &pc, err, errlen);
    if (rc == PS_OK) {
        PS_INFO("test: %s %s", src->format, src->desc);
        rc = ps_pipeline_start_epoch(pl, 0, 0);
    }
    double sum = 0;
    *n = *correct = 0;
    while (rc == PS_OK) {
        float *x, l = 0;
        int32_t *y;
        size_t nb = 0, c = 0;
        rc = ps_pipeline_next(pl, &x, &y, &nb, err, errlen);
        if (rc != PS_OK || nb == 0) break;
        if (out && (*n + nb) * cols > cap) {
            size_t nc = cap ? 2 * cap : 4096 * cols;
            while (nc < (*n + nb) * cols) nc *= 2;
            float *o = realloc(*out, nc * sizeof *o);
            if (!o) {
                rc = PS_ENOMEM;
                break;
            }
            *out = o, cap = nc;
        }
        rc = ps_model_evaluate_out(m, x, y, nb, &l, &c, out ? *out + *n * cols : NULL);
        if (rc != PS_OK) snprintf(err, errlen, "evaluation failed: %s", ps_strerror(rc));
        sum += (double)l * (double)nb;
        *correct += c;
        *n += nb;
    }
    if (rc == PS_OK && *n) *loss = (float)(sum / (double)*n);
    ps_pipeline_close(pl);
    free(recs);
    ps_prep_free(prep);
    ps_source_close(src);
    return rc;
}

/* Writes n x cols floats, little-endian, through path.tmp.<pid>. */
static int write_predictions(const char *path, const float *p, size_t n, size_t cols, char *err,
                             size_t errlen) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    int ok = f != NULL;
    for (size_t i = 0; ok && i < n * cols; i++) {
        uint32_t u;
        memcpy(&u, &p[i], 4);
        unsigned char b[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16),
                              (unsigned char)(u >> 24)};
        ok = fwrite(b, 1, 4, f) == 4;
    }
    int e = errno;
    if (f && fclose(f) != 0 && ok) ok = 0, e = errno;
    if (ok && rename(tmp, path) != 0) ok = 0, e = errno;
    if (!ok) {
        if (f) remove(tmp);
        snprintf(err, errlen, "--predictions %s: %s", path, strerror(e));
        return PS_EIO;
    }
    return PS_OK;
}

static int write_summary(const char *path, const char *model_file, const ps_train_result *res,
                         size_t n, char *err, size_t errlen) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "test_accuracy", res->test_accuracy);
    cJSON_AddNumberToObject(o, "test_loss", res->test_loss);
    cJSON_AddStringToObject(o, "mode", "evaluate");
    cJSON_AddStringToObject(o, "model_file", model_file);
    cJSON_AddNumberToObject(o, "test_samples", (double)n);
    cJSON_AddNumberToObject(o, "wall_seconds", res->wall_seconds);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) return PS_ENOMEM;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int ok = f && fprintf(f, "%s\n", text) >= 0;
    if (f && fclose(f) != 0) ok = 0;
    free(text);
    if (!ok || rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot write summary %s", path);
        return PS_EIO;
    }
    return PS_OK;
}

int ps_evaluate_run(const ps_train_config *cfg, const char *model_file, const char *predictions,
                    ps_train_result *res, char *err, size_t errlen) {
    double t0 = now_s();
    memset(res, 0, sizeof *res);
    res->test_accuracy = res->test_loss = -1;
    ps_model *m = NULL;
    ps_k_dev *dev = NULL;
    ps_dataset test = {0};
    float *out = NULL;
    ps_model_overrides ov = {.loss = cfg->loss, .from_logits = -1};
    /* a .keras archive carries its architecture: --model may be left out */
    const char *model_path = cfg->model_path;
    if (!model_path && ps_keras_kind_of(model_file) == PS_KERAS_ARCHIVE) model_path = model_file;
    int rc = model_path ? ps_model_open(model_path, &ov, &m, err, errlen)
                        : ps_model_from_json(ps_model_default_spec(), &m, err, errlen);
    if (rc == PS_OK && cfg->dtype_policy) {
        ps_dtype_policy p;
        rc = ps_dtype_policy_parse(cfg->dtype_policy, &p, err, errlen);
        if (rc == PS_OK) ps_model_set_dtype_policy(m, p);
    }
    if (rc == PS_OK) rc = load_values(m, model_file, err, errlen);
    if (rc == PS_OK) rc = ps_k_dev_open(cfg->device ? cfg->device : "auto", &dev, err, errlen);
    if (rc == PS_OK) rc = ps_model_set_device(m, dev, err, errlen);
    /* the test set: --test-data, else --data (its test files for IDX and CIFAR-10) */
    ps_data_spec spec = {0};
    bool streamed = false;
    const char *ds = cfg->dataset ? cfg->dataset : "auto";
    if (rc == PS_OK && (cfg->test_data || strcmp(ds, "auto") == 0)) {
        rc = ps_data_spec_resolve(cfg->test_data ? cfg->test_data : cfg->data_dir, &spec, err,
                                  errlen);
        streamed = rc == PS_OK && spec.format != PS_DATA_IDX && spec.format != PS_DATA_CIFAR10;
    }
    ps_train_config tcfg = *cfg; /* IDX / CIFAR-10 from --test-data's directory */
    if (rc == PS_OK && !streamed && cfg->test_data) tcfg.data_dir = spec.paths[0];
    float loss = 0;
    size_t correct = 0, w = rc == PS_OK ? ps_model_output_dim(m) : 0, n = 0;
    if (rc == PS_OK && streamed) {
        PS_INFO("evaluating %s (%s) on %s", model_file, ps_model_name(m), spec.origin);
        rc = evaluate_streamed(cfg, m, &spec, predictions ? &out : NULL, &n, &loss, &correct,
                               err, errlen);
    } else if (rc == PS_OK) {
        rc = load_test(&tcfg, m, &test, err, errlen);
        n = test.n;
    }
    if (rc == PS_OK && n == 0) {
        snprintf(err, errlen, "--evaluate: the test set is empty");
        rc = PS_EINVAL;
    }
    if (rc == PS_OK && !streamed && predictions && !(out = malloc(test.n * w * sizeof *out))) {
        snprintf(err, errlen, "--predictions: no memory for %zu x %zu outputs", test.n, w);
        rc = PS_ENOMEM;
    }
    if (rc == PS_OK && !streamed) {
        PS_INFO("evaluating %s (%s) on %zu test samples on %s", model_file, ps_model_name(m),
                test.n, ps_k_dev_name(dev));
        rc = ps_model_evaluate_out(m, test.x, test.y, test.n, &loss, &correct, out);
        if (rc != PS_OK) snprintf(err, errlen, "evaluation failed: %s", ps_strerror(rc));
    }
    ps_data_spec_free(&spec);
    if (rc == PS_OK && predictions) {
        rc = write_predictions(predictions, out, n, w, err, errlen);
        if (rc == PS_OK) PS_INFO("predictions: %zu x %zu float32 in %s", n, w, predictions);
    }
    res->wall_seconds = now_s() - t0;
    if (rc == PS_OK) {
        res->test_loss = loss;
        res->test_accuracy = (double)correct / (double)n;
        printf("test accuracy: %.4f  test loss: %.4f  (evaluated %s: %zu test samples, %.1f s)\n",
               res->test_accuracy, res->test_loss, model_file, n, res->wall_seconds);
        fflush(stdout);
        if (cfg->summary_path)
            rc = write_summary(cfg->summary_path, model_file, res, n, err, errlen);
    }
    free(out);
    ps_dataset_free(&test);
    ps_model_free(m);
    ps_k_dev_close(dev);
    return rc;
}
