/* Variable placement: row-split big variables (MinSizePartitioner rule), then greedy
 * largest-first assignment to the least-loaded shard. Pure and deterministic. */
#include "placement.h"

#include "ps_error.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FLOAT_BYTES 4u
#define PART_SUFFIX "/part_"
/* Longest variable name: leaves room for "/part_" and the 10 digits of any unsigned part. */
#define MAX_VAR_NAME (sizeof(((ps_place_piece *)0)->name) - 1 - (sizeof PART_SUFFIX - 1) - 10)

_Static_assert(MAX_VAR_NAME == 79, "placement.h documents a 79-byte name limit");

typedef struct {
    size_t bytes;
    size_t idx; /* index in the output, i.e. (var, part) order */
} order_item;

/* Largest first; ties by (var, part), which is output order. A total order, so qsort's
 * instability cannot make two workers disagree. */
static int cmp_order(const void *a, const void *b) {
    const order_item *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Returns 1 if two of the n strings are equal (n == 0 or 1: none). On allocation failure
 * returns -1. */
static int has_duplicate(const char **names, size_t n) {
    if (n < 2) return 0;
    const char **sorted = malloc(n * sizeof *sorted);
    if (!sorted) return -1;
    memcpy(sorted, names, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_str);
    int dup = 0;
    for (size_t i = 1; i < n && !dup; i++)
        dup = strcmp(sorted[i - 1], sorted[i]) == 0;
    free(sorted);
    return dup;
}

/* Number of parts for a variable: min(num_shards, rows, ceil(bytes / min_slice)), at least 1. */
static unsigned num_parts(size_t rows, size_t bytes, unsigned num_shards, size_t min_slice) {
    size_t slices = bytes / min_slice + (bytes % min_slice != 0);
    size_t k = num_shards;
    if (rows < k) k = rows;
    if (slices < k) k = slices;
    return k < 1 ? 1u : (unsigned)k;
}

void ps_placement_free(ps_placement *p) {
    if (!p) return;
    free(p->pieces);
    p->pieces = NULL;
    p->n = 0;
}

int ps_place(const ps_place_var *vars, size_t n, unsigned num_shards, size_t min_slice_bytes,
             ps_placement *out) {
    if (!out) return PS_EINVAL;
    out->pieces = NULL;
    out->n = 0;
    if (num_shards == 0 || min_slice_bytes == 0 || (n > 0 && !vars)) return PS_EINVAL;
    if (n == 0) return PS_OK;

    /* Validate every variable and count the pieces. */
    size_t total_pieces = 0, total_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const ps_place_var *v = &vars[i];
        if (!v->name || v->name[0] == '\0' || strlen(v->name) > MAX_VAR_NAME) return PS_EINVAL;
        if (v->rows == 0 || v->row_numel == 0) return PS_EINVAL;
        if (v->row_numel > SIZE_MAX / FLOAT_BYTES / v->rows) return PS_EINVAL;
        size_t bytes = v->rows * v->row_numel * FLOAT_BYTES;
        if (bytes > SIZE_MAX - total_bytes) return PS_EINVAL;
        total_bytes += bytes;
        total_pieces += num_parts(v->rows, bytes, num_shards, min_slice_bytes);
    }

    const char **names = malloc(n * sizeof *names);
    if (!names) return PS_ENOMEM;
    for (size_t i = 0; i < n; i++)
        names[i] = vars[i].name;
    int dup = has_duplicate(names, n);
    free(names);
    if (dup < 0) return PS_ENOMEM;
    if (dup) return PS_EINVAL;

    ps_place_piece *pieces = calloc(total_pieces, sizeof *pieces);
    order_item *order = malloc(total_pieces * sizeof *order);
    const char **pnames = malloc(total_pieces * sizeof *pnames);
    /* With lowest-index tie-breaking, only shards [0, total_pieces) can ever receive a piece. */
    size_t used_shards = num_shards < total_pieces ? num_shards : total_pieces;
    size_t *load = calloc(used_shards, sizeof *load);
    int rc = PS_OK;
    if (!pieces || !order || !pnames || !load) {
        rc = PS_ENOMEM;
        goto done;
    }

    /* Split: pieces in (var, part) order; the first rows % k parts get one extra row. */
    size_t np = 0;
    for (size_t i = 0; i < n; i++) {
        const ps_place_var *v = &vars[i];
        size_t bytes = v->rows * v->row_numel * FLOAT_BYTES;
        unsigned k = num_parts(v->rows, bytes, num_shards, min_slice_bytes);
        size_t base = v->rows / k, extra = v->rows % k, row = 0;
        for (unsigned p = 0; p < k; p++) {
            ps_place_piece *pc = &pieces[np];
            size_t nrows = base + (p < extra);
            pc->var = i;
            pc->part = p;
            pc->num_parts = k;
            pc->row_begin = row;
            pc->row_end = row + nrows;
            row += nrows;
            if (k == 1)
                snprintf(pc->name, sizeof pc->name, "%s", v->name);
            else
                snprintf(pc->name, sizeof pc->name, "%s" PART_SUFFIX "%u", v->name, p);
            order[np].bytes = nrows * v->row_numel * FLOAT_BYTES;
            order[np].idx = np;
            pnames[np] = pc->name;
            np++;
        }
    }

    /* A variable named "a/part_0" next to a split "a" would give two pieces one name. */
    dup = has_duplicate(pnames, np);
    if (dup) {
        rc = dup < 0 ? PS_ENOMEM : PS_EINVAL;
        goto done;
    }

    /* Balance: largest first, each to the least-loaded shard (lowest index on ties). */
    qsort(order, np, sizeof *order, cmp_order);
    for (size_t j = 0; j < np; j++) {
        size_t best = 0;
        for (size_t s = 1; s < used_shards; s++)
            if (load[s] < load[best]) best = s;
        load[best] += order[j].bytes;
        pieces[order[j].idx].shard = (unsigned)best;
    }

    out->pieces = pieces;
    out->n = np;
    pieces = NULL;

done:
    free(pieces);
    free(order);
    free(pnames);
    free(load);
    return rc;
}
