/* The worker's training loop (see train.h). */
#include "train.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accumulate.h"
#include "data.h"
#include "elastic.h"
#include "emb_feed.h"
#include "exchange.h"
#include "export.h"
#include "half.h"
#include "input.h"
#include "job_metrics.h"
#include "keras_file.h"
#include "kernels.h"
#include "log.h"
#include "loss_scale.h"
#include "model.h"
#include "optim.h"
#include "ps.h"
#include "saved_model.h"
#include "ps_error.h"
#include "resume.h"
#include "tensorfile.h"
#include "train_log.h"

const char *ps_strategy_name(int strategy) {
    static const char *const names[] = {"parameter_server", "mirrored", "multi_worker_mirrored"};
    return strategy >= 0 && strategy <= PS_STRATEGY_MULTI_WORKER_MIRRORED ? names[strategy] : "?";
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int write_summary(const ps_train_config *cfg, const ps_train_result *res,
                         const ps_job_metrics *jm, char *err, size_t errlen) {
    cJSON *o = cJSON_CreateObject();
    if (res->test_rmse) { /* float targets: no accuracy */
        cJSON_AddNullToObject(o, "test_accuracy");
        cJSON_AddNumberToObject(o, "test_rmse", res->test_accuracy);
    } else {
        cJSON_AddNumberToObject(o, "test_accuracy", res->test_accuracy);
    if (res->test_auc >= 0) cJSON_AddNumberToObject(o, "test_auc", res->test_auc);
    }
    cJSON_AddNumberToObject(o, "test_loss", res->test_loss);
    cJSON_AddNumberToObject(o, "epochs", cfg->epochs);
    cJSON_AddNumberToObject(o, "steps", (double)res->steps);
    cJSON_AddStringToObject(o, "mode", res->async ? "async" : "sync");
    cJSON_AddStringToObject(o, "strategy", cfg->no_ps ? "local" : ps_strategy_name(cfg->strategy));
    cJSON_AddNumberToObject(o, "workers", cfg->workers);
    cJSON_AddNumberToObject(o, "shards", (double)cfg->n_ps);
    cJSON_AddNumberToObject(o, "samples_per_sec", res->samples_per_sec);
    cJSON_AddNumberToObject(o, "accumulate_steps",
                            cfg->accumulate_steps > 1 ? cfg->accumulate_steps : 1);
    cJSON_AddNumberToObject(o, "sync_every", cfg->sync_every > 1 ? cfg->sync_every : 1);
    cJSON_AddNumberToObject(o, "wall_seconds", res->wall_seconds);
    if (cfg->job_id) cJSON_AddStringToObject(o, "job_id", cfg->job_id);
    cJSON_AddStringToObject(o, "compression", ps_compression_name(cfg->compression));
    /* this worker's gradient bytes on the wire per step (pushes, or all-reduce frames) */
    if (res->bytes_sent_per_step >= 0)
        cJSON_AddNumberToObject(o, "bytes_sent_per_step", res->bytes_sent_per_step);
    cJSON_AddStringToObject(o, "dtype_policy",
                            ps_dtype_policy_name((ps_dtype_policy)res->dtype_policy));
    cJSON_AddNumberToObject(o, "params", (double)res->params);
    cJSON_AddNumberToObject(o, "trainable_params", (double)res->trainable_params);
    if (res->loss_scale > 0) { /* mixed_float16: this worker's scaler */
        cJSON_AddNumberToObject(o, "loss_scale", res->loss_scale);
        cJSON_AddNumberToObject(o, "skipped_steps", (double)res->skipped_steps);
    }
    /* shards whose lost variables were re-created with initial values (recovery flag) */
    cJSON *rec = cJSON_AddArrayToObject(o, "recreated_lost_variables");
    for (size_t i = 0; rec && i < res->n_recreated; i++)
        cJSON_AddItemToArray(rec, cJSON_CreateNumber(res->recreated[i]));
    /* the training loss and accuracy over all workers, per epoch (job_metrics.h) */
    char *text = ps_job_metrics_to_json(jm, o) == PS_OK ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!text) return PS_ENOMEM;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", cfg->summary_path);
    FILE *f = fopen(tmp, "w");
    int ok = f && fprintf(f, "%s\n", text) >= 0;
    if (f && fclose(f) != 0) ok = 0;
    free(text);
    if (!ok || rename(tmp, cfg->summary_path) != 0) {
        snprintf(err, errlen, "cannot write summary %s", cfg->summary_path);
        return PS_EIO;
    }
    return PS_OK;
}

typedef struct {
    ps_model *model;
    ps_k_dev *dev;
    ps_exchange ex; /* where the gradients go: psd, or the optimizer here (--no-ps) */
    ps_accum *acc;  /* --accumulate-steps N > 1: sums the micro-batches' gradients; else NULL */
    ps_input in;     /* the data: training batches, validation and test sets */
    float *x;        /* the current batch, borrowed from in.train_pl */
    int32_t *y;
    bool scaling;          /* mixed_float16: dynamic loss scaling */
    ps_loss_scale scaler;
    bool norm_armed;   /* this step's gradient norm is wanted (--tensorboard) */
    double grad_sumsq; /* its sum of squares so far; < 0: not known this step */
    ps_job_metrics jm;     /* per epoch: the training metrics, this worker's and the job's */
    bool full_batches;     /* the data has ids or float targets: ps_pipeline_next_batch */
    bool rmse;             /* float targets: the root mean squared error in place of accuracy */
    ps_emb_feed *feed;     /* the embedding layers' rows per batch (NULL: none) */
    ps_resume resume;      /* this worker's own state for an exact resume (resume.h) */
} train_state;

