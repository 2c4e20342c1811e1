/* A shard's version and, in sync mode, its open step: which workers pushed for
 * it, and the rule that closes it. No I/O. */
#ifndef PS_SHARD_STEP_H
#define PS_SHARD_STEP_H

#include <stdint.h>

typedef struct {
    uint64_t version;      /* sync: completed steps; async: applied pushes */
    unsigned char *pushed; /* sync: [n] worker w pushed for the open step */
    uint32_t n;            /* workers of the job */
    uint32_t pushes;       /* sync: pushes counted in the open step */
} ps_step;

/* What a sync push for `step` from worker w does. */
typedef enum {
    PS_STEP_ADMIT, /* it counts in the open step */
    PS_STEP_DROP,  /* its step closed (backup workers closed it), or w pushed already
                    * (a retry after a reconnect): answered, not applied */
    PS_STEP_AHEAD, /* the shard is behind the worker (it restarted from a checkpoint):
                    * the worker must resync */
} ps_step_verdict;

/* PS_OK or PS_ENOMEM. */
int ps_step_init(ps_step *st, uint32_t n);
void ps_step_free(ps_step *st);
ps_step_verdict ps_step_admit(const ps_step *st, uint32_t w, uint64_t step);
/* Pushes that close a step now: `to_aggregate` (0: every worker of the job)
 * capped by the live workers, at least 1. */
uint32_t ps_step_needed(const ps_step *st, uint32_t to_aggregate, uint32_t live);
/* Counts w's push in the open step. */
void ps_step_count(ps_step *st, uint32_t w);
/* 1 when the open step has a push and at least `needed` of them. */
int ps_step_ready(const ps_step *st, uint32_t needed);
/* Closes the open step: the version advances, the next step opens empty. */
void ps_step_close(ps_step *st);

#endif
