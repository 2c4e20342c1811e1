/* An elastic job's data: the training share re-picked among the live workers at each
 * epoch boundary (elastic.h says the rule). */
#include "elastic.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "log.h"
#include "ps_error.h"

/* This worker's rank and the count in the live set ids[n] (ascending), itself added
 * when missing (its Hello may not have reached shard 0's answer yet). */
static void rank_in(const unsigned *ids, size_t n, unsigned self, unsigned *rank, unsigned *count) {
    unsigned below = 0;
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < self) below++;
        if (ids[i] == self) found = 1;
    }
    *rank = below;
    *count = (unsigned)n + (found ? 0 : 1);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The live set into ids (cfg->workers entries), *n of them. Fewer than psd's
 * --workers-min live (a job starting, its workers saying Hello one by one): asks again
 * every 20 ms, at most --timeout, since no step closes before then anyway. PS_OK, or an
 * error with why set. */
static int live_set(const ps_train_config *cfg, ps_exchange *ex, unsigned epoch, unsigned *ids,
                    size_t *n, char *why, size_t whylen) {
    if (!ex->ops->live_workers) {
        snprintf(why, whylen, "no live set from this strategy");
        return PS_EINVAL;
    }
    double deadline = now_s() + (cfg->timeout_ms > 0 ? cfg->timeout_ms : 60000) / 1000.0;
    for (int said = 0;; said = 1) {
        unsigned min = 0;
        int rc = ex->ops->live_workers(ex->self, ids, cfg->workers, n, &min, why, whylen);
        if (rc != PS_OK) return rc;
        if (*n == 0 || *n > cfg->workers) {
            snprintf(why, whylen, "psd 0 reported %zu live workers (an older psd?)", *n);
            return PS_EPROTO;
        }
        if (*n >= min || now_s() >= deadline) return PS_OK;
        if (!said)
            PS_INFO("epoch %u: %zu live worker%s, fewer than psd's --workers-min %u: waiting "
                    "for more before choosing the share",
                    epoch + 1, *n, *n == 1 ? "" : "s", min);
        struct timespec nap = {0, 20 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
}

int ps_elastic_start_epoch(ps_elastic *el, const ps_train_config *cfg, ps_input *in,
                           const ps_model *m, ps_exchange *ex, unsigned epoch, size_t skip,
                           char *err, size_t errlen) {
    unsigned rank = el->rank, count = el->count;
    unsigned *ids = calloc(cfg->workers ? cfg->workers : 1, sizeof *ids);
    size_t n = 0;
    char why[512] = "out of memory";
    int rc = ids ? live_set(cfg, ex, epoch, ids, &n, why, sizeof why) : PS_ENOMEM;
    if (rc == PS_OK)
        rank_in(ids, n, cfg->index, &rank, &count);
    else
        PS_WARN("epoch %u: the live workers are not known (%s): this worker keeps share %u of "
                "%u",
                epoch + 1, why, rank, count);
    free(ids);
    if (rank != el->rank || count != el->count) {
        /* every slot live: the fixed-size job's own share and batches */
        int full = count == cfg->workers;
        rc = ps_input_reshard(in, cfg, m, full ? cfg->index : rank, count, full ? el->batch : 0,
                              full ? 0 : el->steps, err, errlen);
        if (rc != PS_OK) return rc;
        el->rank = rank, el->count = count;
    }
    rc = ps_pipeline_start_epoch(in->train_pl, epoch, skip);
    if (rc != PS_OK) {
        snprintf(err, errlen, "the input pipeline: %s", ps_strerror(rc));
        return rc;
    }
    size_t recs = 0;
    uint64_t digest = ps_pipeline_epoch_digest(in->train_pl, &recs);
    if (cfg->index == 0)
        PS_INFO("epoch %u: %u live worker%s, each reads 1/%u of the data", epoch + 1, count,
                count == 1 ? "" : "s", count);
    PS_INFO("epoch %u: share %u of %u: %zu records from batch %zu (digest %016llx)", epoch + 1,
            rank, count, recs, skip, (unsigned long long)digest);
    return PS_OK;
}
