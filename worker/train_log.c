/* The chief's training logs: TensorBoard event files and the History file
 * (see train_log.h). */
#include "train_log.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "ps_error.h"
#include "tb_events.h"

#define HISTOGRAM_BUCKETS 30

struct ps_train_log {
    int tb; /* event files open */
    ps_tb_file train, val;
    char *history_path; /* NULL: none */
    cJSON *history;     /* {"loss": [...], ...} */
};

static int write_history(ps_train_log *l, char *err, size_t errlen);

/* The History of a resumed job: the file's first `epochs` entries of each list;
 * NULL (said why) when it is unreadable or any list is shorter. */
static cJSON *history_resumed(const char *path, unsigned epochs) {
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    long len = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (text = malloc((size_t)len + 1)) && fread(text, 1, (size_t)len, f) == (size_t)len)
        text[len] = '\0';
    else
        free(text), text = NULL;
    if (f) fclose(f);
    cJSON *h = text ? cJSON_Parse(text) : NULL;
    free(text);
    const char *why = !f                   ? "it cannot be read"
                      : !cJSON_IsObject(h) ? "it is not a JSON object"
                      : !h->child          ? "it holds no epochs"
                                           : NULL;
    cJSON *lists = why ? NULL : h, *list;
    cJSON_ArrayForEach(list, lists) {
        if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) < (int)epochs) {
            why = "it holds fewer epochs than the job has done";
            break;
        }
        while (cJSON_GetArraySize(list) > (int)epochs)
            cJSON_DeleteItemFromArray(list, (int)epochs);
    }
    if (why) {
        PS_WARN("--history %s: %s; the job resumes at epoch %u, and the file starts again without "
                "the epochs before",
                path, why, epochs + 1);
        cJSON_Delete(h);
        return NULL;
    }
    return h;
}

int ps_train_log_open(const char *tb_dir, const char *history, unsigned first_epoch,
                      ps_train_log **out, char *err, size_t errlen) {
    *out = NULL;
    if (!tb_dir && !history) return PS_OK;
    ps_train_log *l = calloc(1, sizeof *l);
    if (!l) return PS_ENOMEM;
    int rc = PS_OK;
    if (tb_dir) {
        char d[4096];
        snprintf(d, sizeof d, "%s/train", tb_dir);
        rc = ps_tb_open(&l->train, d, err, errlen);
        if (rc == PS_OK) {
            snprintf(d, sizeof d, "%s/validation", tb_dir);
            rc = ps_tb_open(&l->val, d, err, errlen);
        }
        l->tb = 1;
        if (rc != PS_OK) { /* the reason names the path */
            char why[512];
            snprintf(why, sizeof why, "%s", err);
            snprintf(err, errlen, "--tensorboard: %s", why);
        }
    }
    if (rc == PS_OK && history) {
        l->history_path = strdup(history);
        l->history = first_epoch ? history_resumed(history, first_epoch) : NULL;
        if (!l->history) l->history = cJSON_CreateObject();
        if (!l->history_path || !l->history) rc = PS_ENOMEM;
        /* {} until the first epoch, as Keras' History (its lists are made then, named
         * after the metrics), or the epochs before a resume; a bad path fails now */
        if (rc == PS_OK) rc = write_history(l, err, errlen);
    }
    if (rc != PS_OK) {
        ps_train_log_close(l);
        return rc;
    }
    *out = l;
    return PS_OK;
}

int ps_train_log_batch(ps_train_log *l, const ps_batch_metrics *b, char *err, size_t errlen) {
    if (!l || !l->tb) return PS_OK;
    const char *tags[] = {"batch_loss", "batch_accuracy", "batch_learning_rate",
                          "batch_samples_per_sec", "batch_gradient_global_norm"};
    double v[] = {b->loss, b->accuracy, b->learning_rate, b->samples_per_sec, b->grad_norm};
    size_t n = b->grad_norm >= 0 ? 5 : 4;
    if (ps_tb_scalars(&l->train, (int64_t)b->step, 0, tags, v, n) != PS_OK) {
        snprintf(err, errlen, "--tensorboard: cannot write %s", l->train.path);
        return PS_EIO;
    }
    return PS_OK;
}

/* The variables' values as histograms, tag "<name>/histogram" (':' as '_', as Keras). */
static int histograms(ps_train_log *l, ps_model *m, int64_t step) {
    int rc = PS_OK;
    for (size_t i = 0; m && rc == PS_OK && i < ps_model_num_vars(m); i++) {
        const ps_model_var *v = ps_model_var_at(m, i);
        char tag[512];
        snprintf(tag, sizeof tag, "%s/histogram", v->name);
        for (char *c = tag; *c; c++)
            if (*c == ':') *c = '_';
        rc = ps_tb_histogram(&l->train, step, 0, tag, ps_model_params(m) + v->offset, v->numel,
                             HISTOGRAM_BUCKETS);
    }
    return rc;
}

