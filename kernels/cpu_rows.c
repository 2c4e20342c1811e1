/* CPU backend of kernels/: an embedding layer's rows. The lookup copies each
 * sample's row; the rows' gradient sums, for each row, the samples that read
 * it in the order the caller grouped them (the CUDA backend sums in the same
 * order, so both give the same bits). */
#include <string.h>

#include "backend.h"

void ps__cpu_gather_rows_overwrite(float *y, const float *rows, const uint32_t *where, size_t batch,
                                   size_t dim) {
    for (size_t i = 0; i < batch; i++)
        memcpy(y + i * dim, rows + (size_t)where[i] * dim, dim * sizeof *y);
}

void ps__cpu_scatter_rows_overwrite(float *drows, const float *dy, const uint32_t *order,
                                    const uint32_t *offs, size_t n, size_t dim) {
    for (size_t u = 0; u < n; u++) {
        float *restrict g = drows + u * dim;
        memset(g, 0, dim * sizeof *g);
        for (uint32_t k = offs[u]; k < offs[u + 1]; k++) {
            const float *restrict s = dy + (size_t)order[k] * dim;
            for (size_t c = 0; c < dim; c++)
                g[c] += s[c];
        }
    }
}