static void state_free(train_state *st) {
    ps_resume_free(&st->resume);
    ps_emb_feed_free(st->feed);
    ps_input_close(&st->in);
    ps_accum_free(st->acc);
    ps_exchange_free(&st->ex); /* before the model it borrows */
    ps_job_metrics_free(&st->jm);
    ps_model_free(st->model);
    ps_k_dev_close(st->dev);
}

/* --init-from: the saved model's tensors replace the seeded values; every
 * variable of the model must be there with the same size. */
static int init_from_file(ps_model *m, const char *path, const char *flag, char *err,
                          size_t errlen) {
    int rc = ps_saved_model_load(m, path, flag, err, errlen);
    if (rc == PS_OK) PS_INFO("initial values from %s", path);
    return rc;
}

/* A spec wrapping a .keras archive: the archive's variables that the model
 * has (by name); the others (a new head) keep their seeded values. */
static int init_by_name(ps_model *m, const char *archive, char *err, size_t errlen) {
    size_t copied = 0;
    int rc = ps_keras_load_weights_by_name(m, archive, &copied, err, errlen);
    if (rc == PS_OK)
        PS_INFO("initial values of %zu of %zu variables from %s (by name; the others seeded)",
                copied, ps_model_num_vars(m), archive);
    return rc;
}

/* --save: the model's current values (just pulled), one tensor per variable. */
static int save_model(ps_model *m, const char *path, uint64_t steps, char *err, size_t errlen) {
    size_t n = ps_model_num_vars(m);
    ps_tf_tensor *t = calloc(n ? n : 1, sizeof *t);
    if (!t) return PS_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const ps_model_var *v = ps_model_var_at(m, i);
        t[i] = (ps_tf_tensor){.name = v->name,
                              .rank = (uint32_t)v->rank,
                              .data = ps_model_params(m) + v->offset,
                              .numel = v->numel};
        for (int d = 0; d < v->rank; d++)
            t[i].shape[d] = v->shape[d];
    }
    ps_tf_header h = {.kind = PS_TF_MODEL, .meta = {ps_model_num_params(m), steps}};
    char why[300];
    int rc = ps_tf_write(path, &h, t, n, why, sizeof why);
    free(t);
    if (rc != PS_OK)
        snprintf(err, errlen, "--save %s: %s", path, why);
    else
        PS_INFO("saved the model to %s", path);
    return rc;
}

/* The model's gradient hook: the exchange hears of each range of gradients
 * as it becomes final (psd: a shard's push-pull goes out once all of its are). */
static void grads_final(void *ctx, const float *begin, const float *end) {
    train_state *st = ctx;
    if (st->norm_armed) /* this worker's own gradient, before the exchange sees it */
        st->grad_sumsq += ps_train_log_grad_sumsq(st->model, begin, end);
    ps_exchange_grads_ready(&st->ex, begin, end);
}

/* The one place the exchange strategy is chosen; the loop only sees the
 * interface (exchange.h). --sync-every K > 1 wraps it in local SGD. */
static int open_exchange(const ps_train_config *cfg, ps_model *m, ps_exchange *ex, char *err,
                         size_t errlen) {
    if (ps_model_num_embeddings(m)) { /* what the embedding tables' row path has */
        /* the all-reduce strategies mirror a table that fits (mirror_tables.h) */
        const char *no = cfg->sync_every > 1          ? "--sync-every (local SGD)"
                         : cfg->accumulate_steps > 1 ? "--accumulate-steps"
                                                     : NULL;
        if (no) {
            snprintf(err, errlen, "a model with Embedding layers (%s, ...) cannot train with %s",
                     ps_model_embedding_at(m, 0)->name, no);
            return PS_EINVAL;
        }
    }
    if (cfg->no_ps) return ps_exchange_local_open(m, cfg->seed, ex, err, errlen);
    ps_exchange inner = {0};
    int rc = cfg->strategy != PS_STRATEGY_PARAMETER_SERVER
                 ? ps_exchange_collective_open(cfg, m, &inner, err, errlen)
                 : ps_exchange_ps_open(cfg, m, &inner, err, errlen);
    if (rc != PS_OK || cfg->sync_every <= 1) {
        *ex = inner;
        return rc;
    }
    return ps_exchange_localsgd_open(cfg, m, &inner, ex, err, errlen);
}

