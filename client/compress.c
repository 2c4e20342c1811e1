/* libps gradient compression (ps_client_set_compression): the encodings of
 * common/half.h applied to each pushed tensor, once per push round, with the
 * top-k residuals (error feedback) kept per registered tensor. */
#include "client_impl.h"

#include <stdlib.h>
#include <string.h>

#include "half.h"

int ps_client_set_compression(ps_client *c, ps_compression kind, float ratio) {
    if (c->step_open) return ps__fail(c, PS_EINVAL, "set_compression during a step exchange");
    if (kind != PS_COMPRESS_NONE && kind != PS_COMPRESS_F16 && kind != PS_COMPRESS_BF16 &&
        kind != PS_COMPRESS_TOPK)
        return ps__fail(c, PS_EINVAL, "unknown compression %d", (int)kind);
    if (kind == PS_COMPRESS_TOPK && !(ratio > 0.0f && ratio <= 1.0f))
        return ps__fail(c, PS_EINVAL, "top-k ratio %g: want 0 < ratio <= 1", (double)ratio);
    if (kind != c->compress) /* residuals belong to one kind: start afresh */
        for (size_t i = 0; c->enc && i < c->n_tensors; i++) {
            free(c->enc[i].residual);
            c->enc[i].residual = NULL;
        }
    c->compress = kind;
    c->topk_ratio = kind == PS_COMPRESS_TOPK ? ratio : 0.0f;
    c->push_gen++; /* nothing encoded before applies */
    return PS_OK;
}

uint64_t ps_client_push_bytes(const ps_client *c) {
    return c->push_bytes;
}

float *ps_client_topk_residual(ps_client *c, size_t i, size_t *numel) {
    if (c->compress != PS_COMPRESS_TOPK || i >= c->n_tensors || !c->enc) return NULL;
    size_t n = ps__tensor_numel(&c->tensors[i]);
    enc_state *e = &c->enc[i];
    if (!e->residual && !(e->residual = calloc(n ? n : 1, sizeof(float)))) return NULL;
    if (numel) *numel = n;
    return e->residual;
}

static int grow(ps_client *c, enc_state *e, size_t bytes) {
    if (e->cap >= bytes) return PS_OK;
    unsigned char *b = realloc(e->buf, bytes);
    if (!b) return ps__fail(c, PS_ENOMEM, "out of memory encoding a gradient");
    e->buf = b;
    e->cap = bytes;
    return PS_OK;
}

static int encode(ps_client *c, size_t ti) {
    const ps_client_tensor *t = &c->tensors[ti];
    enc_state *e = &c->enc[ti];
    size_t n = ps__tensor_numel(t);
    if (c->compress == PS_COMPRESS_F16 || c->compress == PS_COMPRESS_BF16) {
        if (grow(c, e, n * 2) != PS_OK) return PS_ENOMEM;
        size_t sat = ps_half_encode(c->compress == PS_COMPRESS_F16 ? PS_HALF_F16 : PS_HALF_BF16,
                                    t->grad, n, (uint16_t *)(void *)e->buf);
        if (sat && !c->warned_saturated) {
            c->warned_saturated = 1;
            CL_WARN("%zu gradient values of '%s' beyond the %s range were saturated (said once)",
                    sat, t->name, c->compress == PS_COMPRESS_F16 ? "float16" : "bfloat16");
        }
        e->bytes = n * 2;
        e->nnz = 0;
        return PS_OK;
    }
    /* top-k with error feedback */
    size_t k = ps_topk_k(n, c->topk_ratio);
    if (!e->residual && !(e->residual = calloc(n, sizeof(float))))
        return ps__fail(c, PS_ENOMEM, "out of memory for the top-k residual");
    if (c->enc_scratch_cap < n) {
        uint32_t *s = realloc(c->enc_scratch, n * sizeof *s);
        if (!s) return ps__fail(c, PS_ENOMEM, "out of memory");
        c->enc_scratch = s;
        c->enc_scratch_cap = n;
    }
    if (grow(c, e, k * PS_TOPK_PAIR_BYTES) != PS_OK) return PS_ENOMEM;
    ps_topk_compress(e->residual, t->grad, n, k, e->buf, c->enc_scratch);
    e->bytes = k * PS_TOPK_PAIR_BYTES;
    e->nnz = k;
    return PS_OK;
}

int ps__grad_payload(ps_client *c, size_t ti, Ps__TensorMeta *m, ps_payload *pl) {
    const ps_client_tensor *t = &c->tensors[ti];
    if (c->compress == PS_COMPRESS_NONE || c->push_skipped) {
        /* a skipped push (ps_client_set_push_skipped) is not applied: nothing is
         * encoded, so top-k's residual keeps what it holds for the next push */
        *pl = (ps_payload){t->grad, ps__tensor_numel(t) * sizeof(float), NULL, NULL};
    } else {
        enc_state *e = &c->enc[ti];
        if (e->gen != c->push_gen) { /* a re-send of this round reuses the encoding */
            int rc = encode(c, ti);
            if (rc != PS_OK) return rc;
            e->gen = c->push_gen;
        }
        m->dtype = c->compress == PS_COMPRESS_F16    ? PS__DTYPE__DT_F16
                   : c->compress == PS_COMPRESS_BF16 ? PS__DTYPE__DT_BF16
                                                     : PS__DTYPE__DT_TOPK_F32;
        m->nnz = e->nnz;
        /* zero-copy: the encoding stays unchanged until the next push round */
        *pl = (ps_payload){e->buf, e->bytes, NULL, NULL};
    }
    m->nbytes = pl->len;
    c->push_bytes += pl->len;
    return PS_OK;
}

void ps__compress_free(ps_client *c) {
    for (size_t i = 0; c->enc && i < c->n_tensors; i++) {
        free(c->enc[i].buf);
        free(c->enc[i].residual);
    }
    free(c->enc);
    free(c->enc_scratch);
}
