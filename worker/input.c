/* The worker's input side (input.h). */
#include "input.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "adapt.h"
#include "auc.h"
#include "cifar.h"
#include "labels.h"
#include "log.h"
#include "order.h"
#include "prepare.h"
#include "ps_error.h"

/* --- in memory: IDX and CIFAR-10, loaded whole, adapted and relabelled once --- */

static int load_memory(const ps_train_config *cfg, ps_input *in, bool cifar, char *err,
                       size_t errlen) {
    int (*load)(const char *, int, size_t, ps_dataset *, char *, size_t) =
        cifar ? ps_dataset_load_cifar10_dir : ps_dataset_load_dir;
    const char *dir = in->spec.n_paths ? in->spec.paths[0] : cfg->data_dir;
    int rc = load(dir, 1, cfg->max_train, &in->train, err, errlen);
    if (rc == PS_OK && cfg->index == 0 && !cfg->test_data)
        rc = load(dir, 0, cfg->max_test, &in->test, err, errlen);
    if (rc == PS_OK)
        PS_INFO("data: %s (%zu training samples)", cifar ? "CIFAR-10" : "IDX", in->train.n);
    return rc;
}

/* The images as the model takes them: adapted once here (--input-adapt), with
 * one log line saying how; the same shape is refused with its reason. */
static int adapt_inputs(const ps_train_config *cfg, ps_input *in, const ps_model *m, char *err,
                        size_t errlen) {
    size_t h, w, c, mh, mw, mc;
    ps_adapt_data_shape(&in->train, &h, &w, &c);
    ps_model_input_shape(m, &mh, &mw, &mc);
    ps_adapt_plan plan;
    int rc = ps_adapt_plan_make(h, w, c, mh, mw, mc, (ps_adapt_mode)cfg->input_adapt,
                                cfg->rgb_to_gray, &plan, err, errlen);
    if (rc != PS_OK || plan.identity) return rc;
    size_t before = (in->train.n + in->test.n) * in->train.dim * sizeof(float);
    rc = ps_adapt_dataset(&plan, &in->train, err, errlen);
    if (rc == PS_OK) rc = ps_adapt_dataset(&plan, &in->test, err, errlen);
    if (rc != PS_OK) return rc;
    char how[256];
    ps_adapt_describe(&plan, how, sizeof how);
    PS_INFO("input: the data's %zux%zux%zu images adapted to the model's %zux%zux%zu (%s; "
            "--input-adapt %s), once at load: %zu samples, %.0f MB (was %.0f MB)",
            h, w, c, mh, mw, mc, how, cfg->input_adapt == PS_ADAPT_RESIZE ? "resize" : "pad",
            in->train.n + in->test.n,
            (double)((in->train.n + in->test.n) * in->train.dim * sizeof(float)) / 1e6,
            (double)before / 1e6);
    return PS_OK;
}

/* The relabelling asked for: --positive-classes or --label-map, else the
 * spec's "labels". *what names it; kind NONE when none. */
static int label_spec(const ps_train_config *cfg, const ps_model *m, ps_label_spec *flag,
                      const ps_label_spec **spec, const char **what, char *err, size_t errlen) {
    *spec = ps_model_labels(m);
    *what = "the model spec's \"labels\"";
    int rc = PS_OK;
    if (cfg->positive_classes) {
        rc = ps_labels_parse_positive(cfg->positive_classes, flag, err, errlen);
        *spec = flag, *what = "--positive-classes";
    } else if (cfg->label_map) {
        rc = ps_labels_parse_map(cfg->label_map, flag, err, errlen);
        *spec = flag, *what = "--label-map";
    }
    if (rc == PS_OK && (*spec)->kind != PS_LABELS_NONE &&
        (cfg->positive_classes || cfg->label_map) && ps_model_labels(m)->kind != PS_LABELS_NONE)
        PS_INFO("labels: %s replaces the model spec's \"labels\"", *what);
    return rc;
}

