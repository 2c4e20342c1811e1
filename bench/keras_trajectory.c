/* bench/keras_trajectory: the project's side of the step-by-step parity check with
 * Keras (bench/keras_parity.py, docs/PERFORMANCE.md "Parity with Keras, step by
 * step"). Loads a .keras archive (architecture, loss, optimizer and weights), then
 * trains --steps steps in this process on Fashion-MNIST's training images taken in
 * order (batch k = images [k*B, (k+1)*B), no shuffling), each image adapted to the
 * model's input as psworker adapts it (zero padding, centred; one gray channel
 * repeated), with the file's optimizer applied by the in-worker optimizer
 * (psworker --no-ps's). After every step it records the step's loss and the values
 * of chosen variables: every BatchNormalization moving mean and variance, the first
 * and the last kernel (or every variable with --all-vars). --nudge moves every
 * trainable initial weight by one float32 ulp first: the same run perturbed at
 * rounding's scale, the noise floor the comparison with Keras is read against.
 *
 * Output file (--out): a text header, then binary records:
 *   keras_trajectory 1\n
 *   vars N\n
 *   N lines "NAME NUMEL\n" (in record order)
 *   steps S\n
 *   S records, each 1 + sum(NUMEL) little-endian float32: the loss, then the
 *   variables' values after the step's update, each in Keras' layout.
 * Built by meson, never run by the tests. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapt.h"
#include "benchutil.h"
#include "data.h"
#include "kernels.h"
#include "keras_file.h"
#include "local_opt.h"
#include "log.h"
#include "model.h"
#include "ps_error.h"

#define ERRLEN 512

typedef struct {
    const char *model;
    const char *out;
    const char *data_dir;
    long steps, batch, threads;
    bool all_vars, nudge;
} options;

static void usage(FILE *f, const char *argv0) {
    fprintf(f,
            "usage: %s --model FILE.keras --out FILE [--steps N] [--batch B] [--data DIR]\n"
            "          [--threads N] [--all-vars] [--nudge]\n"
            "Trains a .keras archive's model from its own weights, with its optimizer, on\n"
            "Fashion-MNIST's training images in order (batch k = images [k*B, (k+1)*B), each\n"
            "adapted to the model's input as psworker does: zero padding, gray repeated), and\n"
            "writes per step the loss and chosen variables after the update to FILE (format in\n"
            "bench/keras_trajectory.c). The project's side of bench/keras_parity.py.\n"
            "  --model FILE   the .keras archive (required)\n"
            "  --out FILE     the trajectory file to write (required)\n"
            "  --steps N      training steps (default 300)\n"
            "  --batch B      images per step (default 32)\n"
            "  --data DIR     Fashion-MNIST's IDX files (default /usr/share/datasets/fashion-mnist)\n"
            "  --threads N    OpenBLAS threads (default 1, as psworker)\n"
            "  --all-vars     record every variable, not only the BN statistics and the first\n"
            "                 and last kernels\n"
            "  --nudge        move every trainable initial weight by one float32 ulp (up and\n"
            "                 down in turn): the same run perturbed at float32 rounding's\n"
            "                 scale, to see how training amplifies such differences\n"
            "  --help         this text\n",
            argv0);
}

/* Parses argv into *o; returns 0 to go on, 1 after --help, 2 on a bad flag. */
static int parse_args(int argc, char **argv, options *o) {
    *o = (options){.data_dir = "/usr/share/datasets/fashion-mnist", .steps = 300, .batch = 32,
                   .threads = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout, argv[0]);
            return 1;
        }
        if (strcmp(a, "--all-vars") == 0 || strcmp(a, "--nudge") == 0) {
            if (a[2] == 'a')
                o->all_vars = true;
            else
                o->nudge = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "keras_trajectory: unknown option or missing value: %s\n", a);
            usage(stderr, argv[0]);
            return 2;
        }
        const char *val = argv[++i];
        bool ok = true;
        if (strcmp(a, "--model") == 0)
            o->model = val;
        else if (strcmp(a, "--out") == 0)
            o->out = val;
        else if (strcmp(a, "--data") == 0)
            o->data_dir = val;
        else if (strcmp(a, "--steps") == 0)
            ok = ps_bench_parse_long(val, 1, 100000, &o->steps);
        else if (strcmp(a, "--batch") == 0)
            ok = ps_bench_parse_long(val, 1, 60000, &o->batch);
        else if (strcmp(a, "--threads") == 0)
            ok = ps_bench_parse_long(val, 1, 64, &o->threads);
        else {
            fprintf(stderr, "keras_trajectory: unknown option: %s\n", a);
            usage(stderr, argv[0]);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "keras_trajectory: bad value for %s: %s\n", a, val);
            return 2;
        }
    }
    if (!o->model || !o->out) {
        fprintf(stderr, "keras_trajectory: --model and --out are required\n");
        usage(stderr, argv[0]);
        return 2;
    }
    if (o->steps * o->batch > 60000) {
        fprintf(stderr, "keras_trajectory: %ld steps of %ld need more than the 60,000 training "
                        "images (one pass, in order)\n",
                o->steps, o->batch);
        return 2;
    }
    return 0;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The variables to record, as indices into the model's: all of them, or every BN
 * moving statistic and the first and last kernels. Returns the count. */
