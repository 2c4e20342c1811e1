/* CPU backend of kernels/: OpenBLAS for GEMM, plain loops over the shared
 * element-wise formulas in ew.h for everything else. */
#include <cblas.h>
#include <string.h>

#include "backend.h"
#include "ew.h"
#include "ps_error.h"

void ps_k_set_threads(int n) {
    openblas_set_num_threads(n < 1 ? 1 : n);
}

void ps__cpu_gemm(bool trans_a, bool trans_b, size_t M, size_t N, size_t K, float alpha,
                  const float *A, const float *B, float beta, float *C) {
    if (M == 0 || N == 0) return;
    if (K == 0) { /* BLAS would need lda >= 1 for an empty A: do it here */
        for (size_t i = 0; i < M * N; i++)
            C[i] = beta == 0.0f ? 0.0f : beta * C[i];
        return;
    }
    int lda = (int)(trans_a ? M : K);
    int ldb = (int)(trans_b ? K : N);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha, A, lda, B, ldb,
                beta, C, (int)N);
}

void ps__cpu_bias_add_rows_acc(float *x, const float *bias, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++) {
        float *row = x + r * cols;
        for (size_t c = 0; c < cols; c++)
            row[c] += bias[c];
    }
}

void ps__cpu_col_sum(float *out, const float *x, size_t rows, size_t cols, bool acc) {
    if (!acc) memset(out, 0, cols * sizeof *out);
    for (size_t r = 0; r < rows; r++) {
        const float *row = x + r * cols;
        for (size_t c = 0; c < cols; c++)
            out[c] += row[c];
    }
}

void ps__cpu_act_forward_overwrite(ps_k_act act, float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] = ps_ew_act_fwd((int)act, x[i]);
}

void ps__cpu_act_backward(ps_k_act act, float *dx, const float *dy, const float *y, size_t n,
                          bool acc) {
    if (acc) {
        for (size_t i = 0; i < n; i++)
            dx[i] += ps_ew_act_bwd((int)act, y[i], dy[i]);
    } else {
        for (size_t i = 0; i < n; i++)
            dx[i] = ps_ew_act_bwd((int)act, y[i], dy[i]);
    }
}

void ps__cpu_softmax_rows_overwrite(float *probs, const float *logits, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++)
        ps_ew_softmax_row(probs + r * cols, logits + r * cols, (int)cols);
}

int ps__cpu_softmax_ce_overwrite(float *dlogits, const float *logits, const int32_t *labels,
                                 size_t rows, size_t cols, float *loss) {
    if (rows == 0 || cols == 0) return PS_EINVAL;
    for (size_t r = 0; r < rows; r++)
        if (labels[r] < 0 || (size_t)labels[r] >= cols) return PS_EINVAL;
    float scale = 1.0f / (float)rows;
    double sum = 0.0;
    for (size_t r = 0; r < rows; r++) {
        sum += ps_ew_softmax_ce_row(dlogits ? dlogits + r * cols : NULL, logits + r * cols,
                                    labels[r], (int)cols, scale);
    }
    *loss = (float)(sum / (double)rows);
    return PS_OK;
}

int ps__cpu_argmax_correct(const float *logits, const int32_t *labels, size_t rows, size_t cols,
                           size_t *correct) {
    if (cols == 0) return PS_EINVAL;
    size_t hits = 0;
    for (size_t r = 0; r < rows; r++)
        hits += ps_ew_argmax_row(logits + r * cols, (int)cols) == labels[r];
    *correct = hits;
    return PS_OK;
}