/* Writes the History JSON beside the file, then renames it over. */
static int write_history(ps_train_log *l, char *err, size_t errlen) {
    char *text = cJSON_Print(l->history);
    if (!text) return PS_ENOMEM;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", l->history_path);
    FILE *f = fopen(tmp, "w");
    int ok = f && fprintf(f, "%s\n", text) >= 0;
    if (f && fclose(f) != 0) ok = 0;
    free(text);
    if (!ok || rename(tmp, l->history_path) != 0) {
        remove(tmp);
        snprintf(err, errlen, "--history: cannot write %s", l->history_path);
        return PS_EIO;
    }
    return PS_OK;
}

/* Appends v to the History's list under name (made on first use). */
static int history_add(cJSON *h, const char *name, double v) {
    cJSON *list = cJSON_GetObjectItem(h, name);
    if (!list && !(list = cJSON_AddArrayToObject(h, name))) return PS_ENOMEM;
    cJSON *x = cJSON_CreateNumber(v);
    if (!x) return PS_ENOMEM;
    cJSON_AddItemToArray(list, x);
    return PS_OK;
}

int ps_train_log_epoch(ps_train_log *l, const ps_log_epoch *e, ps_model *m, char *err,
                       size_t errlen) {
    if (!l) return PS_OK;
    const char *metric = e->metric ? e->metric : "accuracy";
    char tag[64], val_tag[64];
    snprintf(tag, sizeof tag, "epoch_%s", metric);
    snprintf(val_tag, sizeof val_tag, "val_%s", metric);
    bool auc = e->has_val && e->val_auc >= 0;
    if (l->tb) {
        const char *tt[] = {"epoch_loss", tag, "epoch_learning_rate"};
        double tv[] = {e->loss, e->accuracy, e->learning_rate};
        const char *vt[] = {"epoch_loss", tag, "epoch_auc"};
        double vv[] = {e->val_loss, e->val_accuracy, e->val_auc};
        int rc = ps_tb_scalars(&l->train, e->epoch, 0, tt, tv, 3);
        if (rc == PS_OK) rc = histograms(l, m, e->epoch);
        if (rc == PS_OK) rc = ps_tb_flush(&l->train);
        if (rc != PS_OK) {
            snprintf(err, errlen, "--tensorboard: cannot write %s", l->train.path);
            return PS_EIO;
        }
        if (e->has_val && (ps_tb_scalars(&l->val, e->epoch, 0, vt, vv, auc ? 3 : 2) != PS_OK ||
                           ps_tb_flush(&l->val) != PS_OK)) {
            snprintf(err, errlen, "--tensorboard: cannot write %s", l->val.path);
            return PS_EIO;
        }
    }
    if (!l->history) return PS_OK;
    int rc = history_add(l->history, "loss", e->loss);
    if (rc == PS_OK) rc = history_add(l->history, metric, e->accuracy);
    if (rc == PS_OK && e->has_val) rc = history_add(l->history, "val_loss", e->val_loss);
    if (rc == PS_OK && e->has_val) rc = history_add(l->history, val_tag, e->val_accuracy);
    if (rc == PS_OK && auc) rc = history_add(l->history, "val_auc", e->val_auc);
    if (rc != PS_OK) {
        snprintf(err, errlen, "--history: out of memory");
        return rc;
    }
    return write_history(l, err, errlen);
}

int ps_train_log_close(ps_train_log *l) {
    if (!l) return PS_OK;
    int rc = PS_OK;
    if (l->tb) {
        if (ps_tb_close(&l->train) != PS_OK) rc = PS_EIO;
        if (ps_tb_close(&l->val) != PS_OK) rc = PS_EIO;
    }
    cJSON_Delete(l->history);
    free(l->history_path);
    free(l);
    return rc;
}

double ps_train_log_grad_sumsq(const ps_model *m, const float *begin, const float *end) {
    const float *g0 = ps_model_grads((ps_model *)m);
    size_t lo = (size_t)(begin - g0), hi = (size_t)(end - g0);
    double s = 0;
    for (size_t i = 0; i < ps_model_num_vars(m); i++) {
        const ps_model_var *v = ps_model_var_at(m, i);
        size_t a = v->offset > lo ? v->offset : lo, b = v->offset + v->numel;
        if (!v->trainable) continue;
        if (b > hi) b = hi;
        for (size_t k = a; k < b; k++)
            s += (double)g0[k] * (double)g0[k];
    }
    return s;
}