static size_t pick_vars(const ps_model *m, bool all, size_t *idx) {
    size_t nv = ps_model_num_vars(m), n = 0, first = SIZE_MAX, last = SIZE_MAX;
    for (size_t i = 0; i < nv; i++) {
        const char *name = ps_model_var_at(m, i)->name;
        if (ends_with(name, "/kernel")) {
            if (first == SIZE_MAX) first = i;
            last = i;
        }
    }
    for (size_t i = 0; i < nv; i++) {
        const char *name = ps_model_var_at(m, i)->name;
        bool stat = ends_with(name, "/moving_mean") || ends_with(name, "/moving_variance");
        if (all || stat || i == first || i == last) idx[n++] = i;
    }
    return n;
}

static int write_header(FILE *f, const ps_model *m, const size_t *idx, size_t n, long steps) {
    fprintf(f, "keras_trajectory 1\nvars %zu\n", n);
    for (size_t k = 0; k < n; k++) {
        const ps_model_var *v = ps_model_var_at(m, idx[k]);
        fprintf(f, "%s %zu\n", v->name, v->numel);
    }
    fprintf(f, "steps %ld\n", steps);
    return ferror(f) ? PS_EIO : PS_OK;
}

static int write_record(FILE *f, ps_model *m, const size_t *idx, size_t n, float loss) {
    const float *p = ps_model_params(m);
    fwrite(&loss, sizeof loss, 1, f);
    for (size_t k = 0; k < n; k++) {
        const ps_model_var *v = ps_model_var_at(m, idx[k]);
        fwrite(p + v->offset, sizeof *p, v->numel, f);
    }
    return ferror(f) ? PS_EIO : PS_OK;
}

/* The model and its weights from the archive, on the CPU. */
static int load_model(const char *path, ps_model **m, char *err, size_t errlen) {
    ps_model_overrides ov = {.loss = NULL, .from_logits = -1};
    int rc = ps_keras_load_model(path, &ov, m, err, errlen);
    if (rc != PS_OK) return rc;
    ps_model_init_params(*m, 0);
    return ps_keras_load_weights(*m, path, err, errlen);
}

/* --nudge: every trainable weight one ulp up (even index) or down (odd). */
static void nudge_weights(ps_model *m) {
    float *p = ps_model_params(m);
    for (size_t i = 0; i < ps_model_num_vars(m); i++) {
        const ps_model_var *v = ps_model_var_at(m, i);
        if (!v->trainable) continue;
        for (size_t j = 0; j < v->numel; j++) {
            float *w = p + v->offset + j;
            *w = nextafterf(*w, j % 2 ? -INFINITY : INFINITY);
        }
    }
}