/* The labels as the model takes them, in memory. */
static int map_labels(const ps_train_config *cfg, ps_input *in, const ps_model *m, char *err,
                      size_t errlen) {
    ps_label_spec flag;
    const ps_label_spec *spec;
    const char *what;
    int rc = label_spec(cfg, m, &flag, &spec, &what, err, errlen);
    if (rc != PS_OK) return rc;
    int classes = in->train.num_classes;
    if (in->test.num_classes > classes) classes = in->test.num_classes;
    size_t model_classes = ps_model_num_classes(m);
    int32_t table[PS_LABELS_MAX];
    rc = ps_labels_resolve(spec, what, classes, model_classes, table, err, errlen);
    if (rc != PS_OK || spec->kind == PS_LABELS_NONE) return rc;
    ps_labels_apply(&in->train, table, (int)model_classes);
    ps_labels_apply(&in->test, table, (int)model_classes);
    char desc[1200], btrain[512], btest[512] = "not loaded here";
    int binary = spec->kind == PS_LABELS_POSITIVE;
    ps_labels_describe(spec, classes, desc, sizeof desc);
    PS_INFO("labels: %s (%s)", desc, what);
    ps_labels_balance(&in->train, binary, btrain, sizeof btrain);
    if (in->test.n) ps_labels_balance(&in->test, binary, btest, sizeof btest);
    PS_INFO("class balance: train %s; test %s", btrain, btest);
    return PS_OK;
}

static int prep_new(const ps_train_config *cfg, const ps_model *m, const ps_data_spec *spec,
                    bool training, ps_prep **out, char *err, size_t errlen) {
    size_t h, w, c;
    ps_model_input_shape(m, &h, &w, &c);
    int rc = ps_prep_new(spec->preprocess, h, w, c, cfg->rgb_to_gray, out, err, errlen);
    if (rc != PS_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", err);
        snprintf(err, errlen, "%s: %s", spec->origin, why);
        return rc;
    }
    char desc[512];
    ps_prep_describe(*out, desc, sizeof desc);
    if (training || spec->preprocess)
        PS_INFO("preprocess (%s): %s", training ? "training" : "evaluation", desc);
    return PS_OK;
}

/* --- sets and their pipelines --- */

/* The first n records, or a seeded validation split of them (Keras'
 * image_dataset_from_directory: shuffled by the seed, the last fraction held
 * out), as ascending lists. */
static int split_records(size_t n, size_t max, double split, uint64_t seed, size_t **train,
                         size_t *n_train, size_t **val, size_t *n_val) {
    if (max && max < n) n = max;
    *train = *val = NULL;
    *n_val = split > 0 ? (size_t)((double)n * split + 0.999999) : 0;
    *n_train = n - *n_val;
    if (!split && !max) return PS_OK;
    size_t *perm = malloc(n * sizeof *perm);
    uint8_t *is_val = calloc(n, 1);
    *train = malloc((*n_train ? *n_train : 1) * sizeof **train);
    *val = malloc((*n_val ? *n_val : 1) * sizeof **val);
    if (!perm || !is_val || !*train || !*val) {
        free(perm), free(is_val), free(*train), free(*val);
        *train = *val = NULL;
        return PS_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) perm[i] = i;
    uint64_t s = ps_order_seed(seed, 0xFFFFFFFFu, 0);
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)ps_order_below(&s, i), t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
    for (size_t i = *n_train; i < n; i++) is_val[perm[i]] = 1;
    size_t a = 0, b = 0;
    for (size_t i = 0; i < n; i++) {
        if (is_val[i]) (*val)[b++] = i;
        else (*train)[a++] = i;
    }
    free(perm), free(is_val);
    return PS_OK;
}

static unsigned input_threads(const ps_train_config *cfg) {
    if (cfg->no_prefetch) return 0;
    if (cfg->input_threads > 0) return (unsigned)cfg->input_threads;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 8 ? 8 : (unsigned)n;
}

int ps_input_source_check(const ps_source *src, const ps_model *m, char *err, size_t errlen) {
    size_t k = ps_model_num_id_inputs(m), cols = ps_model_id_columns(m);
    if (src->n_ids != cols) {
        snprintf(err, errlen,
                 "%s: %zu id column(s) a record, but the model reads %zu id(s) a sample from %zu "
                 "id input(s) (an Embedding layer's ids; the id inputs read the id columns in "
                 "order, an input of shape [n] the next n)",
                 src->desc, src->n_ids, cols, k);
        return PS_EINVAL;
    }
    if (src->float_target && !ps_model_takes_targets(m)) {
        snprintf(err, errlen,
                 "%s: its labels are float targets, but the model's loss takes classes "
                 "(sparse_categorical_crossentropy): use mse or binary_crossentropy",
                 src->desc);
        return PS_EINVAL;
    }
    return PS_OK;
}