/* --epochs when given, else the spec's "epochs", else the default; logged. */
static unsigned pick_epochs(const ps_train_config *cfg, const ps_model *m) {
    unsigned e = cfg->epochs;
    const char *from = "--epochs";
    if (!e && ps_model_epochs(m)) {
        e = (unsigned)ps_model_epochs(m);
        from = "the model spec's \"epochs\"";
    } else if (!e) {
        e = PS_TRAIN_DEFAULT_EPOCHS;
        from = "the default: no --epochs, no \"epochs\" in the model spec";
    }
    if (cfg->index == 0) PS_INFO("epochs: %u (%s)", e, from);
    return e;
}

/* --dtype-policy over the spec's; mixed_float16 turns loss scaling on. */
static int setup_policy(const ps_train_config *cfg, train_state *st, char *err, size_t errlen) {
    ps_model *m = st->model;
    if (cfg->dtype_policy) {
        ps_dtype_policy p;
        int rc = ps_dtype_policy_parse(cfg->dtype_policy, &p, err, errlen);
        if (rc != PS_OK) return rc;
        ps_model_set_dtype_policy(m, p);
    }
    ps_dtype_policy p = ps_model_dtype_policy(m);
    st->scaling = p == PS_POLICY_MIXED_FLOAT16;
    if (cfg->inject_overflow_at_step && !st->scaling) {
        snprintf(err, errlen, "--inject-overflow-at-step needs the mixed_float16 policy (loss "
                              "scaling)");
        return PS_EINVAL;
    }
    if (st->scaling) {
        ps_loss_scale_init(&st->scaler);
        ps_model_set_loss_scale(m, st->scaler.scale);
    }
    if (p != PS_POLICY_FLOAT32 && cfg->index == 0)
        PS_INFO("dtype policy %s (%s): layers compute in %s, variables float32%s",
                ps_dtype_policy_name(p), cfg->dtype_policy ? "--dtype-policy" : "the model",
                p == PS_POLICY_MIXED_FLOAT16 ? "float16" : "bfloat16",
                st->scaling ? "; dynamic loss scaling from 2^15" : "");
    return PS_OK;
}

/* Frozen layers (trainable: false): something must still train, and their
 * values should come from a file (seeded values frozen are legal but rarely
 * meant: said). */
static int check_frozen(const ps_model *m, const char *init, char *err, size_t errlen) {
    size_t all = ps_model_num_params(m), live = ps_model_num_updated_params(m);
    if (live == all) return PS_OK;
    size_t nf = 0;
    for (size_t i = 0; i < ps_model_num_vars(m); i++)
        nf += ps_model_var_at(m, i)->frozen;
    if (ps_model_num_trainable_params(m) == 0) {
        snprintf(err, errlen,
                 "every layer with weights is frozen (trainable: false): nothing would train");
        return PS_EINVAL;
    }
    PS_INFO("%zu frozen variables (%zu parameters) are not trained or exchanged%s", nf,
            all - live, init ? "" : "; they keep their seeded initial values (no --init-from)");
    return PS_OK;
}

static int setup(const ps_train_config *cfg, train_state *st, size_t *batch, unsigned *epochs,
                 char *err, size_t errlen) {
    if (!cfg->model_path && cfg->loss) {
        snprintf(err, errlen, "--loss applies to a Keras model file given with --model");
        return PS_EINVAL;
    }
    ps_model_overrides ov = {.loss = cfg->loss, .from_logits = -1};
    int rc = cfg->model_path
                 ? ps_model_open(cfg->model_path, &ov, &st->model, err, errlen)
                 : ps_model_from_json(ps_model_default_spec(), &st->model, err, errlen);
    if (rc != PS_OK) return rc;
    rc = setup_policy(cfg, st, err, errlen);
    if (rc != PS_OK) return rc;
    *epochs = pick_epochs(cfg, st->model);
    ps_model_init_params(st->model, cfg->seed);
    /* a .keras archive given to --model brings its weights, unless --init-from says otherwise */
    const char *init = cfg->init_from;
    if (!init && cfg->model_path && ps_keras_kind_of(cfg->model_path) == PS_KERAS_ARCHIVE)
        init = cfg->model_path;
    const char *flag = cfg->init_from ? "--init-from" : "--model";
    /* the others get the chief's values from psd or the ring; frozen variables
     * never travel (docs/TRAINING.md, "Transfer learning"): every worker reads them */
    bool frozen = ps_model_num_updated_params(st->model) < ps_model_num_params(st->model);
    if (init && (cfg->index == 0 || frozen) &&
        (rc = init_from_file(st->model, init, flag, err, errlen)) != PS_OK)
        return rc;
    char base[4096];
    if (!init && cfg->model_path && ps_keras_wrapped_archive(cfg->model_path, base, sizeof base)) {
        init = base; /* a base's weights under a new head: by name */
        if ((cfg->index == 0 || frozen) && (rc = init_by_name(st->model, base, err, errlen)))
            return rc;
    }
    if ((rc = check_frozen(st->model, init, err, errlen)) != PS_OK) return rc;
    /* every worker draws its own dropout masks */
    ps_model_set_dropout_seed(st->model, cfg->seed ^ (0x5851F42D4C957F2Dull * (cfg->index + 1)));
    rc = ps_k_dev_open(cfg->device ? cfg->device : "auto", &st->dev, err, errlen);
    if (rc == PS_OK) rc = ps_model_set_device(st->model, st->dev, err, errlen);
    if (rc != PS_OK) return rc;
    PS_INFO("computing on %s", ps_k_dev_name(st->dev));
    size_t all = ps_model_num_params(st->model), tr = ps_model_num_trainable_params(st->model);
    PS_INFO("model '%s': %zu parameters: %zu trainable, %zu non-trainable", ps_model_name(st->model),
            all, tr, all - tr);
    *batch = cfg->batch ? cfg->batch : ps_model_batch_size(st->model);
    rc = ps_input_open(&st->in, cfg, st->model, *batch, err, errlen);
    if (rc != PS_OK) return rc;
    rc = open_exchange(cfg, st->model, &st->ex, err, errlen);
    if (rc != PS_OK) return rc;
    PS_DEBUG("exchange: %s", st->ex.ops->name);
    if (st->in.train_src && (st->in.train_src->n_ids || st->in.train_src->float_target)) {
        st->full_batches = true;
        st->rmse = st->in.train_src->float_target;
        if (cfg->accumulate_steps > 1) {
            snprintf(err, errlen, "--accumulate-steps: not with data of ids or float targets");
            return PS_EINVAL;
        }
    }
    rc = ps_emb_feed_new(st->model, st->in.train_src ? st->in.train_src->n_ids : 0, &st->feed,
                         err, errlen);
    if (rc != PS_OK) return rc;
    if (cfg->accumulate_steps > 1 && ps_accum_new(st->model, &st->ex, &st->acc) != PS_OK) {
        snprintf(err, errlen, "--accumulate-steps: no memory for the gradient sums");
        return PS_ENOMEM;
    }
    if (!st->acc) ps_model_set_grad_hook(st->model, grads_final, st);
    return PS_OK;
}

