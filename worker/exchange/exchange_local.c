/* The exchange for --no-ps (see exchange.h): no shards, no client; after each
 * step the optimizer (local_opt.c) applies the gradients to the model's own
 * parameters in this process. The benchmark floor. */
#include <stdio.h>
#include <stdlib.h>

#include "exchange.h"
#include "local_opt.h"
#include "log.h"

/* Training alone: a fresh sync job, nothing to create or wait for. */
static int local_join(void *self, ps_exchange_job *job, char *err, size_t errlen) {
    (void)self, (void)err, (void)errlen;
    job->async = 0;
    job->clock = 0;
    job->n_recreated = 0;
    return PS_OK;
}

/* The parameters already hold the last step's update. */
static int local_step_begin(void *self, uint64_t clock, char *err, size_t errlen) {
    (void)self, (void)clock, (void)err, (void)errlen;
    return PS_OK;
}

static int local_step_end(void *self, char *err, size_t errlen) {
    (void)err, (void)errlen;
    ps_local_opt_step(self);
    return PS_OK;
}

static int local_step_end_checked(void *self, int bad, int *skipped, char *err, size_t errlen) {
    *skipped = bad;
    return bad ? PS_OK : local_step_end(self, err, errlen);
}

static void local_free(void *self) {
    ps_local_opt_free(self);
}

static const ps_exchange_ops local_ops = {
    .name = "local",
    .join = local_join,
    .step_begin = local_step_begin,
    .step_end = local_step_end,
    .step_end_checked = local_step_end_checked,
    .free = local_free,
};

int ps_exchange_local_open(ps_model *m, ps_exchange *out, char *err, size_t errlen) {
    *out = (ps_exchange){0};
    PS_INFO("--no-ps: %s applied in this process", ps_opt_kind_name(ps_model_optimizer(m)->kind));
    ps_local_opt *o = NULL;
    int rc = ps_local_opt_new(m, &o);
    if (rc != PS_OK) {
        snprintf(err, errlen, "--no-ps: cannot allocate the optimizer's slots: %s",
                 ps_strerror(rc));
        return rc;
    }
    *out = (ps_exchange){.ops = &local_ops, .self = o};
    return PS_OK;
}
