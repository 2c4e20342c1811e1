/* Gradient accumulation (see accumulate.h). */
#include "accumulate.h"

#include <stdlib.h>
#include <string.h>

#include "ps_error.h"

enum { PHASE_SUM, PHASE_LAST, PHASE_PASS }; /* what the hook does with a final range */

struct ps_accum {
    ps_model *m;     /* borrowed */
    ps_exchange *ex; /* borrowed */
    float *sum;      /* owned: sum of nb x gradient over the step's earlier micro-batches */
    uint8_t *done;   /* owned: per float, made final during the last micro-batch */
    size_t n;        /* floats */
    size_t samples;  /* samples of the step's earlier micro-batches */
    int phase;
    float w, inv; /* last micro-batch: its weight (nb) and 1 / the step's samples */
};

/* The step's gradient over [lo, hi): (sum + nb x g) / samples, in place. */
static void combine(ps_accum *a, size_t lo, size_t hi) {
    float *g = ps_model_grads(a->m);
    for (size_t i = lo; i < hi; i++)
        g[i] = (a->sum[i] + a->w * g[i]) * a->inv;
    memset(a->done + lo, 1, hi - lo);
}

/* The model's gradient hook. Earlier micro-batches: nothing (summed after
 * the pass, all at once); the last: combine the range, then the exchange. */
static void hook(void *ctx, const float *begin, const float *end) {
    ps_accum *a = ctx;
    if (a->phase == PHASE_SUM) return;
    if (a->phase == PHASE_LAST) {
        const float *g = ps_model_grads(a->m);
        size_t lo = (size_t)(begin - g), hi = (size_t)(end - g);
        if (lo > a->n || hi > a->n || lo > hi) return; /* not the model's gradients */
        combine(a, lo, hi);
    }
    ps_exchange_grads_ready(a->ex, begin, end);
}

int ps_accum_new(ps_model *m, ps_exchange *ex, ps_accum **out) {
    *out = NULL;
    ps_accum *a = calloc(1, sizeof *a);
    size_t n = ps_model_num_updated_params(m); /* the frozen variables have no gradient */
    if (!a || !(a->sum = malloc((n ? n : 1) * sizeof *a->sum)) || !(a->done = malloc(n ? n : 1))) {
        ps_accum_free(a);
        return PS_ENOMEM;
    }
    a->m = m;
    a->ex = ex;
    a->n = n;
    ps_model_set_grad_hook(m, hook, a);
    *out = a;
    return PS_OK;
}

void ps_accum_free(ps_accum *a) {
    if (!a) return;
    free(a->sum);
    free(a->done);
    free(a);
}

int ps_accum_micro_step(ps_accum *a, const float *x, const int32_t *y, size_t nb, int first,
                        int last, float *loss, size_t *correct) {
    if (first) a->samples = 0;
    a->phase = !last ? PHASE_SUM : first ? PHASE_PASS : PHASE_LAST;
    if (a->phase == PHASE_LAST) {
        a->w = (float)nb;
        a->inv = 1.0f / (float)(a->samples + nb);
        memset(a->done, 0, a->n);
    }
    int rc = ps_model_train_step(a->m, x, y, nb, loss, correct);
    if (rc != PS_OK) return rc;
    const float *g = ps_model_grads(a->m);
    if (a->phase == PHASE_SUM) {
        float w = (float)nb;
        if (first)
            for (size_t i = 0; i < a->n; i++)
                a->sum[i] = w * g[i];
        else
            for (size_t i = 0; i < a->n; i++)
                a->sum[i] += w * g[i];
        a->samples += nb;
    } else if (a->phase == PHASE_LAST) {
        /* ranges the model did not report (none on the CPU, where every
         * variable's gradients are reported; on CUDA one call covers all) */
        for (size_t i = 0; i < a->n;) {
            if (a->done[i]) {
                i++;
                continue;
            }
            size_t j = i;
            while (j < a->n && !a->done[j])
                j++;
            combine(a, i, j);
            /* loss scaling: the loop unscales and checks the whole gradient, then
             * hands it on (step_end_checked) */
            if (ps_model_loss_scale(a->m) <= 0.0f) ps_exchange_grads_ready(a->ex, g + i, g + j);
            i = j;
        }
    }
    return PS_OK;
}