/* The first n training images, adapted to the model's input (as psworker). */
static int load_data(const options *o, const ps_model *m, ps_dataset *d, char *err,
                     size_t errlen) {
    size_t n = (size_t)(o->steps * o->batch);
    int rc = ps_dataset_load_dir(o->data_dir, 1, n, d, err, errlen);
    if (rc != PS_OK) return rc;
    size_t h, w, c, mh, mw, mc;
    ps_adapt_data_shape(d, &h, &w, &c);
    ps_model_input_shape(m, &mh, &mw, &mc);
    ps_adapt_plan plan;
    rc = ps_adapt_plan_make(h, w, c, mh, mw, mc, PS_ADAPT_PAD, false, &plan, err, errlen);
    if (rc == PS_OK) rc = ps_adapt_dataset(&plan, d, err, errlen);
    if (rc == PS_OK && !plan.identity) {
        char what[256];
        ps_adapt_describe(&plan, what, sizeof what);
        fprintf(stderr, "keras_trajectory: images adapted: %s\n", what);
    }
    return rc;
}

/* Trains o->steps steps in order, recording each into f. */
static int train(const options *o, ps_model *m, const ps_dataset *d, FILE *f, char *err,
                 size_t errlen) {
    ps_local_opt *opt = NULL;
    if (ps_local_opt_new(m, &opt) != PS_OK) {
        snprintf(err, errlen, "no memory for the optimizer's slots");
        return PS_ENOMEM;
    }
    size_t nv = ps_model_num_vars(m), *idx = malloc((nv ? nv : 1) * sizeof *idx);
    int rc = idx ? PS_OK : PS_ENOMEM;
    size_t n = idx ? pick_vars(m, o->all_vars, idx) : 0;
    if (rc == PS_OK) rc = write_header(f, m, idx, n, o->steps);
    size_t b = (size_t)o->batch;
    for (long s = 0; rc == PS_OK && s < o->steps; s++) {
        float loss = 0;
        size_t correct = 0;
        rc = ps_model_train_step(m, d->x + (size_t)s * b * d->dim, d->y + (size_t)s * b, b,
                                 &loss, &correct);
        if (rc != PS_OK) {
            snprintf(err, errlen, "step %ld: %s", s + 1, ps_strerror(rc));
            break;
        }
        ps_local_opt_step(opt);
        rc = write_record(f, m, idx, n, loss);
        if (rc != PS_OK) snprintf(err, errlen, "writing step %ld: %s", s + 1, ps_strerror(rc));
    }
    free(idx);
    ps_local_opt_free(opt);
    return rc;
}

int main(int argc, char **argv) {
    options o;
    int a = parse_args(argc, argv, &o);
    if (a) return a == 1 ? 0 : 2;
    ps_log_set_level(PS_LOG_WARN);
    ps_k_set_threads((int)o.threads);
    char err[ERRLEN] = "";
    ps_model *m = NULL;
    ps_dataset d = {0};
    int rc = load_model(o.model, &m, err, sizeof err);
    if (rc == PS_OK && o.nudge) nudge_weights(m);
    if (rc == PS_OK) rc = load_data(&o, m, &d, err, sizeof err);
    FILE *f = NULL;
    if (rc == PS_OK && !(f = fopen(o.out, "wb"))) {
        snprintf(err, sizeof err, "%s: cannot write", o.out);
        rc = PS_EIO;
    }
    if (rc == PS_OK) rc = train(&o, m, &d, f, err, sizeof err);
    if (f && fclose(f) != 0 && rc == PS_OK) {
        snprintf(err, sizeof err, "%s: write failed", o.out);
        rc = PS_EIO;
    }
    if (rc != PS_OK) fprintf(stderr, "keras_trajectory: %s\n", err);
    ps_dataset_free(&d);
    ps_model_free(m);
    return rc == PS_OK ? 0 : 1;
}