static int open_pipeline(const ps_train_config *cfg, const ps_model *m, const ps_input *in,
                         ps_source *src,
                         const size_t *recs, size_t n_recs, ps_prep *prep, bool training,
                         unsigned index, unsigned count, size_t shuffle, size_t batch,
                         size_t steps, bool skip_bad, unsigned threads, ps_pipeline **out, char *err,
                         size_t errlen) {
    ps_pipeline_cfg pc = {.src = src,
                          .prepare = prep ? ps_prep_run : NULL,
                          .prepare_ctx = prep,
                          .num_classes = (int)ps_model_num_classes(m),
                          .label_map = in->label_map_n ? in->label_map : NULL,
                          .label_map_n = in->label_map_n,
                          .batch = batch,
                          .steps = steps,
                          .threads = threads,
                          .memory_bytes = cfg->input_memory,
                          .training = training,
                          .skip_bad = skip_bad,
                          .records = recs,
                          .n_records = recs ? n_recs : 0,
                          .index = index,
                          .count = count,
                          .shuffle_buffer = shuffle,
                          .seed = cfg->seed};
    ps_model_input_shape(m, &pc.out_h, &pc.out_w, &pc.out_c);
    if (pc.num_classes == 1) pc.num_classes = 2; /* one sigmoid output: labels 0 and 1 */
    int rc = ps_input_source_check(src, m, err, errlen);
    return rc == PS_OK ? ps_pipeline_open(out, &pc, err, errlen) : rc;
}

/* The training share's order: --shuffle-buffer, else the spec's, else full. */
static size_t shuffle_of(const ps_train_config *cfg, const ps_data_spec *spec) {
    if (cfg->shuffle_buffer > 0) return (size_t)cfg->shuffle_buffer;
    return spec->has_shuffle_buffer ? spec->shuffle_buffer : 0;
}

static void log_pipeline(const char *what, const ps_pipeline *pl, const ps_train_config *cfg,
                         unsigned threads) {
    bool over = false;
    size_t depth = ps_pipeline_depth(pl, &over);
    PS_INFO("input (%s): %zu records per epoch, %s%s; %u thread%s, %zu batches ahead%s", what,
            ps_pipeline_epoch_records(pl),
            cfg->workers > 1 ? (ps_pipeline_by_file(pl) ? "shared by file" : "shared by record")
                             : "all of it",
            "", threads, threads == 1 ? "" : "s", depth,
            over ? " (two batches already exceed --input-memory)" : "");
}

/* Decoded images get the model's channels unless the spec names them. */
static void default_channels(ps_data_spec *spec, const ps_model *m) {
    size_t h, w, c;
    ps_model_input_shape(m, &h, &w, &c);
    if (spec->opts.channels == 0 && (c == 1 || c == 3)) spec->opts.channels = (int)c;
}

