/* The input pipeline: records of a source (source.h), in the order order.h
 * gives, read, decoded and prepared (resize, crops, flips, scaling: the
 * caller's prepare step) by a pool of threads ahead of training into a ring
 * of batches whose size is bounded by a memory budget, not by the dataset.
 * Batches come out in the epoch's order whatever the threads' timing, and a
 * record's random draws depend only on (seed, epoch, record), so training is
 * the same with 0, 1 or 8 threads. One consumer thread.
 *
 * Besides the model's input x and the class labels, a batch carries each
 * record's 64-bit ids (a source with id columns: src->n_ids per record) and
 * its float target (ps_pipeline_next_batch). */
#ifndef PS_PIPELINE_H
#define PS_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "source.h"

/* Makes the model's input (dim floats into out) from a decoded record.
 * *scratch (*scratch_cap floats) is the thread's own, grown with realloc as
 * the step needs (the pipeline frees it). seed is the record's own for this
 * epoch. Returns PS_OK or an error with the reason in err (the pipeline adds
 * the record). */
typedef int (*ps_pipeline_prepare_fn)(void *ctx, const ps_sample *in, float *out,
                                      float **scratch, size_t *scratch_cap, uint64_t seed,
                                      bool training, char *err, size_t errlen);

#define PS_PIPELINE_MEMORY_DEFAULT ((size_t)256 << 20) /* psworker --input-memory */

typedef struct {
    ps_source *src;     /* borrowed: must outlive the pipeline */
    size_t out_h, out_w, out_c; /* each sample as the model takes it */
    ps_pipeline_prepare_fn prepare; /* NULL: a record must already have that shape (or as
                                       many values, when either side is flat) */
                                    /* out_c 0 (no floats) is allowed when src has ids */
    void *prepare_ctx;
    int num_classes;         /* labels must be below it (0: unchecked) */
    const int32_t *label_map; /* label l becomes label_map[l] (NULL: as they are); not with
                                 float targets */
    size_t label_map_n;
    size_t batch;
    size_t steps;            /* 0: batches of `batch`, the last short; else the epoch's
                                records spread over exactly this many batches (sizes one
                                apart at most, `batch` unused; an elastic job's share of the
                                live workers, train.c); more steps than records: PS_EINVAL */
    unsigned threads;        /* 0: each batch read on the caller's thread when asked for */
    size_t memory_bytes;     /* batches in flight: this much at most (at least 2 batches) */
    bool training;           /* random augmentation on (the prepare step is told) */
    bool skip_bad;           /* a record that cannot be read or decoded is skipped, counted */
    const size_t *records;   /* the records to use, ascending (NULL: all) */
    size_t n_records;
    unsigned index, count;   /* this worker among count */
    size_t shuffle_buffer;   /* order.h: 0 full, N, or PS_ORDER_IN_ORDER */
    uint64_t seed;
} ps_pipeline_cfg;

typedef struct ps_pipeline ps_pipeline;

/* Sets up the order and starts the threads (idle until an epoch starts).
 * Returns PS_OK, PS_EINVAL (err says why: no records, fewer than workers,
 * batch 0) or PS_ENOMEM. */
int ps_pipeline_open(ps_pipeline **out, const ps_pipeline_cfg *cfg, char *err, size_t errlen);

/* Records per epoch for this worker, and batches (the last may be short). */
size_t ps_pipeline_epoch_records(const ps_pipeline *p);
size_t ps_pipeline_steps_per_epoch(const ps_pipeline *p);
/* Batches held in memory at most (the ring), and whether two batches
 * already exceed the memory budget. */
size_t ps_pipeline_depth(const ps_pipeline *p, bool *over_budget);
/* True when the share went by file. */
bool ps_pipeline_by_file(const ps_pipeline *p);
/* Records skipped so far (skip_bad); the first one's error into first (may be
 * NULL). */
uint64_t ps_pipeline_skipped(const ps_pipeline *p, char *first, size_t firstlen);

/* Starts epoch `epoch` at its batch `skip` (a restarted worker continues where
 * the job is, nothing read for the batches before). Waits for records being
 * read to finish; the batch last handed out becomes invalid. Returns PS_OK
 * or PS_ENOMEM. */
int ps_pipeline_start_epoch(ps_pipeline *p, unsigned epoch, size_t skip);

/* The records this epoch reads from its first batch (ps_pipeline_start_epoch's skip) on:
 * their count into *n, and the sum of ps_order_rand of each record number (order.h),
 * so that the digests of shares that split a set add up to the set's own (a check of
 * the elastic re-sharding, logged by psworker). */
uint64_t ps_pipeline_epoch_digest(ps_pipeline *p, size_t *n);

/* A batch handed out: its arrays point into the pipeline's ring, valid until
 * the next call of ps_pipeline_next(_batch) or ps_pipeline_start_epoch. */
typedef struct {
    size_t nb;        /* records; 0 at the end of the epoch */
    float *x;         /* nb * dim floats, the model's input (dim may be 0: ids alone) */
    int32_t *y;       /* nb class labels (relabelled); 0 for float targets */
    float *targets;   /* nb: the float target, or the class label as a float */
    uint64_t *ids;    /* nb * n_ids, record after record (NULL when n_ids is 0) */
    size_t n_ids;     /* ids per record: the source's id columns, in the spec's order */
    bool float_targets; /* the source's labels are float targets (y is 0) */
} ps_pipeline_batch;

/* The next batch into *b (zeroed first; b->nb 0 at the end of the epoch; it
 * is smaller than the batch for the last one, or when records were skipped).
 * Returns PS_OK or the first error of a record (err names it). */
int ps_pipeline_next_batch(ps_pipeline *p, ps_pipeline_batch *b, char *err, size_t errlen);

/* The next batch's x and class labels alone (ps_pipeline_next_batch's b->x,
 * b->y, b->nb); *x and *y are set only when *nb > 0. */
int ps_pipeline_next(ps_pipeline *p, float **x, int32_t **y, size_t *nb, char *err,
                     size_t errlen);

/* Stops and joins the threads and frees everything. NULL is a no-op. */
void ps_pipeline_close(ps_pipeline *p);

#endif
