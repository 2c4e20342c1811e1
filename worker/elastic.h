/* An elastic job's data (psworker --elastic, a psd with --workers-min): at each epoch
 * boundary a worker reads the share of its rank among the live workers, so that the
 * workers that saw the same live set read each sample of the epoch once between them.
 * The rule (docs/TRAINING.md, "Workers that come and go"):
 *   - at the start of every epoch it trains on (and at its first, mid-epoch when it
 *     joins a running job), a worker asks shard 0 for the live set (StatsReply.live_set)
 *     and adds itself when missing; its rank there among the count picks its share
 *     (order.h: records rank, rank + count, ... or files so); while fewer than psd's
 *     --workers-min are live (a job starting) it asks again, since no step closes
 *     before then;
 *   - the epoch keeps the full job's steps (the slots' share, psworker --workers): a
 *     share of a smaller live set is spread over them, in batches up to workers/live
 *     times larger, so the global batch, the step count, checkpoints and resuming stay
 *     those of the full job; with every slot live a worker reads its own index's share
 *     in batches of --batch, as a fixed-size job does;
 *   - two workers that saw different sets around a change (a join or leave between
 *     their questions) may read some samples of that epoch twice and miss others; the
 *     steps still agree (they do not depend on the set), and the next epoch agrees again. */
#ifndef PS_ELASTIC_H
#define PS_ELASTIC_H

#include <stddef.h>

#include "exchange.h"
#include "input.h"
#include "model.h"
#include "train.h"

typedef struct {
    unsigned rank, count; /* the share read now: rank of count (at first: --index of
                             --workers, the pipeline ps_input_open made) */
    size_t steps;         /* the full job's batches per epoch, a share spread over them */
    size_t batch;         /* --batch, for the full set */
} ps_elastic;

/* Before epoch `epoch` (skip: its batches already done by the job): asks the exchange for
 * the live set, opens the training pipeline again when the share changes, starts the
 * epoch, and logs the share (every worker: its records and their digest, pipeline.h; the
 * chief: "epoch E: L live workers, each reads 1/L of the data"). A live set that cannot
 * be had keeps the share as it was (a warning). PS_OK or an error with err set. */
int ps_elastic_start_epoch(ps_elastic *el, const ps_train_config *cfg, ps_input *in,
                           const ps_model *m, ps_exchange *ex, unsigned epoch, size_t skip,
                           char *err, size_t errlen);

#endif