static int open_streamed(const ps_train_config *cfg, ps_input *in, const ps_model *m,
                         char *err, size_t errlen) {
    default_channels(&in->spec, m);
    if (in->spec.validation) default_channels(in->spec.validation, m);
    int rc = ps_data_spec_open(&in->spec, &in->train_src, err, errlen);
    if (rc == PS_OK) rc = ps_input_source_check(in->train_src, m, err, errlen);
    if (rc != PS_OK) return rc;
    PS_INFO("data: %s %s", in->train_src->format, in->train_src->desc);
    if (in->train_src->classes) {
        char map[1024] = "";
        size_t off = 0;
        for (size_t i = 0; i < in->train_src->n_classes && off + 1 < sizeof map; i++)
            off += (size_t)snprintf(map + off, sizeof map - off, "%s%zu = %s", i ? ", " : "", i,
                                    in->train_src->classes[i]);
        PS_INFO("classes: %s", map);
    }
    ps_label_spec flag;
    const ps_label_spec *ls;
    const char *what;
    if ((rc = label_spec(cfg, m, &flag, &ls, &what, err, errlen)) != PS_OK) return rc;
    if (ls->kind != PS_LABELS_NONE) {
        /* the data's classes; TFRecord files do not say without being read: then every
         * class a positive list leaves out is negative, and a map names them all */
        int classes = in->train_src->num_classes, top = -1;
        for (int c = 0; c < PS_LABELS_MAX; c++)
            if (ls->kind == PS_LABELS_MAP ? ls->to[c] >= 0 : ls->to[c] != 0) top = c;
        if (classes <= 0) classes = ls->kind == PS_LABELS_MAP ? top + 1 : PS_LABELS_MAX;
        rc = ps_labels_resolve(ls, what, classes, ps_model_num_classes(m), in->label_map, err,
                               errlen);
        if (rc != PS_OK) return rc;
        in->label_map_n = (size_t)classes;
        char desc[1200];
        ps_labels_describe(ls, classes, desc, sizeof desc);
        PS_INFO("labels: %s (%s), as the records are read", desc, what);
    }
    size_t nm = ps_model_num_classes(m);
    if (!in->label_map_n && in->train_src->num_classes > (int)(nm == 1 ? 2 : nm)) {
        snprintf(err, errlen, "%s has %d classes, the model's output takes %zu (map them with "
                 "--label-map or --positive-classes)",
                 in->spec.origin, in->train_src->num_classes, nm == 1 ? 2 : nm);
        return PS_EINVAL;
    }
    rc = prep_new(cfg, m, &in->spec, true, &in->prep, err, errlen);
    if (rc == PS_OK) rc = prep_new(cfg, m, &in->spec, false, &in->eval_prep, err, errlen);
    if (rc != PS_OK) return rc;
    double split = cfg->validation_split > 0 ? cfg->validation_split : in->spec.validation_split;
    rc = split_records(in->train_src->n, cfg->max_train, split, cfg->seed, &in->train_recs,
                       &in->n_train_recs, &in->val_recs, &in->n_val_recs);
    if (rc != PS_OK) return rc;
    if (split > 0) {
        in->val_src = in->train_src;
        PS_INFO("validation: %zu of %zu records held out (validation_split %g, seeded)",
                in->n_val_recs, in->n_val_recs + in->n_train_recs, split);
    }
    return PS_OK;
}

