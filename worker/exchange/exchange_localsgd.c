/* Local SGD (see exchange.h, ps_exchange_localsgd_open): a wrapper around the
 * strategy that combines the workers' variables, calling it once per round of
 * K local steps instead of once per step.
 *
 * Steps are numbered as the training loop counts them (local steps); rounds as
 * the inner strategy (and psd) count theirs. Epoch e's steps [0, S) fall into
 * R = ceil(S / K) rounds: round e*R + s/K holds step s, and the round ends
 * after s when (s + 1) % K == 0 or s + 1 == S, so the chief evaluates the
 * combined values after every epoch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exchange.h"
#include "local_opt.h"
#include "log.h"

typedef struct {
    const ps_train_config *cfg; /* borrowed */
    ps_model *model;            /* borrowed */
    ps_exchange inner;          /* owned */
    ps_local_opt *opt;          /* owned: this worker's optimizer and its state */
    float *anchor;              /* owned: the variables at the round's start */
    uint64_t k;                 /* local steps per round */
    uint64_t spe, rpe;          /* steps and rounds per epoch */
    uint64_t clock;             /* the current step's: steps done before it */
    int in_round;               /* the inner strategy's step_begin has been called */
} lsgd;

ps_opt_spec ps_localsgd_delta_opt(void) {
    ps_opt_spec s = ps_opt_spec_default(PS_OPT_SGD);
    s.lr = 1.0f;
    return s;
}

/* Rounds done after `steps` steps. */
static uint64_t rounds_of(const lsgd *x, uint64_t steps) {
    uint64_t s = steps % x->spe;
    return steps / x->spe * x->rpe + (s + x->k - 1) / x->k;
}

/* Steps done after `rounds` rounds. */
static uint64_t steps_of(const lsgd *x, uint64_t rounds) {
    uint64_t s = rounds % x->rpe * x->k;
    return rounds / x->rpe * x->spe + (s < x->spe ? s : x->spe);
}

static int ls_join(void *self, ps_exchange_job *job, char *err, size_t errlen) {
    lsgd *x = self;
    x->spe = job->steps_per_epoch ? job->steps_per_epoch : 1;
    x->rpe = (x->spe + x->k - 1) / x->k;
    uint64_t total = job->total_steps;
    ps_exchange_job in = *job;
    in.total_steps = rounds_of(x, total);
    in.steps_per_epoch = x->rpe;
    int rc = ps_exchange_join(&x->inner, &in, err, errlen);
    job->async = in.async;
    job->n_recreated = in.n_recreated;
    job->clock = rc == PS_OK ? steps_of(x, in.clock) : 0;
    if (rc == PS_OK && x->cfg->index == 0)
        PS_INFO("local SGD: %s every %llu local steps (%llu rounds per epoch of %llu steps); "
                "%s in each worker between",
                in.async ? "each worker's change applied as it comes" : "variables averaged",
                (unsigned long long)x->k, (unsigned long long)x->rpe, (unsigned long long)x->spe,
                ps_opt_kind_name(ps_model_optimizer(x->model)->kind));
    return rc;
}

/* A round's first step: the inner strategy brings the combined values, which
 * become the round's anchor. */
static int ls_step_begin(void *self, uint64_t clock, char *err, size_t errlen) {
    lsgd *x = self;
    x->clock = clock;
    if (x->in_round) return PS_OK;
    int rc = ps_exchange_step_begin(&x->inner, rounds_of(x, clock), err, errlen);
    if (rc != PS_OK) return rc;
    memcpy(x->anchor, ps_model_params(x->model), ps_model_num_params(x->model) * sizeof(float));
    x->in_round = 1;
    return PS_OK;
}

/* The local update; at a round's end the delta goes to the inner strategy as
 * one step's gradient, from the anchor. */
static int local_step(lsgd *x, int apply, char *err, size_t errlen) {
    if (apply) ps_local_opt_step(x->opt);
    uint64_t s = x->clock % x->spe + 1;
    if (s % x->k != 0 && s != x->spe) return PS_OK;
    float *w = ps_model_params(x->model), *g = ps_model_grads(x->model);
    size_t n = ps_model_num_updated_params(x->model); /* the frozen variables never move */
    for (size_t i = 0; i < n; i++) {
        g[i] = x->anchor[i] - w[i];
        w[i] = x->anchor[i];
    }
    x->in_round = 0;
    ps_exchange_grads_ready(&x->inner, g, g + n);
    return ps_exchange_step_end(&x->inner, err, errlen);
}

