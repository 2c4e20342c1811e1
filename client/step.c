/* libps step exchange: one PushPull per shard, each sent as soon as that shard's
 * gradients are final (ps_client_grads_ready), replies collected at step end. */
#include "client_impl.h"

#include <string.h>

typedef struct {
    size_t dropped, fresh; /* shards that dropped the push; that sent values */
} step_ctx;

static int send_push_pull(ps_client *c, size_t i, void *vctx) {
    (void)vctx;
    shard_conn *s = &c->shards[i];
    s->step_sent = 1;
    return ps__send_grads(c, i, s->version, c->step_clock, 1);
}

static int on_push_pulled(ps_client *c, size_t shard, Ps__Header *h, ps_frames *f, void *vctx) {
    step_ctx *ctx = vctx;
    int rc = ps__expect_body(c, shard, h, PS__HEADER__BODY_PUSH_PULL_REPLY, "push-pull");
    if (rc != PS_OK) return rc;
    const Ps__PushPullReply *r = h->push_pull_reply;
    if (r->push && r->push->dropped) ctx->dropped++;
    rc = ps__take_values(c, shard, r->pull, f, "push-pull");
    if (rc == PS_OK) ctx->fresh++;
    return rc;
}

int ps_client_step_begin(ps_client *c, uint64_t clock) {
    if (ps__need_hello(c, "step_begin") != PS_OK) return PS_EINVAL;
    if (c->step_open) return ps__fail(c, PS_EINVAL, "step_begin: a step is already open");
    c->step_open = 1;
    c->step_clock = clock;
    c->push_gen++; /* a new round: gradients are encoded afresh */
    c->step_rc = ps__connect_all(c);
    for (size_t i = 0; i < c->n_shards; i++) {
        c->shards[i].n_ready = 0;
        c->shards[i].step_sent = 0;
    }
    if (c->n_tensors) memset(c->ready, 0, c->n_tensors);
    return c->step_rc;
}

int ps_client_grads_ready(ps_client *c, const float *begin, const float *end) {
    if (!c->step_open) return ps__fail(c, PS_EINVAL, "grads_ready outside a step exchange");
    if (c->step_rc != PS_OK) return c->step_rc;
    for (size_t i = 0; i < c->n_shards; i++) {
        shard_conn *s = &c->shards[i];
        if (s->step_sent || s->n_tensors == 0) continue;
        for (size_t k = 0; k < s->n_tensors; k++) {
            size_t ti = s->tensors[k];
            const ps_client_tensor *t = &c->tensors[ti];
            if (c->ready[ti] || t->grad < begin || t->grad + ps__tensor_numel(t) > end) continue;
            c->ready[ti] = 1;
            s->n_ready++;
        }
        if (s->n_ready == s->n_tensors) {
            int rc = send_push_pull(c, i, NULL);
            if (rc != PS_OK && c->step_rc == PS_OK) c->step_rc = rc;
        }
    }
    return c->step_rc;
}

int ps_client_step_end(ps_client *c, size_t *dropped, int *fresh) {
    if (dropped) *dropped = 0;
    if (fresh) *fresh = 0;
    if (!c->step_open) return ps__fail(c, PS_EINVAL, "step_end without step_begin");
    step_ctx ctx = {0, 0};
    op_spec op = {"push-pull", send_push_pull, on_push_pulled, 1, 1, &ctx};
    int rc = c->step_rc;
    size_t want = 0;
    for (size_t i = 0; i < c->n_shards && rc == PS_OK; i++) {
        shard_conn *s = &c->shards[i];
        if (s->n_tensors == 0) continue;
        want++;
        if (!s->step_sent) rc = send_push_pull(c, i, NULL);
    }
    int rc2 = ps__collect(c, &op); /* also when a send failed: what went out is answered */
    c->step_open = 0;
    if (dropped) *dropped = ctx.dropped;
    if (fresh) *fresh = rc == PS_OK && rc2 == PS_OK && ctx.fresh == want;
    return rc != PS_OK ? rc : rc2;
}
