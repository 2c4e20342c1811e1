/* Row gradients summed by id (row_sum.h). */
#include "row_sum.h"

#include <stdlib.h>
#include <string.h>

#include "ps_error.h"

#define KEEP_BYTES ((size_t)64 << 20) /* memory a cleared sum keeps for the next step */

static size_t home(uint64_t id, size_t mask) {
    id ^= id >> 33;
    id *= 0xFF51AFD7ED558CCDull;
    id ^= id >> 33;
    return (size_t)id & mask;
}

void ps_row_sum_init(ps_row_sum *s, size_t dim) {
    memset(s, 0, sizeof *s);
    s->dim = dim;
}

void ps_row_sum_free(ps_row_sum *s) {
    free(s->ids), free(s->sums), free(s->index);
    ps_row_sum_init(s, s->dim);
}

static int grow_index(ps_row_sum *s) {
    size_t cap = s->index_cap ? 2 * s->index_cap : 64;
    uint32_t *idx = calloc(cap, sizeof *idx);
    if (!idx) return PS_ENOMEM;
    for (size_t e = 0; e < s->n; e++) {
        size_t i = home(s->ids[e], cap - 1);
        while (idx[i]) i = (i + 1) & (cap - 1);
        idx[i] = (uint32_t)e + 1;
    }
    free(s->index);
    s->index = idx, s->index_cap = cap;
    return PS_OK;
}

static int grow_rows(ps_row_sum *s) {
    size_t cap = s->cap ? 2 * s->cap : 64;
    uint64_t *ids = realloc(s->ids, cap * sizeof *ids);
    if (!ids) return PS_ENOMEM;
    s->ids = ids;
    float *sums = realloc(s->sums, cap * s->dim * sizeof *sums);
    if (!sums) return PS_ENOMEM;
    s->sums = sums, s->cap = cap;
    return PS_OK;
}

int ps_row_sum_add(ps_row_sum *s, const uint64_t *ids, size_t n, const float *grads) {
    size_t dim = s->dim;
    for (size_t k = 0; k < n; k++) {
        if (2 * (s->n + 1) > s->index_cap && grow_index(s) != PS_OK) return PS_ENOMEM;
        size_t mask = s->index_cap - 1, i = home(ids[k], mask);
        while (s->index[i] && s->ids[s->index[i] - 1] != ids[k]) i = (i + 1) & mask;
        const float *g = grads + k * dim;
        if (s->index[i]) {
            float *sum = s->sums + (size_t)(s->index[i] - 1) * dim;
            for (size_t d = 0; d < dim; d++) sum[d] += g[d];
            continue;
        }
        if (s->n == s->cap && grow_rows(s) != PS_OK) return PS_ENOMEM;
        s->ids[s->n] = ids[k];
        memcpy(s->sums + s->n * dim, g, dim * sizeof *g);
        s->index[i] = (uint32_t)++s->n;
    }
    return PS_OK;
}

void ps_row_sum_scale(ps_row_sum *s, float f) {
    for (size_t i = 0; i < s->n * s->dim; i++) s->sums[i] *= f;
}

void ps_row_sum_clear(ps_row_sum *s) {
    if (s->cap * s->dim * sizeof(float) > KEEP_BYTES) {
        ps_row_sum_free(s);
        return;
    }
    if (s->n) memset(s->index, 0, s->index_cap * sizeof *s->index);
    s->n = 0;
}