/* An evaluation batch's embedding rows: the job's current ones. */
static int eval_rows(void *ctx, const uint64_t *ids, size_t nb, char *err, size_t errlen) {
    train_state *st = ctx;
    return ps_emb_feed_rows(st->feed, st->model, &st->ex, ids, nb, err, errlen);
}

/* Chief: brings the values to evaluate (the exchange's eval_sync: newest =
 * 0, those at the end of the epoch; 1, the newest) and evaluates them on the
 * set. */
static int evaluate(train_state *st, ps_input_set set, int newest, uint64_t clock, uint64_t want,
                    ps_eval_result *r, char *err, size_t errlen) {
    *r = (ps_eval_result){.auc = -1};
    int rc = ps_exchange_eval_sync(&st->ex, newest, clock, want, err, errlen);
    if (rc == PS_OK)
        rc = ps_input_evaluate(&st->in, st->model, set, st->feed ? eval_rows : NULL, st, r, err,
                               errlen);
    return rc;
}

static void sleep_ms(unsigned ms) {
    nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000L}, NULL);
}

/* Loss scaling: the gradients come out of the step multiplied by the scale;
 * divided here (the trainable ones: the moving statistics' slots are not
 * scaled) and checked for inf / NaN (all), then the strategy decides the step
 * (ps_exchange_step_end_checked) and the scaler follows its outcome. */
static int scaled_step_end(const ps_train_config *cfg, train_state *st, uint64_t clock, char *err,
                           size_t errlen) {
    ps_model *m = st->model;
    float *g = ps_model_grads(m);
    if (cfg->inject_overflow_at_step && clock + 1 == cfg->inject_overflow_at_step) {
        g[0] = INFINITY; /* fault injection for tests: as an fp16 overflow would */
        PS_WARN("--inject-overflow-at-step %llu: an inf in this worker's gradient",
                (unsigned long long)(clock + 1));
    }
    bool finite = true;
    for (size_t i = 0; i < ps_model_num_vars(m); i++) {
        const ps_model_var *v = ps_model_var_at(m, i);
        if (v->trainable)
            finite &= ps_loss_scale_unscale(&st->scaler, g + v->offset, v->numel);
        else
            finite &= ps_all_finite(g + v->offset, v->numel);
    }
    if (st->norm_armed) { /* unscaled, before the exchange */
        float *end = g + ps_model_num_params(m);
        st->grad_sumsq = ps_train_log_grad_sumsq(m, g, end);
    }
    int skipped = 0;
    int rc = ps_exchange_step_end_checked(&st->ex, !finite, &skipped, err, errlen);
    if (rc != PS_OK) return rc;
    float before = st->scaler.scale;
    ps_loss_scale_update(&st->scaler, !skipped);
    if (skipped)
        PS_INFO("step %llu: %s gradients held an inf or NaN: step skipped, loss scale %g -> %g",
                (unsigned long long)(clock + 1),
                !cfg->no_ps && cfg->strategy != PS_STRATEGY_PARAMETER_SERVER ? "the all-reduced"
                                                                              : "this worker's",
                (double)before, (double)st->scaler.scale);
    else if (st->scaler.scale != before)
        PS_DEBUG("loss scale %g -> %g after %u good steps", (double)before,
                 (double)st->scaler.scale, st->scaler.period);
    ps_model_set_loss_scale(m, st->scaler.scale);
    return PS_OK;
}

