/* A Keras-like progress line per epoch: step/steps, a bar, loss, accuracy,
 * samples/s and ETA; redrawn in place on a TTY, plain lines otherwise. */
#ifndef PS_PROGRESS_H
#define PS_PROGRESS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum { PS_PROGRESS_NONE = 0, PS_PROGRESS_PLAIN, PS_PROGRESS_TTY } ps_progress_mode;

typedef struct {
    ps_progress_mode mode;
    FILE *out; /* borrowed */
    unsigned epoch, epochs;
    size_t steps, done;
    size_t samples, correct; /* this epoch, this worker */
    double loss_sum;         /* sum of batch mean loss * batch size */
    uint64_t start_ns, last_draw_ns, stop_ns;
    size_t next_plain; /* plain mode: next step at which to print */
    unsigned replicas; /* workers in the job: samples/s is shown for the job */
    int have_final;    /* the epoch's final line shows final_loss/final_acc (the job's) */
    int rmse;          /* float targets under mse: "rmse" (the square root of the mean loss)
                        * in place of accuracy */
    double final_loss, final_acc;
} ps_progress;

void ps_progress_init(ps_progress *p, ps_progress_mode mode, FILE *out, unsigned epochs,
                      unsigned replicas);
/* Prints "Epoch e/E" and resets the counters. */
void ps_progress_begin_epoch(ps_progress *p, unsigned epoch, size_t steps);
/* Records one step's batch (mean loss, size, hits) and redraws when due. */
void ps_progress_step(ps_progress *p, float batch_loss, size_t batch, size_t correct);
/* The epoch's final line shows this loss and accuracy (the job-wide ones) in place of
 * this worker's; until the next ps_progress_begin_epoch. */
void ps_progress_set_final(ps_progress *p, double loss, double accuracy);
/* Prints the epoch's final line; `extra` (may be NULL) is appended, e.g. val metrics. */
void ps_progress_end_epoch(ps_progress *p, const char *extra);
/* Mean loss and accuracy over the epoch so far. */
double ps_progress_loss(const ps_progress *p);
double ps_progress_accuracy(const ps_progress *p);

#endif
