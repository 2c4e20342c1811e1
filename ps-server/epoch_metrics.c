/* Job-wide training metrics on shard 0 (ReportMetrics, QueryMetrics): per
 * epoch, each worker's sums of its loss, hits and samples. Bounded memory: the
 * table has PS_EPOCH_METRICS_KEPT slots of one entry per worker, epoch e in
 * slot e % KEPT; a report for a newer epoch takes the slot over, one for an
 * older epoch than the slot holds is not kept. A worker's second report of an
 * epoch (it restarted) replaces its first. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "ps_error.h"
#include "server.h"

/* One worker's report. */
typedef struct {
    double loss_sum;
    uint64_t correct, samples;
    unsigned char has; /* reported */
} entry;

struct ps_epoch_metrics {
    uint32_t epoch[PS_EPOCH_METRICS_KEPT];
    unsigned char used[PS_EPOCH_METRICS_KEPT];
    entry *e; /* [KEPT][workers] */
};

void ps__epoch_metrics_free(ps_server *s) {
    if (!s->epoch_metrics) return;
    free(s->epoch_metrics->e);
    free(s->epoch_metrics);
    s->epoch_metrics = NULL;
}

static int table(ps_server *s, struct ps_epoch_metrics **out) {
    if (!s->epoch_metrics) {
        struct ps_epoch_metrics *t = calloc(1, sizeof *t);
        if (t) t->e = calloc((size_t)PS_EPOCH_METRICS_KEPT * (size_t)s->cfg.workers, sizeof *t->e);
        if (!t || !t->e) {
            free(t);
            return PS_ENOMEM;
        }
        s->epoch_metrics = t;
    }
    *out = s->epoch_metrics;
    return PS_OK;
}

/* The slot's entries when it holds `epoch`, else NULL. */
static entry *slot_of(const ps_server *s, uint32_t epoch) {
    const struct ps_epoch_metrics *t = s->epoch_metrics;
    unsigned k = epoch % PS_EPOCH_METRICS_KEPT;
    if (!t || !t->used[k] || t->epoch[k] != epoch) return NULL;
    return t->e + (size_t)k * (size_t)s->cfg.workers;
}

int ps__handle_report_metrics(ps_server *s, ps_request *r, char *err, size_t errlen) {
    const Ps__ReportMetrics *m = r->hdr->report_metrics;
    if (m->worker_index >= (uint32_t)s->cfg.workers) {
        snprintf(err, errlen, "worker index %u out of range (job has %ld workers)", m->worker_index,
                 s->cfg.workers);
        return PS_EINVAL;
    }
    if (!isfinite(m->loss_sum) || m->samples > PS_EPOCH_METRICS_MAX_SAMPLES ||
        m->correct > m->samples || (m->samples == 0 && m->loss_sum != 0)) {
        snprintf(err, errlen,
                 "metrics of worker %u for epoch %u out of range: loss sum %g, %llu correct of "
                 "%llu samples (want a finite loss sum, correct <= samples <= 2^48)",
                 m->worker_index, m->epoch, m->loss_sum, (unsigned long long)m->correct,
                 (unsigned long long)m->samples);
        return PS_EINVAL;
    }
    ps_shard_seen(&s->shard, m->worker_index);
    struct ps_epoch_metrics *t;
    if (table(s, &t) != PS_OK) {
        snprintf(err, errlen, "out of memory for the metrics table");
        return PS_ENOMEM;
    }
    unsigned k = m->epoch % PS_EPOCH_METRICS_KEPT;
    entry *row = t->e + (size_t)k * (size_t)s->cfg.workers;
    int kept = 1;
    if (!t->used[k] || t->epoch[k] < m->epoch) { /* a newer epoch takes the slot */
        memset(row, 0, (size_t)s->cfg.workers * sizeof *row);
        t->used[k] = 1;
        t->epoch[k] = m->epoch;
    } else if (t->epoch[k] > m->epoch) {
        kept = 0; /* older than what psd keeps */
    }
    if (kept) {
        entry *e = &row[m->worker_index];
        if (e->has)
            PS_INFO("worker %u reported epoch %u again: its new figures replace the old",
                    m->worker_index, m->epoch);
        *e = (entry){m->loss_sum, m->correct, m->samples, 1};
    }
    Ps__Header out = PS__HEADER__INIT;
    Ps__ReportMetricsReply rep = PS__REPORT_METRICS_REPLY__INIT;
    rep.kept = kept;
    out.body_case = PS__HEADER__BODY_REPORT_METRICS_REPLY;
    out.report_metrics_reply = &rep;
    ps__server_reply(s, r->identity, r->identity_len, r->hdr->request_id, &out, NULL, 0);
    return PS_OK;
}

int ps__handle_query_metrics(ps_server *s, ps_request *r, char *err, size_t errlen) {
    uint32_t epoch = r->hdr->query_metrics->epoch;
    const entry *row = slot_of(s, epoch);
    size_t n = (size_t)s->cfg.workers;
    Ps__WorkerMetrics *wm = calloc(n ? n : 1, sizeof *wm);
    Ps__WorkerMetrics **wp = calloc(n ? n : 1, sizeof *wp);
    if (!wm || !wp) {
        free(wm);
        free(wp);
        snprintf(err, errlen, "out of memory answering a metrics query");
        return PS_ENOMEM;
    }
    Ps__QueryMetricsReply rep = PS__QUERY_METRICS_REPLY__INIT;
    rep.epoch = epoch;
    for (size_t w = 0; w < n; w++) {
        int has = row && row[w].has;
        if (has || ps_members_live(&s->shard.members, w)) rep.expected++;
        if (!has) continue;
        Ps__WorkerMetrics *e = &wm[rep.reported];
        ps__worker_metrics__init(e);
        e->worker_index = (uint32_t)w;
        e->loss_sum = row[w].loss_sum;
        e->correct = row[w].correct;
        e->samples = row[w].samples;
        wp[rep.reported] = e;
        rep.reported++;
        rep.loss_sum += row[w].loss_sum;
        rep.correct += row[w].correct;
        rep.samples += row[w].samples;
    }
    rep.workers = wp;
    rep.n_workers = rep.reported;
    Ps__Header out = PS__HEADER__INIT;
    out.body_case = PS__HEADER__BODY_QUERY_METRICS_REPLY;
    out.query_metrics_reply = &rep;
    ps__server_reply(s, r->identity, r->identity_len, r->hdr->request_id, &out, NULL, 0);
    free(wm);
    free(wp);
    return PS_OK;
}