/* train_one for data with ids or float targets (one micro-batch): the batch's
 * embedding rows come through the exchange before the step, and their
 * gradients go back before the dense ones (step_end). */
static int train_one_batch(const ps_train_config *cfg, train_state *st, uint64_t clock,
                           float *loss, size_t *correct, size_t *samples, char *err,
                           size_t errlen) {
    ps_pipeline_batch b;
    size_t hits = 0;
    float l = 0;
    *samples = *correct = 0;
    int rc = ps_pipeline_next_batch(st->in.train_pl, &b, err, errlen);
    if (rc != PS_OK) return rc;
    if (!b.nb) {
        snprintf(err, errlen, "the input ran out of batches within the epoch");
        return PS_EINVAL;
    }
    rc = ps_emb_feed_rows(st->feed, st->model, &st->ex, b.ids, b.nb, err, errlen);
    if (rc != PS_OK) return rc;
    const float *x = ps_model_input_dim(st->model) ? b.x : NULL;
    rc = b.float_targets ? ps_model_train_step_targets(st->model, x, b.targets, b.nb, &l)
                         : ps_model_train_step(st->model, x, b.y, b.nb, &l, &hits);
    if (rc != PS_OK) {
        snprintf(err, errlen, "training step failed: %s", ps_strerror(rc));
        return rc;
    }
    rc = ps_emb_feed_push(st->feed, st->model, &st->ex, err, errlen);
    if (rc != PS_OK) return rc;
    *loss = l, *samples = b.nb, *correct = hits;
    if (!st->scaling) return ps_exchange_step_end(&st->ex, err, errlen);
    return scaled_step_end(cfg, st, clock, err, errlen);
}

/* One training step: the exchange makes the parameters the step's (psd: a
 * pull, unless the last step's exchange brought the values back), then
 * forward/backward on each of its `micro` micro-batches (--accumulate-steps;
 * the hook passes on the final gradients of the last), then the exchange
 * applies or sends the gradients. *loss: the mean over the step's *samples;
 * *correct: its hits. */
static int train_one(const ps_train_config *cfg, train_state *st, uint64_t clock, size_t micro,
                     float *loss, size_t *correct, size_t *samples, char *err, size_t errlen) {
    int rc = ps_exchange_step_begin(&st->ex, clock, err, errlen);
    if (rc != PS_OK) return rc;
    if (cfg->slow_ms) sleep_ms(cfg->slow_ms); /* a slow worker: slow to compute */
    double loss_sum = 0;
    *samples = *correct = 0;
    if (st->full_batches) return train_one_batch(cfg, st, clock, loss, correct, samples, err,
                                                 errlen);
    for (size_t i = 0; i < micro; i++) {
        size_t nb = 0, hits = 0;
        float l = 0;
        rc = ps_pipeline_next(st->in.train_pl, &st->x, &st->y, &nb, err, errlen);
        if (rc != PS_OK) return rc;
        rc = !nb     ? PS_EINVAL
             : st->acc ? ps_accum_micro_step(st->acc, st->x, st->y, nb, i == 0, i + 1 == micro,
                                             &l, &hits)
                       : ps_model_train_step(st->model, st->x, st->y, nb, &l, &hits);
        if (rc != PS_OK) {
            snprintf(err, errlen, "training step failed: %s", ps_strerror(rc));
            return rc;
        }
        loss_sum += (double)l * (double)nb;
        *samples += nb;
        *correct += hits;
    }
    *loss = (float)(loss_sum / (double)*samples);
    if (!st->scaling) return ps_exchange_step_end(&st->ex, err, errlen);
    return scaled_step_end(cfg, st, clock, err, errlen);
}

/* The one place that feeds an epoch's values to the logs (--tensorboard,
 * --history): the job-wide training loss and accuracy (epoch_metrics: summed
 * over the workers, job_metrics.h), else, when they were not combined, the
 * chief's own over its shard; and its test-set evaluation as the val_ metrics. */
static int log_epoch(ps_train_log *log, train_state *st, const ps_progress *prog, unsigned epoch,
                     uint64_t clock, const ps_eval_result *val, char *err, size_t errlen) {
    ps_job_values job;
    int combined = ps_job_metrics_get(&st->jm, epoch, &job);
    ps_log_epoch e = {.epoch = epoch,
                          .loss = combined ? job.loss : ps_progress_loss(prog),
                          .accuracy = combined ? job.accuracy : ps_progress_accuracy(prog),
                          .metric = st->rmse ? "rmse" : "accuracy",
                          .has_val = val != NULL,
                          .val_loss = val ? val->loss : 0,
                          .val_accuracy = val ? val->acc : 0,
                          .val_auc = val ? val->auc : -1,
                          .learning_rate = ps_optim_lr(ps_model_optimizer(st->model), clock)};
    return ps_train_log_epoch(log, &e, st->model, err, errlen);
}

/* The batch_ tags after step `clock` (1-based) of nb samples: the rate the
 * update used (Keras evaluates its schedule at the step count before it). */
