/* The end of a Slurm parameter-server job: psd never exits by itself, so the chief's
 * psctl slurm-task, once its psworker has finished, waits until no shard counts a live
 * worker, has every shard write a checkpoint (with --checkpoint-dir: a Shutdown request stops
 * psd without one) and asks it to stop (psd exits 0), which ends the job step. */
#ifndef PSCTL_SLURM_END_H
#define PSCTL_SLURM_END_H

#include <stddef.h>

/* ps: the n shards' "host:port". Polls every shard's stats each 0.5 s until all report 0
 * live workers, at most wait_s seconds (then stops them anyway, saying so); with checkpoint
 * set (the shards have a --checkpoint-dir) asks each for a checkpoint (a Shutdown request
 * stops psd without one), then sends Shutdown to every shard. Returns 0 when every shard
 * did both, else 1 after a message to stderr. */
int psctl_slurm_end_job(char *const *ps, size_t n, double wait_s, int checkpoint);

#endif