int ps_input_open(ps_input *in, const ps_train_config *cfg, const ps_model *m, size_t batch,
                  char *err, size_t errlen) {
    memset(in, 0, sizeof *in);
    const char *ds = cfg->dataset ? cfg->dataset : "auto";
    int rc = PS_OK;
    bool forced = strcmp(ds, "auto") != 0;
    if (!forced) rc = ps_data_spec_resolve(cfg->data_dir, &in->spec, err, errlen);
    if (rc != PS_OK) return rc;
    bool cifar = strcmp(ds, "cifar10") == 0 || (!forced && in->spec.format == PS_DATA_CIFAR10);
    in->in_memory = forced || in->spec.format == PS_DATA_IDX || in->spec.format == PS_DATA_CIFAR10;
    unsigned threads = input_threads(cfg);
    if (in->in_memory) {
        rc = load_memory(cfg, in, cifar, err, errlen);
        if (rc == PS_OK) rc = adapt_inputs(cfg, in, m, err, errlen);
        if (rc == PS_OK) rc = map_labels(cfg, in, m, err, errlen);
        if (rc == PS_OK)
            rc = ps_source_memory(&in->train, cifar ? "CIFAR-10" : "IDX", &in->train_src, err,
                                  errlen);
        if (rc != PS_OK) return rc;
        double split = cfg->validation_split;
        rc = split_records(in->train.n, 0, split, cfg->seed, &in->train_recs, &in->n_train_recs,
                           &in->val_recs, &in->n_val_recs);
        if (rc != PS_OK) return rc;
        if (split > 0) {
            in->val_src = in->train_src;
            PS_INFO("validation: %zu of %zu samples held out (--validation-split %g, seeded)",
                    in->n_val_recs, in->train.n, split);
        }
        threads = threads ? 1 : 0; /* a copy per sample: one thread keeps ahead */
    } else {
        rc = open_streamed(cfg, in, m, err, errlen);
        if (rc != PS_OK) return rc;
    }
    if (in->train_recs && in->n_train_recs < cfg->workers) {
        snprintf(err, errlen, "%zu training records cannot be shared among %u workers",
                 in->n_train_recs, cfg->workers);
        return PS_EINVAL;
    }
    in->train_threads = threads;
    rc = open_pipeline(cfg, m, in, in->train_src, in->train_recs, in->n_train_recs, in->prep, true,
                       cfg->index, cfg->workers, shuffle_of(cfg, &in->spec), batch, 0,
                       in->spec.skip_bad, threads, &in->train_pl, err, errlen);
    if (rc != PS_OK) return rc;
    log_pipeline("training", in->train_pl, cfg, threads);
    if (cfg->index != 0) return PS_OK;
    /* the chief: a validation set from the spec, and the test set */
    if (!in->val_src && in->spec.validation) {
        rc = ps_data_spec_open(in->spec.validation, &in->val_src, err, errlen);
        if (rc != PS_OK) return rc;
        PS_INFO("validation: %s %s", in->val_src->format, in->val_src->desc);
    }
    if (in->val_src) {
        rc = open_pipeline(cfg, m, in, in->val_src, in->val_recs, in->n_val_recs, in->eval_prep,
                           false, 0, 1, PS_ORDER_IN_ORDER, batch, 0, in->spec.skip_bad,
                           threads, &in->val_pl, err, errlen);
        if (rc != PS_OK) return rc;
    }
    if (cfg->test_data) {
        rc = ps_data_spec_resolve(cfg->test_data, &in->test_spec, err, errlen);
        if (rc != PS_OK) return rc;
        in->have_test_spec = true;
        if (in->test_spec.format == PS_DATA_IDX || in->test_spec.format == PS_DATA_CIFAR10) {
            bool tc = in->test_spec.format == PS_DATA_CIFAR10;
            rc = (tc ? ps_dataset_load_cifar10_dir : ps_dataset_load_dir)(
                in->test_spec.paths[0], 0, cfg->max_test, &in->test, err, errlen);
            if (rc != PS_OK) return rc;
        } else {
            default_channels(&in->test_spec, m);
            rc = ps_data_spec_open(&in->test_spec, &in->test_src, err, errlen);
            if (rc != PS_OK) return rc;
            PS_INFO("test: %s %s", in->test_src->format, in->test_src->desc);
            if (!in->eval_prep)
                rc = prep_new(cfg, m, &in->test_spec, false, &in->eval_prep, err, errlen);
            if (rc != PS_OK) return rc;
            size_t *tr = NULL, nt = 0, *none = NULL, nn = 0;
            rc = split_records(in->test_src->n, cfg->max_test, 0, 0, &tr, &nt, &none, &nn);
            free(none);
            in->test_recs = tr, in->n_test_recs = nt;
            if (rc == PS_OK)
                rc = open_pipeline(cfg, m, in, in->test_src, tr, nt, in->eval_prep, false, 0, 1,
                                   PS_ORDER_IN_ORDER, batch, 0, in->test_spec.skip_bad, threads,
                                   &in->test_pl, err, errlen);
            if (rc != PS_OK) return rc;
        }
    }
    return PS_OK;
}

int ps_input_reshard(ps_input *in, const ps_train_config *cfg, const ps_model *m,
                     unsigned rank, unsigned count, size_t batch, size_t steps, char *err,
                     size_t errlen) {
    ps_pipeline_close(in->train_pl);
    in->train_pl = NULL;
    return open_pipeline(cfg, m, in, in->train_src, in->train_recs, in->n_train_recs, in->prep,
                         true, rank, count, shuffle_of(cfg, &in->spec), batch ? batch : 1, steps,
                         in->spec.skip_bad, in->train_threads, &in->train_pl, err, errlen);
}

void ps_input_close(ps_input *in) {
    ps_pipeline_close(in->train_pl);
    ps_pipeline_close(in->val_pl);
    ps_pipeline_close(in->test_pl);
    if (in->val_src != in->train_src) ps_source_close(in->val_src);
    ps_source_close(in->train_src);
    ps_source_close(in->test_src);
    free(in->train_recs), free(in->val_recs), free(in->test_recs);
    ps_prep_free(in->prep), ps_prep_free(in->eval_prep);
    ps_dataset_free(&in->train);
    ps_dataset_free(&in->test);
    ps_data_spec_free(&in->spec);
    if (in->have_test_spec) ps_data_spec_free(&in->test_spec);
    memset(in, 0, sizeof *in);
}