static int log_batch(ps_train_log *log, train_state *st, uint64_t clock, float loss,
                     size_t correct, size_t nb, double samples_per_sec, char *err,
                     size_t errlen) {
    ps_batch_metrics b = {.step = clock,
                          .loss = loss,
                          .accuracy = nb ? (double)correct / (double)nb : 0,
                          .learning_rate = ps_optim_lr(ps_model_optimizer(st->model), clock - 1),
                          .samples_per_sec = samples_per_sec,
                          .grad_norm = st->norm_armed ? sqrt(st->grad_sumsq) : -1};
    return ps_train_log_batch(log, &b, err, errlen);
}

/* After an epoch's steps: this worker's sums (logged, one line), combined over
 * the job by the exchange and recorded (st->jm); the chief's progress line
 * shows the job's. */
static int epoch_metrics(const ps_train_config *cfg, train_state *st, ps_progress *prog,
                         unsigned epoch, char *err, size_t errlen) {
    ps_metric_sums mine = {prog->loss_sum, prog->correct, prog->samples};
    PS_INFO("epoch %u/%u: this worker's loss %.9g - accuracy %.9g over %zu samples (%zu correct)",
            epoch + 1, cfg->epochs, ps_metric_loss(&mine), ps_metric_accuracy(&mine),
            prog->samples, prog->correct);
    ps_job_epoch *e = ps_job_metrics_begin(&st->jm, epoch, cfg->index, &mine);
    int rc = e ? ps_exchange_reduce_metrics(&st->ex, e, err, errlen) : PS_OK;
    if (rc != PS_OK || !e) return rc;
    ps_job_metrics_commit(&st->jm, epoch);
    if (cfg->index != 0) return PS_OK;
    double loss = ps_metric_loss(&e->total), acc = ps_metric_accuracy(&e->total);
    ps_progress_set_final(prog, loss, acc);
    if (cfg->workers > 1)
        PS_INFO("epoch %u/%u: job-wide loss %.9g - accuracy %.9g over %llu samples (%u of %u "
                "workers)",
                epoch + 1, cfg->epochs, loss, acc, (unsigned long long)e->total.samples,
                e->reported, cfg->workers);
    return PS_OK;
}

