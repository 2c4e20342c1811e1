/* The training loop's side of an exact resume (see resume.h). */
#include "resume.h"

#include <stdio.h>
#include <string.h>

#include "log.h"
#include "ps_error.h"

int ps_resume_open(ps_resume *r, const ps_train_config *cfg, ps_exchange *ex,
                   ps_loss_scale *scaler, char *err, size_t errlen) {
    *r = (ps_resume){.where = {.dir = cfg->checkpoint_dir,
                               .index = cfg->index,
                               .workers = cfg->workers,
                               .job_id = cfg->job_id,
                               .keep = cfg->keep_checkpoints},
                     .every = cfg->sync_every > 1 ? 0 : cfg->checkpoint_every_steps};
    /* all-reduce without local SGD: every replica has the chief's scaler, in its
     * checkpoint; otherwise each worker's is its own */
    int own = cfg->strategy == PS_STRATEGY_PARAMETER_SERVER || cfg->sync_every > 1;
    int rc = PS_OK;
    if (scaler && own && !cfg->no_ps) {
        r->scaler = scaler;
        rc = ps_wstate_add(&r->ws, "loss_scale", r->ls, 3, NULL);
    }
    if (rc == PS_OK && !cfg->no_ps) rc = ps_exchange_state(ex, &r->ws);
    if (rc != PS_OK) snprintf(err, errlen, "out of memory listing this worker's state");
    return rc;
}

/* The entries' names, for the warnings ("loss_scale, topk_residual/0, ..."). */
static void names(const ps_resume *r, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < r->ws.n && used < n; i++) {
        if (i == 3) {
            snprintf(buf + used, n - used, ", ... (%zu in all)", r->ws.n);
            break;
        }
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ", " : "", r->ws.e[i].name);
    }
}

void ps_resume_load(ps_resume *r, uint64_t clock) {
    if (!clock || !r->ws.n) return;
    char what[300], why[800] = "", path[4200];
    names(r, what, sizeof what);
    if (!r->where.dir) {
        PS_WARN("resuming after step %llu without --checkpoint-dir: this worker's own state (%s) "
                "starts afresh, so the job does not continue exactly as an uninterrupted one",
                (unsigned long long)clock, what);
        return;
    }
    int rc = ps_wstate_load(&r->ws, &r->where, clock, path, sizeof path, why, sizeof why);
    if (rc != PS_OK) {
        PS_WARN("this worker's own state (%s) starts afresh: %s; the job does not continue "
                "exactly as an uninterrupted one",
                what, why);
        return;
    }
    if (r->scaler && r->ls[0] > 0.0f && r->ls[1] >= 0.0f && r->ls[1] < (float)r->scaler->period) {
        r->scaler->scale = r->ls[0];
        r->scaler->good_steps = (uint32_t)r->ls[1];
        r->scaler->skipped = (uint64_t)r->ls[2];
    }
    PS_INFO("this worker's own state (%s) after step %llu restored from %s", what,
            (unsigned long long)clock, path);
}

void ps_resume_step_done(ps_resume *r, uint64_t clock, int epoch_end) {
    if (!r->where.dir || !r->ws.n) return;
    if (!epoch_end && !(r->every && clock % r->every == 0)) return;
    if (r->scaler) { /* < 2^24: exact as floats */
        r->ls[0] = r->scaler->scale;
        r->ls[1] = (float)r->scaler->good_steps;
        r->ls[2] = (float)r->scaler->skipped;
    }
    char err[800], path[4200];
    if (ps_wstate_save(&r->ws, &r->where, clock, path, sizeof path, err, sizeof err) != PS_OK)
        PS_ERROR("this worker's state after step %llu was not saved: %s",
                 (unsigned long long)clock, err);
    else
        PS_DEBUG("this worker's state after step %llu written to %s", (unsigned long long)clock,
                 path);
}

void ps_resume_free(ps_resume *r) {
    ps_wstate_free(&r->ws);
}

uint64_t ps_resume_micro_batches(uint64_t clock, uint64_t steps_per_epoch, uint64_t accum,
                                 uint64_t micro_per_epoch) {
    if (!steps_per_epoch) return 0;
    uint64_t in_epoch = steps_per_epoch * accum < micro_per_epoch ? steps_per_epoch * accum
                                                                   : micro_per_epoch;
    uint64_t s = clock % steps_per_epoch * accum;
    return clock / steps_per_epoch * in_epoch + (s < micro_per_epoch ? s : micro_per_epoch);
}
