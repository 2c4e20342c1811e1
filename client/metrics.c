/* libps: job-wide training metrics (ReportMetrics, QueryMetrics to shard 0). */
#include "client_impl.h"

#include <math.h>
#include <string.h>
#include <time.h>

#define METRICS_SHARD 0
#define METRICS_MAX_SAMPLES (1ull << 48) /* psd's PS_EPOCH_METRICS_MAX_SAMPLES */

typedef struct {
    Ps__Header *req;
    int kept;
    ps_epoch_metrics *out;
    ps_worker_metrics *each;
    size_t cap;
} metrics_ctx;

static int send_metrics(ps_client *c, size_t i, void *vctx) {
    metrics_ctx *ctx = vctx;
    return ps__send_request(c, i, ctx->req, NULL, 0);
}

static int on_reported(ps_client *c, size_t shard, Ps__Header *h, ps_frames *f, void *vctx) {
    (void)f;
    metrics_ctx *ctx = vctx;
    int rc = ps__expect_body(c, shard, h, PS__HEADER__BODY_REPORT_METRICS_REPLY, "report_metrics");
    if (rc == PS_OK) ctx->kept = h->report_metrics_reply->kept;
    return rc;
}

static int on_queried(ps_client *c, size_t shard, Ps__Header *h, ps_frames *f, void *vctx) {
    (void)f;
    metrics_ctx *ctx = vctx;
    int rc = ps__expect_body(c, shard, h, PS__HEADER__BODY_QUERY_METRICS_REPLY, "query_metrics");
    if (rc != PS_OK) return rc;
    const Ps__QueryMetricsReply *r = h->query_metrics_reply;
    ps_epoch_metrics *o = ctx->out;
    o->epoch = r->epoch;
    o->total = (ps_metric_sums){r->loss_sum, r->correct, r->samples};
    o->reported = r->reported;
    o->expected = r->expected;
    for (size_t k = 0; ctx->each && k < r->n_workers && k < ctx->cap; k++) {
        const Ps__WorkerMetrics *w = r->workers[k];
        ctx->each[k] = (ps_worker_metrics){w->worker_index, {w->loss_sum, w->correct, w->samples}};
    }
    return PS_OK;
}

static int one_request(ps_client *c, op_spec *op) {
    if (c->step_open) return ps__fail(c, PS_EINVAL, "%s during a step exchange", op->what);
    int rc = ps__connect_all(c);
    if (rc == PS_OK) rc = op->send(c, METRICS_SHARD, op->ctx);
    if (rc == PS_OK) rc = ps__collect(c, op);
    return rc;
}

int ps_client_report_metrics(ps_client *c, uint32_t epoch, const ps_metric_sums *mine, int *kept) {
    if (!mine) return ps__fail(c, PS_EINVAL, "report_metrics: no metrics given");
    if (ps__need_hello(c, "report_metrics") != PS_OK) return PS_EINVAL;
    if (!isfinite(mine->loss_sum) || mine->samples > METRICS_MAX_SAMPLES ||
        mine->correct > mine->samples || (mine->samples == 0 && mine->loss_sum != 0))
        return ps__fail(c, PS_EINVAL,
                        "report_metrics: loss sum %g, %llu correct of %llu samples (want a "
                        "finite loss sum, correct <= samples <= 2^48)",
                        mine->loss_sum, (unsigned long long)mine->correct,
                        (unsigned long long)mine->samples);
    Ps__Header h = PS__HEADER__INIT;
    Ps__ReportMetrics m = PS__REPORT_METRICS__INIT;
    m.worker_index = c->worker_index;
    m.epoch = epoch;
    m.loss_sum = mine->loss_sum;
    m.correct = mine->correct;
    m.samples = mine->samples;
    h.body_case = PS__HEADER__BODY_REPORT_METRICS;
    h.report_metrics = &m;
    metrics_ctx ctx = {.req = &h};
    op_spec op = {"report_metrics", send_metrics, on_reported, 0, 0, &ctx, 0, NULL};
    int rc = one_request(c, &op);
    if (kept) *kept = rc == PS_OK && ctx.kept;
    return rc;
}

int ps_client_query_metrics(ps_client *c, uint32_t epoch, int wait_ms, ps_epoch_metrics *out,
                            ps_worker_metrics *each, size_t cap) {
    if (!out || wait_ms < 0)
        return ps__fail(c, PS_EINVAL, "query_metrics: %s", out ? "wait_ms < 0" : "no out");
    memset(out, 0, sizeof *out);
    Ps__Header h = PS__HEADER__INIT;
    Ps__QueryMetrics q = PS__QUERY_METRICS__INIT;
    q.epoch = epoch;
    h.body_case = PS__HEADER__BODY_QUERY_METRICS;
    h.query_metrics = &q;
    metrics_ctx ctx = {.req = &h, .out = out, .each = each, .cap = cap};
    op_spec op = {"query_metrics", send_metrics, on_queried, 0, 0, &ctx, 0, NULL};
    uint64_t deadline = ps__now_ms() + (uint64_t)wait_ms;
    for (;;) {
        int rc = one_request(c, &op);
        if (rc != PS_OK || out->reported >= out->expected || ps__now_ms() >= deadline) return rc;
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    }
}