int ps_train_run(const ps_train_config *cfg, ps_train_result *res, char *err, size_t errlen) {
    double t0 = now_s();
    memset(res, 0, sizeof *res);
    res->test_accuracy = res->test_loss = res->test_auc = -1;
    train_state st = {0};
    size_t batch = 0;
    unsigned epochs = 0;
    int rc = setup(cfg, &st, &batch, &epochs, err, errlen);
    ps_train_config run = *cfg; /* with the epochs chosen */
    run.epochs = epochs;
    cfg = &run;
    if (rc == PS_OK && ps_job_metrics_init(&st.jm, epochs, cfg->workers) != PS_OK) {
        snprintf(err, errlen, "out of memory for the epochs' metrics");
        rc = PS_ENOMEM;
    }
    /* a step takes N micro-batches (--accumulate-steps), the epoch's last step the
     * remainder: an epoch still covers the data once */
    size_t accum = cfg->accumulate_steps > 1 ? cfg->accumulate_steps : 1;
    size_t micro_per_epoch = rc == PS_OK ? ps_pipeline_steps_per_epoch(st.in.train_pl) : 0;
    size_t steps = (micro_per_epoch + accum - 1) / accum;
    if (cfg->max_steps && steps > cfg->max_steps) steps = cfg->max_steps;
    uint64_t total = (uint64_t)steps * cfg->epochs;
    /* Where the job is: a worker (re)starting into a running job continues at
     * the current epoch of its data shard. clock >= total: the job has ended (a
     * restarted chief still evaluates); sync, past total only when backup
     * workers or a laggard closed steps alone. */
    ps_exchange_job job = {.total_steps = total,
                           .steps_per_epoch = steps,
                           .recreated = res->recreated,
                           .recreated_cap = PS_TRAIN_MAX_RECREATED,
                           .scaler = st.scaling ? &st.scaler : NULL};
    if (rc == PS_OK) rc = ps_exchange_join(&st.ex, &job, err, errlen);
    res->async = job.async;
    res->n_recreated = job.n_recreated;
    int async = job.async;
    uint64_t clock = job.clock;
    if (rc != PS_OK) clock = 0;
    if (clock > total) clock = total;
    /* resumed: this worker's own state, and the dropout masks go on where they were */
    if (rc == PS_OK)
        rc = ps_resume_open(&st.resume, cfg, &st.ex, st.scaling ? &st.scaler : NULL, err, errlen);
    if (rc == PS_OK) {
        ps_resume_load(&st.resume, clock);
        ps_model_set_train_steps(st.model,
                                 ps_resume_micro_batches(clock, steps, accum, micro_per_epoch));
    }
    if (st.scaling) { /* the scale may come from a checkpoint or this worker's state */
        ps_model_set_loss_scale(st.model, st.scaler.scale);
        if (rc == PS_OK && clock > 0)
            PS_INFO("loss scale %g (%u good steps) after step %llu", (double)st.scaler.scale,
                    st.scaler.good_steps, (unsigned long long)clock);
    }
    unsigned first_epoch = steps ? (unsigned)(clock / steps) : 0;
    size_t first_step = steps ? (size_t)(clock % steps) : 0;
    if (rc == PS_OK && clock > 0)
        PS_INFO("joining a running job: epoch %u, step %zu of %zu", first_epoch + 1, first_step,
                steps);
    if (rc == PS_OK && cfg->index == 0 && accum > 1)
        PS_INFO("%s training: %u workers x batch %zu x %zu accumulated micro-batches = global "
                "batch %zu; %zu samples per worker, %zu steps per epoch",
                async ? "async" : "sync", cfg->workers, batch, accum,
                batch * accum * cfg->workers, ps_pipeline_epoch_records(st.in.train_pl), steps);
    else if (rc == PS_OK && cfg->index == 0)
        PS_INFO("%s training: %u workers x batch %zu = global batch %zu; %zu samples per worker",
                async ? "async" : "sync", cfg->workers, batch, batch * cfg->workers,
                ps_pipeline_epoch_records(st.in.train_pl));

    /* the chief's per-epoch evaluation (Keras' val_ metrics): the validation
     * set, else the test set */
    int vset = rc != PS_OK || cfg->index != 0                   ? -1
               : ps_input_has(&st.in, PS_INPUT_VALIDATION) ? PS_INPUT_VALIDATION
               : ps_input_has(&st.in, PS_INPUT_TEST)       ? PS_INPUT_TEST
                                                           : -1;
    ps_train_log *tlog = NULL;
    if (rc == PS_OK && cfg->index == 0)
        rc = ps_train_log_open(cfg->tensorboard_dir, cfg->history_path, first_epoch, &tlog, err,
                               errlen);
    unsigned tb_every = tlog && cfg->tensorboard_dir ? cfg->tensorboard_every : 0;
    ps_progress prog;
    ps_progress_init(&prog, cfg->progress, stdout, cfg->epochs, cfg->workers);
    prog.rmse = st.rmse;
    res->test_rmse = st.rmse;
    double train_secs = 0;
    size_t job_samples = 0;
    int stopped = 0; /* cfg->stop was seen */
    ps_elastic elastic = {.rank = cfg->index,
                          .count = cfg->workers,
                          .steps = micro_per_epoch,
                          .batch = batch};
    for (unsigned epoch = first_epoch; rc == PS_OK && epoch < cfg->epochs; epoch++) {
        size_t s0 = epoch == first_epoch ? first_step : 0;
        /* skips what the job already did this epoch */
        if (cfg->elastic) {
            rc = ps_elastic_start_epoch(&elastic, cfg, &st.in, st.model, &st.ex, epoch, s0,
                                        err, errlen);
            if (rc != PS_OK) break;
        } else {
            rc = ps_pipeline_start_epoch(st.in.train_pl, epoch, s0 * accum);
            if (rc != PS_OK) {
                snprintf(err, errlen, "the input pipeline: %s", ps_strerror(rc));
                break;
            }
        }
        ps_progress_begin_epoch(&prog, epoch, steps - s0);
        double te = now_s(), tb_t = te;
        size_t tb_samples = 0; /* job-wide, since tb_t */
        for (size_t s = s0; s < steps; s++) {
            size_t left = micro_per_epoch - s * accum, micro = left < accum ? left : accum;
            float loss = 0;
            size_t correct = 0, nb = 0;
            bool tb_step = tb_every && (clock + 1) % tb_every == 0;
            st.norm_armed = tb_step && !st.acc; /* accumulation: the sum is not this step's */
            st.grad_sumsq = 0;
            if (cfg->stop && *cfg->stop) { /* before the step: none is left half done */
                snprintf(err, errlen, "stopped by SIGTERM at step %llu of %llu: said goodbye",
                         (unsigned long long)clock, (unsigned long long)total);
                rc = PS_ESHUTDOWN;
                stopped = 1;
                break;
            }
            rc = train_one(cfg, &st, clock, micro, &loss, &correct, &nb, err, errlen);
            if (rc != PS_OK) break;
            clock++;
            res->steps++;
            ps_resume_step_done(&st.resume, clock, s + 1 == steps);
            job_samples += nb * cfg->workers;
            tb_samples += nb * cfg->workers;
            ps_progress_step(&prog, loss, nb, correct);
            if (tb_step) {
                double t = now_s();
                rc = log_batch(tlog, &st, clock, loss, correct, nb,
                               t > tb_t ? (double)tb_samples / (t - tb_t) : 0, err, errlen);
                if (rc != PS_OK) break;
                tb_t = t, tb_samples = 0;
            }
        }
        train_secs += now_s() - te;
        char first[512];
        uint64_t skipped =
            st.in.train_pl ? ps_pipeline_skipped(st.in.train_pl, first, sizeof first) : 0;
        if (skipped)
            PS_WARN("input: %llu unreadable records skipped so far (the data spec's \"on_error\": "
                    "\"skip\"), the first: %s",
                    (unsigned long long)skipped, first);
        if (rc == PS_OK) rc = epoch_metrics(cfg, &st, &prog, epoch, err, errlen);
        if (rc != PS_OK) break;
        char extra[128] = "";
        ps_eval_result val = {.auc = -1};
        if (cfg->index == 0 && vset >= 0) {
            uint64_t want = (uint64_t)(epoch + 1) * steps * cfg->workers;
            rc = evaluate(&st, (ps_input_set)vset, 0, clock, want, &val, err, errlen);
            if (rc != PS_OK) break;
            if (vset == PS_INPUT_TEST)
                res->test_loss = val.loss, res->test_accuracy = val.acc, res->test_auc = val.auc;
            int k = snprintf(extra, sizeof extra, "val_loss: %.4f - val_%s: %.4f",
                             (double)val.loss, st.rmse ? "rmse" : "accuracy", val.acc);
            if (val.auc >= 0 && k > 0 && (size_t)k < sizeof extra)
                snprintf(extra + k, sizeof extra - (size_t)k, " - val_auc: %.4f", val.auc);
        }
        if (tlog)
            rc = log_epoch(tlog, &st, &prog, epoch, clock, vset >= 0 ? &val : NULL, err, errlen);
        ps_progress_end_epoch(&prog, extra);
        if (rc != PS_OK) break;
    }
    /* gradient bytes on the wire per step, before finish's own messages */
    res->bytes_sent_per_step = -1;
    if (st.ex.ops && st.ex.ops->bytes_sent && res->steps)
        res->bytes_sent_per_step =
            (double)st.ex.ops->bytes_sent(st.ex.self) / (double)res->steps;
    if (res->bytes_sent_per_step >= 0)
        PS_INFO("gradients sent: %.0f bytes per step (--compression %s)",
                res->bytes_sent_per_step, ps_compression_name(cfg->compression));
    if (rc == PS_OK && cfg->index == 0 && res->test_accuracy < 0 &&
        ps_input_has(&st.in, PS_INPUT_TEST)) {
        /* the test set after a validation set, or started after the last epoch
         * had ended: evaluate what the job made */
        ps_eval_result t;
        rc = evaluate(&st, PS_INPUT_TEST, 1, clock, 0, &t, err, errlen);
        res->test_loss = t.loss;
        res->test_accuracy = t.acc;
        res->test_auc = t.auc;
    }
    if (rc == PS_OK && cfg->index == 0 && cfg->save_path)
        rc = save_model(st.model, cfg->save_path, clock, err, errlen);
    if (rc == PS_OK && cfg->index == 0 && cfg->export_path) {
        rc = ps_export_model_from(st.model, cfg->model_path, cfg->export_path, err, errlen);
        if (rc == PS_OK) PS_INFO("exported the model to %s", cfg->export_path);
    }
    if (rc == PS_OK || stopped) ps_exchange_finish(&st.ex);
    if (rc != PS_OK) res->peer_failed = ps_exchange_peer_failed(&st.ex);
    res->samples_per_sec = train_secs > 0 ? (double)job_samples / train_secs : 0;
    if (st.model) res->dtype_policy = (int)ps_model_dtype_policy(st.model);
    if (st.model) res->params = ps_model_num_params(st.model);
    if (st.model) res->trainable_params = ps_model_num_trainable_params(st.model);
    res->loss_scale = st.scaling ? st.scaler.scale : 0.0f;
    res->skipped_steps = st.scaling ? st.scaler.skipped : 0;
    res->wall_seconds = now_s() - t0;
    if (rc == PS_OK && cfg->index == 0) {
        char where[64];
        if (cfg->no_ps || cfg->strategy == PS_STRATEGY_PARAMETER_SERVER)
            snprintf(where, sizeof where, "%zu shards", cfg->n_ps);
        else
            snprintf(where, sizeof where, "%s", ps_strategy_name(cfg->strategy));
        char figures[128] = "no test set (--test-data names one)";
        if (res->test_accuracy >= 0) {
            int k = snprintf(figures, sizeof figures, "test %s: %.4f  test loss: %.4f",
                             st.rmse ? "RMSE" : "accuracy", res->test_accuracy, res->test_loss);
            if (res->test_auc >= 0 && k > 0 && (size_t)k < sizeof figures)
                snprintf(figures + k, sizeof figures - (size_t)k, "  test AUC: %.4f",
                         res->test_auc);
        }
        printf("%s  (%u workers, %s, %s, %.0f samples/s, %.1f s)\n", figures, cfg->workers, where,
               async ? "async" : "sync", res->samples_per_sec, res->wall_seconds);
        fflush(stdout);
        for (size_t i = 0; i < res->n_recreated; i++)
            PS_WARN("psd %u's variables were re-created with their initial values during this "
                    "job (--recreate-lost-variables): that part of the model started over",
                    res->recreated[i]);
        if (cfg->summary_path) rc = write_summary(cfg, res, &st.jm, err, errlen);
    }
    if (ps_train_log_close(tlog) != PS_OK && rc == PS_OK) {
        snprintf(err, errlen, "--tensorboard: cannot write the event files under %s",
                 cfg->tensorboard_dir);
        rc = PS_EIO;
    }
    state_free(&st);
    return rc;
}