bool ps_input_has(const ps_input *in, ps_input_set set) {
    return set == PS_INPUT_VALIDATION ? in->val_pl != NULL : (in->test_pl || in->test.n > 0);
}

/* One batch into the running figures: the model's outputs (for the AUC) when wanted. */
static int eval_batch(ps_model *m, const float *x, const int32_t *y, const float *t, size_t nb,
                      float **out, size_t *out_cap, ps_auc *auc, double *sum, double *sq,
                      size_t *hits) {
    float l = 0;
    size_t c = 0;
    double s = 0;
    float *o = NULL;
    if (auc) { /* one output (ps_model_wants_auc) */
        if (nb > *out_cap) {
            float *g = realloc(*out, nb * sizeof *g);
            if (!g) return PS_ENOMEM;
            *out = g, *out_cap = nb;
        }
        o = *out;
    }
    int rc = t ? ps_model_evaluate_targets(m, x, t, nb, &l, &s, o)
               : ps_model_evaluate_out(m, x, y, nb, &l, &c, o);
    if (rc == PS_OK && auc) rc = t ? ps_auc_add_f(auc, o, t, nb) : ps_auc_add(auc, o, y, nb);
    *sum += (double)l * (double)nb;
    *sq += s;
    *hits += c;
    return rc;
}

int ps_input_evaluate(ps_input *in, ps_model *m, ps_input_set set, ps_input_rows_fn rows,
                      void *ctx, ps_eval_result *r, char *err, size_t errlen) {
    *r = (ps_eval_result){.auc = -1};
    ps_auc auc_acc = {0}, *auc = ps_model_wants_auc(m) ? &auc_acc : NULL;
    float *out = NULL;
    size_t out_cap = 0, hits = 0;
    double sum = 0, sq = 0;
    bool targets = false;
    int rc = PS_OK;
    if (set == PS_INPUT_TEST && !in->test_pl) {
        if (in->test.n)
            rc = eval_batch(m, in->test.x, in->test.y, NULL, in->test.n, &out, &out_cap, auc,
                            &sum, &sq, &hits);
        if (rc != PS_OK) snprintf(err, errlen, "evaluation failed: %s", ps_strerror(rc));
        r->n = in->test.n;
    } else {
        ps_pipeline *pl = set == PS_INPUT_TEST ? in->test_pl : in->val_pl;
        bool full = in->train_src && (in->train_src->n_ids || in->train_src->float_target);
        rc = ps_pipeline_start_epoch(pl, 0, 0);
        if (rc != PS_OK)
            snprintf(err, errlen, "evaluation: the input pipeline: %s", ps_strerror(rc));
        while (rc == PS_OK) {
            ps_pipeline_batch b;
            rc = ps_pipeline_next_batch(pl, &b, err, errlen);
            if (rc != PS_OK || b.nb == 0) break;
            /* ids or float targets: each batch's rows through `rows` first */
            if (full && rows && (rc = rows(ctx, b.ids, b.nb, err, errlen)) != PS_OK) break;
            const float *x = ps_model_input_dim(m) ? b.x : NULL;
            targets = full && b.float_targets;
            rc = eval_batch(m, x, b.y, targets ? b.targets : NULL, b.nb, &out, &out_cap, auc,
                            &sum, &sq, &hits);
            if (rc != PS_OK) snprintf(err, errlen, "evaluation failed: %s", ps_strerror(rc));
            r->n += b.nb;
        }
    }
    if (rc == PS_OK && r->n) {
        r->loss = (float)(sum / (double)r->n);
        r->acc = targets ? sqrt(sq / ((double)r->n * (double)ps_model_output_dim(m)))
                         : (double)hits / (double)r->n;
        if (auc) {
            r->auc = ps_auc_value(auc);
            if (r->auc == -2) {
                snprintf(err, errlen, "evaluation: out of memory for the AUC");
                rc = PS_ENOMEM;
            }
        }
    }
    if (auc) ps_auc_free(auc);
    free(out);
    return rc;
}