static int ls_step_end(void *self, char *err, size_t errlen) {
    return local_step(self, 1, err, errlen);
}

/* Loss scaling (mixed_float16): a local step whose gradients overflowed is
 * skipped by this worker alone (its own scaler); the round's delta, made of
 * the steps that were applied, is finite and goes on as usual. */
static int ls_step_end_checked(void *self, int bad, int *skipped, char *err, size_t errlen) {
    *skipped = bad != 0;
    return local_step(self, !bad, err, errlen);
}

/* The loop's `clock` is in steps and `want` in pushes of steps (steps x
 * workers): both become rounds. */
static int ls_eval_sync(void *self, int newest, uint64_t clock, uint64_t want, char *err,
                        size_t errlen) {
    lsgd *x = self;
    uint64_t w = x->cfg->workers ? x->cfg->workers : 1;
    return ps_exchange_eval_sync(&x->inner, newest, rounds_of(x, clock), rounds_of(x, want / w) * w,
                                 err, errlen);
}

/* The inner strategy's bytes: one delta per round, so per (local) step they are
 * the inner figure over K. */
static uint64_t ls_bytes_sent(void *self) {
    lsgd *x = self;
    return x->inner.ops->bytes_sent ? x->inner.ops->bytes_sent(x->inner.self) : 0;
}

/* This worker's optimizer (its slots and update count) and the inner strategy's
 * own state. The anchor is not state: saves come between rounds. */
static int ls_state(void *self, ps_wstate *s) {
    lsgd *x = self;
    int rc = ps_local_opt_state(x->opt, "local_sgd", s);
    return rc == PS_OK ? ps_exchange_state(&x->inner, s) : rc;
}

static void ls_finish(void *self) {
    ps_exchange_finish(&((lsgd *)self)->inner);
}

static int ls_reduce_metrics(void *self, ps_job_epoch *e, char *err, size_t errlen) {
    return ps_exchange_reduce_metrics(&((lsgd *)self)->inner, e, err, errlen);
}

static int ls_peer_failed(void *self) {
    return ps_exchange_peer_failed(&((lsgd *)self)->inner);
}

static void ls_free(void *self) {
    lsgd *x = self;
    if (!x) return;
    ps_exchange_free(&x->inner);
    ps_local_opt_free(x->opt);
    free(x->anchor);
    free(x);
}

static const ps_exchange_ops lsgd_ops = {
    .name = "local SGD",
    .join = ls_join,
    .step_begin = ls_step_begin,
    .step_end = ls_step_end,
    .step_end_checked = ls_step_end_checked,
    .bytes_sent = ls_bytes_sent,
    .state = ls_state,
    .eval_sync = ls_eval_sync,
    .finish = ls_finish,
    .peer_failed = ls_peer_failed,
    .free = ls_free,
    .reduce_metrics = ls_reduce_metrics,
};

int ps_exchange_localsgd_open(const ps_train_config *cfg, ps_model *m, ps_exchange *inner,
                              ps_exchange *out, char *err, size_t errlen) {
    *out = (ps_exchange){0};
    lsgd *x = calloc(1, sizeof *x);
    size_t n = ps_model_num_params(m);
    if (x) {
        x->inner = *inner;
        *inner = (ps_exchange){0};
    }
    if (!x || !(x->anchor = malloc((n ? n : 1) * sizeof *x->anchor)) ||
        ps_local_opt_new(m, &x->opt) != PS_OK) {
        if (x)
            ls_free(x);
        else
            ps_exchange_free(inner);
        snprintf(err, errlen, "local SGD: cannot allocate the optimizer's slots: %s",
                 ps_strerror(PS_ENOMEM));
        return PS_ENOMEM;
    }
    x->cfg = cfg;
    x->model = m;
    x->k = cfg->sync_every > 1 ? cfg->sync_every : 1;
    *out = (ps_exchange){.ops = &lsgd_ops, .self = x};
    return PS_OK;
}
