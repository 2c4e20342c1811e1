/* An elastic job's data: the training share re-picked among the live workers at each
 * epoch boundary (elastic.h says the rule). */
#include "elastic.h"

#include <stdio.h>
#include <stdlib.h>

#include "log.h"
#include "ps_error.h"

/* This worker's rank and the count in the live set ids[n] (ascending), itself added
 * when missing (its Hello may not have reached shard 0's answer yet). */
static void rank_in(const unsigned *ids, size_t n, unsigned self, unsigned *rank,
                    unsigned *count) {
    unsigned below = 0;
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < self) below++;
        if (ids[i] == self) found = 1;
    }
    *rank = below;
    *count = (unsigned)n + (found ? 0 : 1);
}

int ps_elastic_start_epoch(ps_elastic *el, const ps_train_config *cfg, ps_input *in,
                           const ps_model *m, ps_exchange *ex, unsigned epoch, size_t skip,
                           char *err, size_t errlen) {
    unsigned rank = el->rank, count = el->count;
    unsigned *ids = calloc(cfg->workers ? cfg->workers : 1, sizeof *ids);
    size_t n = 0;
    char why[512] = "no live set from this strategy";
    int rc = !ids                  ? PS_ENOMEM
             : ex->ops->live_workers ? ex->ops->live_workers(ex->self, ids, cfg->workers, &n, why,
                                                             sizeof why)
                                     : PS_EINVAL;
    if (rc == PS_OK && (n == 0 || n > cfg->workers)) {
        snprintf(why, sizeof why, "psd 0 reported %zu live workers (an older psd?)", n);
        rc = PS_EPROTO;
    }
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
        rc = ps_input_reshard(in, cfg, m, full ? cfg->index : rank, count,
                              full ? el->batch : 0, full ? 0 : el->steps, err, errlen);
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
