/* CPU backend of kernels/: OpenBLAS for GEMM, plain loops over the shared
 * element-wise formulas in ew.h for everything else. */
#include <cblas.h>
#include <stdlib.h>
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

/* A malloc'd copy of x[0..n) rounded to prec, or NULL when out of memory. */
static float *rounded_copy(ps_k_prec prec, const float *x, size_t n) {
    float *r = malloc((n ? n : 1) * sizeof *r);
    if (!r) return NULL;
    if (prec == PS_K_PREC_BF16) {
        for (size_t i = 0; i < n; i++)
            r[i] = ps_ew_round_bf16(x[i]);
    } else {
        for (size_t i = 0; i < n; i++)
            r[i] = ps_ew_round_f16(x[i]);
    }
    return r;
}

int ps__cpu_gemm_ex(ps_k_prec prec, bool trans_a, bool trans_b, size_t M, size_t N, size_t K,
                    float alpha, const float *A, const float *B, float beta, float *C) {
    if (prec == PS_K_PREC_F32 || M == 0 || N == 0 || K == 0) {
        ps__cpu_gemm(trans_a, trans_b, M, N, K, alpha, A, B, beta, C);
        return PS_OK;
    }
    float *ra = rounded_copy(prec, A, M * K), *rb = ra ? rounded_copy(prec, B, K * N) : NULL;
    if (!rb) {
        free(ra);
        return PS_ENOMEM;
    }
    ps__cpu_gemm(trans_a, trans_b, M, N, K, alpha, ra, rb, beta, C);
    free(ra);
    free(rb);
    return PS_OK;
}

void ps__cpu_round(ps_k_prec prec, float *x, size_t n) {
    if (prec == PS_K_PREC_BF16) {
        for (size_t i = 0; i < n; i++)
            x[i] = ps_ew_round_bf16(x[i]);
    } else if (prec == PS_K_PREC_F16) {
        for (size_t i = 0; i < n; i++)
            x[i] = ps_ew_round_f16(x[i]);
    }
}

void ps__cpu_scale(float *x, float alpha, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] *= alpha;
}

int ps__cpu_bce_overwrite(float *dlogits, const float *logits, const float *targets, size_t rows,
                          size_t cols, float *loss) {
    if (rows == 0 || cols == 0) return PS_EINVAL;
    size_t n = rows * cols;
    float scale = 1.0f / (float)n;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += ps_ew_bce(logits[i], targets[i]);
    if (dlogits)
        for (size_t i = 0; i < n; i++)
            dlogits[i] = ps_ew_bce_grad(logits[i], targets[i]) * scale;
    *loss = (float)(sum / (double)n);
    return PS_OK;
}

int ps__cpu_mse_overwrite(float *dpred, const float *pred, const float *targets, size_t rows,
                          size_t cols, float *loss) {
    if (rows == 0 || cols == 0) return PS_EINVAL;
    size_t n = rows * cols;
    float scale = 1.0f / (float)n;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += ps_ew_mse(pred[i], targets[i]);
    if (dpred)
        for (size_t i = 0; i < n; i++)
            dpred[i] = ps_ew_mse_grad(pred[i], targets[i]) * scale;
    *loss = (float)(sum / (double)n);
    return PS_OK;
}

void ps__cpu_onehot_overwrite(float *out, const int32_t *labels, size_t rows, size_t cols) {
    if (cols == 1) {
        for (size_t r = 0; r < rows; r++)
            out[r] = (float)labels[r];
        return;
    }
    memset(out, 0, rows * cols * sizeof *out);
    for (size_t r = 0; r < rows; r++)
        if (labels[r] >= 0 && (size_t)labels[r] < cols) out[r * cols + (size_t)labels[r]] = 1.0f;
}

int ps__cpu_binary_correct(const float *logits, const int32_t *labels, size_t rows,
                           size_t *correct) {
    size_t hits = 0;
    for (size_t r = 0; r < rows; r++)
        hits += (logits[r] > 0.0f) == (labels[r] != 0);
    *correct = hits;
    return PS_OK;
}

int ps__cpu_sum(const float *x, size_t n, bool squares, double *out) {
    double s = 0.0;
    if (squares) {
        for (size_t i = 0; i < n; i++)
            s += (double)x[i] * x[i];
    } else {
        for (size_t i = 0; i < n; i++)
            s += x[i];
    }
    *out = s;
    return PS_OK;
}

void ps__cpu_dropout(float *y, const float *x, size_t n, size_t group, float rate,
                     uint64_t seed) {
    float scale = 1.0f / (1.0f - rate);
    if (group <= 1) {
        for (size_t i = 0; i < n; i++)
            y[i] = ps_ew_dropout_keep(seed, i, rate) ? x[i] * scale : 0.0f;
        return;
    }
    for (size_t g = 0; g * group < n; g++) {
        int keep = ps_ew_dropout_keep(seed, g, rate);
        for (size_t i = g * group, end = i + group < n ? i + group : n; i < end; i++)
            y[i] = keep ? x[i] * scale : 0.0f;
    }
}
