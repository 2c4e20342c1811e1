/* Row gradients summed by id: a sync step's pushes from every worker on psd
 * (rows pushed by several workers are combined, not overwritten), one push
 * whose ids repeat, or every all-reduce rank's rows of a mirrored table (in
 * rank order, so every rank sums alike). Ids keep the order of their first
 * appearance. No I/O. */
#ifndef PS_ROW_SUM_H
#define PS_ROW_SUM_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t dim;
    uint64_t *ids; /* n distinct ids */
    float *sums;   /* n * dim */
    size_t n, cap;
    uint32_t *index; /* open addressing: entry + 1, 0 empty */
    size_t index_cap;
} ps_row_sum;

void ps_row_sum_init(ps_row_sum *s, size_t dim);
void ps_row_sum_free(ps_row_sum *s);
/* Adds grads[n * dim] of ids[0..n). PS_OK or PS_ENOMEM (some rows may have been
 * added: the caller drops the sum). */
int ps_row_sum_add(ps_row_sum *s, const uint64_t *ids, size_t n, const float *grads);
/* Multiplies every sum by f. */
void ps_row_sum_scale(ps_row_sum *s, float f);
/* Empties the sum, keeping its memory (up to a bound, beyond which it is freed). */
void ps_row_sum_clear(ps_row_sum *s);

#endif
