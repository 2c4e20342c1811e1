/* Job-wide training metrics per epoch (see job_metrics.h). */
#include "job_metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"

int ps_job_metrics_init(ps_job_metrics *jm, unsigned epochs, unsigned workers) {
    memset(jm, 0, sizeof *jm);
    size_t e = epochs ? epochs : 1, w = workers ? workers : 1;
    jm->ep = calloc(e, sizeof *jm->ep);
    jm->done = calloc(e, 1);
    jm->each = calloc(e * w, sizeof *jm->each);
    if (!jm->ep || !jm->done || !jm->each) {
        ps_job_metrics_free(jm);
        return PS_ENOMEM;
    }
    jm->epochs = epochs;
    jm->workers = (unsigned)w;
    return PS_OK;
}

void ps_job_metrics_free(ps_job_metrics *jm) {
    free(jm->ep);
    free(jm->done);
    free(jm->each);
    memset(jm, 0, sizeof *jm);
}

ps_job_epoch *ps_job_metrics_begin(ps_job_metrics *jm, unsigned epoch, unsigned worker,
                                   const ps_metric_sums *mine) {
    if (epoch >= jm->epochs) return NULL;
    ps_job_epoch *e = &jm->ep[epoch];
    jm->done[epoch] = 0;
    *e = (ps_job_epoch){.epoch = epoch,
                        .worker = worker,
                        .workers = jm->workers,
                        .mine = *mine,
                        .total = *mine,
                        .reported = 1,
                        .each = jm->each + (size_t)epoch * jm->workers,
                        .n_each = 1};
    e->each[0] = (ps_worker_metrics){worker, *mine};
    return e;
}

void ps_job_metrics_commit(ps_job_metrics *jm, unsigned epoch) {
    if (epoch < jm->epochs) jm->done[epoch] = 1;
}

double ps_metric_loss(const ps_metric_sums *s) {
    return s->samples ? s->loss_sum / (double)s->samples : 0.0;
}

double ps_metric_accuracy(const ps_metric_sums *s) {
    return s->samples ? (double)s->correct / (double)s->samples : 0.0;
}

int ps_job_metrics_get(const ps_job_metrics *jm, unsigned epoch, ps_job_values *out) {
    if (epoch >= jm->epochs || !jm->done[epoch]) return 0;
    const ps_job_epoch *e = &jm->ep[epoch];
    *out = (ps_job_values){.loss = ps_metric_loss(&e->total),
                           .accuracy = ps_metric_accuracy(&e->total),
                           .samples = e->total.samples,
                           .reported = e->reported,
                           .workers = e->workers,
                           .own_loss = ps_metric_loss(&e->mine),
                           .own_accuracy = ps_metric_accuracy(&e->mine),
                           .own_samples = e->mine.samples};
    return 1;
}

int ps_job_metrics_last(const ps_job_metrics *jm) {
    for (unsigned e = jm->epochs; e > 0; e--)
        if (jm->done[e - 1]) return (int)(e - 1);
    return -1;
}

/* {"loss", "accuracy", "samples"} of s into o. */
static int add_sums(cJSON *o, const ps_metric_sums *s, const char *prefix) {
    char k[3][32];
    snprintf(k[0], sizeof k[0], "%sloss", prefix);
    snprintf(k[1], sizeof k[1], "%saccuracy", prefix);
    snprintf(k[2], sizeof k[2], "%ssamples", prefix);
    return cJSON_AddNumberToObject(o, k[0], ps_metric_loss(s)) &&
           cJSON_AddNumberToObject(o, k[1], ps_metric_accuracy(s)) &&
           cJSON_AddNumberToObject(o, k[2], (double)s->samples);
}

static int add_epoch(cJSON *hist, const ps_job_epoch *e) {
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(hist, o)) {
        cJSON_Delete(o);
        return 0;
    }
    cJSON *ws;
    int ok = cJSON_AddNumberToObject(o, "epoch", e->epoch + 1) && add_sums(o, &e->total, "") &&
             cJSON_AddNumberToObject(o, "workers_reported", e->reported) &&
             (ws = cJSON_AddArrayToObject(o, "workers")) != NULL;
    for (size_t i = 0; ok && i < e->n_each; i++) {
        cJSON *w = cJSON_CreateObject();
        ok = w && cJSON_AddItemToArray(ws, w);
        if (!ok) cJSON_Delete(w);
        ok = ok && cJSON_AddNumberToObject(w, "worker", e->each[i].worker) &&
             add_sums(w, &e->each[i].sums, "");
    }
    return ok;
}

int ps_job_metrics_to_json(const ps_job_metrics *jm, cJSON *summary) {
    int last = ps_job_metrics_last(jm);
    if (last < 0) return PS_OK;
    const ps_job_epoch *e = &jm->ep[last];
    cJSON *hist;
    int ok = add_sums(summary, &e->total, "") &&
             cJSON_AddNumberToObject(summary, "workers_reported", e->reported) &&
             add_sums(summary, &e->mine, "chief_") &&
             (hist = cJSON_AddArrayToObject(summary, "history")) != NULL;
    for (unsigned k = 0; ok && k < jm->epochs; k++)
        if (jm->done[k]) ok = add_epoch(hist, &jm->ep[k]);
    return ok ? PS_OK : PS_ENOMEM;
}
