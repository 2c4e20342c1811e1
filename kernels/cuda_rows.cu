/* CUDA backend of kernels/, part 5: an embedding layer's rows. One thread per
 * output element: the lookup copies, the rows' gradient sums the samples of
 * its row in the caller's order (a gather: no atomics, the CPU's bits).
 * Compiled by nvcc; not run on the build hosts (no GPU). */
#include "cuda_common.cuh"

__global__ void gather_rows_kernel(float *y, const float *rows, const uint32_t *where,
                                   size_t batch, size_t dim) {
    GRID_STRIDE_LOOP(i, batch * dim) y[i] = rows[(size_t)where[i / dim] * dim + i % dim];
}

__global__ void scatter_rows_kernel(float *drows, const float *dy, const uint32_t *order,
                                    const uint32_t *offs, size_t n, size_t dim) {
    GRID_STRIDE_LOOP(i, n * dim) {
        size_t u = i / dim, c = i % dim;
        float acc = 0.0f;
        for (uint32_t k = offs[u]; k < offs[u + 1]; k++)
            acc += dy[(size_t)order[k] * dim + c];
        drows[i] = acc;
    }
}

extern "C" void ps__cuda_gather_rows_overwrite(ps_k_dev *d, float *y, const float *rows,
                                               const uint32_t *where, size_t batch, size_t dim) {
    launch(d, gather_rows_kernel, batch * dim, y, rows, where, batch, dim);
}

extern "C" void ps__cuda_scatter_rows_overwrite(ps_k_dev *d, float *drows, const float *dy,
                                                const uint32_t *order, const uint32_t *offs,
                                                size_t n, size_t dim) {
    launch(d, scatter_rows_kernel, n * dim, drows, dy, order, offs, n, dim);
}
