/* Job-wide training metrics per epoch, like TensorFlow's
 * strategy.reduce(SUM, per_replica_losses): each worker's epoch sums (loss x
 * samples, hits, samples) are added over the workers by the exchange
 * (exchange.h reduce_metrics: psd's shard 0, an all-gather over the ring, or
 * nothing with --no-ps), then divided: loss = sum(loss_sum) / sum(samples),
 * accuracy = sum(correct) / sum(samples). The loop records each epoch here;
 * the chief's progress line, its summary JSON and a TensorBoard writer read
 * them back (ps_job_metrics_get). */
#ifndef PS_JOB_METRICS_H
#define PS_JOB_METRICS_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "ps.h" /* ps_metric_sums, ps_worker_metrics */

/* One epoch as the exchange combined it. */
typedef struct {
    unsigned epoch;          /* 0-based */
    unsigned worker;         /* this worker's index */
    unsigned workers;        /* workers in the job */
    ps_metric_sums mine;     /* this worker's sums */
    ps_metric_sums total;    /* summed over the workers that reported */
    unsigned reported;       /* workers whose sums are in total (>= 1: this one) */
    ps_worker_metrics *each; /* [workers] (owned by ps_job_metrics): the reports, worker order */
    size_t n_each;           /* entries of each filled */
} ps_job_epoch;

/* The values a reader wants of one epoch. */
typedef struct {
    double loss, accuracy;         /* job-wide: over the workers that reported */
    uint64_t samples;              /* job-wide */
    unsigned reported, workers;    /* reported < workers: some workers' sums are missing */
    double own_loss, own_accuracy; /* this worker's alone */
    uint64_t own_samples;
} ps_job_values;

typedef struct {
    unsigned epochs, workers;
    ps_job_epoch *ep;        /* [epochs] */
    unsigned char *done;     /* [epochs]: recorded */
    ps_worker_metrics *each; /* [epochs * workers] */
} ps_job_metrics;

/* Room for `epochs` epochs of `workers` workers. PS_OK or PS_ENOMEM. */
int ps_job_metrics_init(ps_job_metrics *jm, unsigned epochs, unsigned workers);
void ps_job_metrics_free(ps_job_metrics *jm);
/* The record of `epoch` to fill, reset: epoch, worker, workers and mine set,
 * total = mine with reported = 1 and each = this worker alone (what --no-ps
 * keeps). NULL when epoch >= epochs. Counted once ps_job_metrics_commit says so. */
ps_job_epoch *ps_job_metrics_begin(ps_job_metrics *jm, unsigned epoch, unsigned worker,
                                   const ps_metric_sums *mine);
void ps_job_metrics_commit(ps_job_metrics *jm, unsigned epoch);

/* Epoch `epoch`'s (0-based) values: returns 1 with *out set, or 0 when this
 * worker did not record it (not trained here, e.g. before a restart). On the
 * chief the loss and accuracy are the job-wide ones it printed; on another
 * worker they are job-wide under the all-reduce strategies and its own under
 * psd (reported = 1). The function a TensorBoard writer calls after the
 * epoch's progress line. */
int ps_job_metrics_get(const ps_job_metrics *jm, unsigned epoch, ps_job_values *out);
/* The newest recorded epoch, or -1 when none. */
int ps_job_metrics_last(const ps_job_metrics *jm);

/* mean loss and accuracy of sums (0 when no samples) */
double ps_metric_loss(const ps_metric_sums *s);
double ps_metric_accuracy(const ps_metric_sums *s);

/* Adds to the summary object: "loss", "accuracy", "samples", "workers_reported"
 * (the last recorded epoch's, job-wide), "chief_loss", "chief_accuracy",
 * "chief_samples" (this worker's own, that epoch) and "history": per recorded
 * epoch {"epoch" (1-based), "loss", "accuracy", "samples", "workers_reported",
 * "workers": [{"worker", "loss", "accuracy", "samples"}...]}. Nothing when no
 * epoch was recorded. PS_OK or PS_ENOMEM. */
int ps_job_metrics_to_json(const ps_job_metrics *jm, cJSON *summary);

#endif
