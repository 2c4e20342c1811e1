/* Mirrored tables' rows between all-reduce ranks: blocks and their sum
 * (mirror_rows.h). */
#include "mirror_rows.h"

#include <stdio.h>
#include <string.h>

#include "ps_error.h"

/* Bytes of n rows of dim floats, padded to 8; SIZE_MAX on overflow. */
static size_t floats_bytes(size_t n, size_t dim) {
    if (dim && n > (SIZE_MAX - 8) / dim / sizeof(float)) return SIZE_MAX;
    return (n * dim * sizeof(float) + 7) & ~(size_t)7;
}

/* One table's part: count, ids, padded floats. */
static size_t part_bytes(size_t n, size_t dim) {
    size_t f = floats_bytes(n, dim);
    if (f == SIZE_MAX || n > (SIZE_MAX - 8 - f) / 8) return SIZE_MAX;
    return 8 + 8 * n + f;
}

static size_t add_sat(size_t a, size_t b) {
    return a == SIZE_MAX || b == SIZE_MAX || a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

size_t ps_mirror_rows_bytes(const ps_mirror_shape *tabs, size_t n_tables, const size_t *n) {
    size_t total = 0;
    for (size_t e = 0; e < n_tables; e++)
        total = add_sat(total, part_bytes(n[e], tabs[e].dim));
    return total;
}

size_t ps_mirror_rows_max_bytes(const ps_mirror_shape *tabs, size_t n_tables) {
    size_t total = 0;
    for (size_t e = 0; e < n_tables; e++)
        total = add_sat(total, part_bytes(tabs[e].input_dim, tabs[e].dim));
    return total;
}

void ps_mirror_rows_encode(const ps_mirror_shape *tabs, size_t n_tables, const size_t *n,
                           const uint64_t *const *ids, const float *const *grads,
                           unsigned char *out) {
    for (size_t e = 0; e < n_tables; e++) {
        uint64_t count = n[e];
        memcpy(out, &count, 8);
        out += 8;
        if (n[e]) memcpy(out, ids[e], n[e] * 8);
        out += n[e] * 8;
        size_t fb = n[e] * tabs[e].dim * sizeof(float), padded = floats_bytes(n[e], tabs[e].dim);
        if (fb) memcpy(out, grads[e], fb);
        memset(out + fb, 0, padded - fb);
        out += padded;
    }
}

/* Checks rank r's block (len bytes at b) and adds its rows to sums. */
static int add_block(const ps_mirror_shape *tabs, size_t n_tables, const unsigned char *b,
                     size_t len, ps_row_sum *sums, char *err, size_t errlen) {
    size_t at = 0;
    for (size_t e = 0; e < n_tables; e++) {
        uint64_t count;
        if (len - at < 8) {
            snprintf(err, errlen, "its block of %zu bytes ends before table '%s'", len,
                     tabs[e].name);
            return PS_EPROTO;
        }
        memcpy(&count, b + at, 8);
        if (count > tabs[e].input_dim) {
            snprintf(err, errlen, "it sent %llu rows of table '%s', which has %zu",
                     (unsigned long long)count, tabs[e].name, tabs[e].input_dim);
            return PS_EPROTO;
        }
        size_t part = part_bytes((size_t)count, tabs[e].dim);
        if (part > len - at) {
            snprintf(err, errlen, "its block of %zu bytes is too short for %llu rows of table '%s'",
                     len, (unsigned long long)count, tabs[e].name);
            return PS_EPROTO;
        }
        const uint64_t *ids = (const uint64_t *)(const void *)(b + at + 8);
        const float *g = (const float *)(const void *)(b + at + 8 + 8 * count);
        for (size_t i = 0; i < count; i++)
            if (ids[i] >= tabs[e].input_dim) {
                snprintf(err, errlen, "it sent id %llu of table '%s' (ids < %zu)",
                         (unsigned long long)ids[i], tabs[e].name, tabs[e].input_dim);
                return PS_EPROTO;
            }
        if (ps_row_sum_add(&sums[e], ids, (size_t)count, g) != PS_OK) {
            snprintf(err, errlen, "out of memory summing the rows of table '%s'", tabs[e].name);
            return PS_ENOMEM;
        }
        at += part;
    }
    if (at != len) {
        snprintf(err, errlen, "its block has %zu bytes after the last table's rows", len - at);
        return PS_EPROTO;
    }
    return PS_OK;
}

int ps_mirror_rows_sum(const ps_mirror_shape *tabs, size_t n_tables, const unsigned char *all,
                       const size_t *lens, unsigned n_ranks, ps_row_sum *sums, unsigned *bad_rank,
                       char *err, size_t errlen) {
    for (size_t e = 0; e < n_tables; e++)
        ps_row_sum_clear(&sums[e]);
    size_t off = 0;
    for (unsigned r = 0; r < n_ranks; r++) {
        char why[300];
        int rc = add_block(tabs, n_tables, all + off, lens[r], sums, why, sizeof why);
        if (rc == PS_ENOMEM) {
            snprintf(err, errlen, "%s", why);
            return rc;
        }
        if (rc != PS_OK) {
            *bad_rank = r;
            snprintf(err, errlen, "worker %u sent bad embedding rows: %s", r, why);
            return rc;
        }
        off += lens[r];
    }
    if (n_ranks > 1) {
        float scale = 1.0f / (float)n_ranks;
        for (size_t e = 0; e < n_tables; e++)
            ps_row_sum_scale(&sums[e], scale);
    }
    return PS_OK;
}
