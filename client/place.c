/* libps placement: the public ps_place_vars over common/placement.c, taking shapes
 * instead of (rows, row size) and returning plain pieces. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placement.h"
#include "ps.h"

_Static_assert(sizeof(((ps_piece *)0)->name) == sizeof(((ps_place_piece *)0)->name),
               "ps_piece and ps_place_piece names have the same size");

int ps_place_vars(const ps_var_desc *vars, size_t n, unsigned num_shards, ps_piece **pieces,
                  size_t *n_pieces, char *err, size_t errlen) {
    if (pieces) *pieces = NULL;
    if (n_pieces) *n_pieces = 0;
    if (!pieces || !n_pieces || (n && !vars)) {
        snprintf(err, errlen, "ps_place_vars: NULL argument");
        return PS_EINVAL;
    }
    if (num_shards == 0) {
        snprintf(err, errlen, "ps_place_vars: no shards");
        return PS_EINVAL;
    }
    ps_place_var *in = calloc(n ? n : 1, sizeof *in);
    if (!in) {
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        const ps_var_desc *v = &vars[i];
        size_t rows = 1, row_numel = 1;
        if (v->rank && !v->shape) {
            free(in);
            snprintf(err, errlen, "variable %zu: rank %zu but no shape", i, v->rank);
            return PS_EINVAL;
        }
        for (size_t d = 0; d < v->rank; d++) {
            size_t dim = v->shape[d];
            if (dim == 0 || (d > 0 && row_numel > SIZE_MAX / 4 / dim)) {
                free(in);
                snprintf(err, errlen, "variable %zu (%.80s): dimension %zu is %s", i,
                         v->name ? v->name : "?", d, dim == 0 ? "0" : "too large");
                return PS_EINVAL;
            }
            if (d == 0)
                rows = dim;
            else
                row_numel *= dim;
        }
        in[i] = (ps_place_var){v->name, rows, row_numel};
    }
    ps_placement pl;
    int rc = ps_place(in, n, num_shards, PS_PLACE_MIN_SLICE_BYTES, &pl);
    free(in);
    if (rc != PS_OK) {
        snprintf(err, errlen,
                 rc == PS_ENOMEM ? "out of memory"
                                 : "cannot place these variables: names must be non-empty, "
                                   "unique and at most 79 bytes, sizes must fit in memory");
        return rc;
    }
    ps_piece *out = calloc(pl.n ? pl.n : 1, sizeof *out);
    if (!out) {
        ps_placement_free(&pl);
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    for (size_t k = 0; k < pl.n; k++) {
        const ps_place_piece *p = &pl.pieces[k];
        out[k] = (ps_piece){p->var, p->shard, p->part, p->num_parts, p->row_begin, p->row_end, ""};
        memcpy(out[k].name, p->name, sizeof out[k].name);
    }
    *pieces = out;
    *n_pieces = pl.n;
    ps_placement_free(&pl);
    return PS_OK;
}

void ps_pieces_free(ps_piece *pieces) {
    free(pieces);
}
