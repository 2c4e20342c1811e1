/* Reference kernels (see ref.h): the obvious loops, in double, written
 * independently of ew.h so that the tests check the shared formulas too. */
#include "ref.h"

#include <math.h>
#include <stdlib.h>

#include "ps_error.h"

void ps_ref_gemm(bool trans_a, bool trans_b, size_t M, size_t N, size_t K, float alpha,
                 const float *A, const float *B, float beta, float *C) {
    for (size_t i = 0; i < M; i++) {
        for (size_t j = 0; j < N; j++) {
            double acc = 0.0;
            for (size_t k = 0; k < K; k++) {
                double a = trans_a ? A[k * M + i] : A[i * K + k];
                double b = trans_b ? B[j * K + k] : B[k * N + j];
                acc += a * b;
            }
            double c = beta == 0.0f ? 0.0 : (double)beta * C[i * N + j];
            C[i * N + j] = (float)(alpha * acc + c);
        }
    }
}

void ps_ref_bias_add_rows_acc(float *x, const float *bias, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            x[r * cols + c] += bias[c];
}

void ps_ref_col_sum_overwrite(float *out, const float *x, size_t rows, size_t cols) {
    for (size_t c = 0; c < cols; c++) {
        double s = 0.0;
        for (size_t r = 0; r < rows; r++)
            s += x[r * cols + c];
        out[c] = (float)s;
    }
}

void ps_ref_col_sum_acc(float *out, const float *x, size_t rows, size_t cols) {
    for (size_t c = 0; c < cols; c++) {
        double s = out[c];
        for (size_t r = 0; r < rows; r++)
            s += x[r * cols + c];
        out[c] = (float)s;
    }
}

static double act_f(ps_k_act act, double x) {
    switch (act) {
    case PS_K_ACT_RELU:
        return x > 0 ? x : 0;
    case PS_K_ACT_SIGMOID:
        return 1.0 / (1.0 + exp(-x));
    case PS_K_ACT_TANH:
        return tanh(x);
    default:
        return x;
    }
}

/* f'(x) expressed through y = f(x). */
static double act_df(ps_k_act act, double y) {
    switch (act) {
    case PS_K_ACT_RELU:
        return y > 0 ? 1 : 0;
    case PS_K_ACT_SIGMOID:
        return y * (1 - y);
    case PS_K_ACT_TANH:
        return 1 - y * y;
    default:
        return 1;
    }
}

void ps_ref_act_forward_overwrite(ps_k_act act, float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] = (float)act_f(act, x[i]);
}

void ps_ref_act_backward_overwrite(ps_k_act act, float *dx, const float *dy, const float *y,
                                   size_t n) {
    for (size_t i = 0; i < n; i++)
        dx[i] = (float)(act_df(act, y[i]) * dy[i]);
}

void ps_ref_act_backward_acc(ps_k_act act, float *dx, const float *dy, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++)
        dx[i] = (float)(dx[i] + act_df(act, y[i]) * dy[i]);
}

void ps_ref_softmax_rows_overwrite(float *probs, const float *logits, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++) {
        const float *x = logits + r * cols;
        double mx = x[0], sum = 0.0;
        for (size_t c = 1; c < cols; c++)
            mx = x[c] > mx ? x[c] : mx;
        for (size_t c = 0; c < cols; c++)
            sum += exp(x[c] - mx);
        for (size_t c = 0; c < cols; c++)
            probs[r * cols + c] = (float)(exp(x[c] - mx) / sum);
    }
}

int ps_ref_softmax_ce_overwrite(float *dlogits, const float *logits, const int32_t *labels,
                                size_t rows, size_t cols, float *loss) {
    if (rows == 0 || cols == 0) return PS_EINVAL;
    for (size_t r = 0; r < rows; r++)
        if (labels[r] < 0 || (size_t)labels[r] >= cols) return PS_EINVAL;
    double total = 0.0;
    for (size_t r = 0; r < rows; r++) {
        const float *x = logits + r * cols;
        double mx = x[0], sum = 0.0;
        for (size_t c = 1; c < cols; c++)
            mx = x[c] > mx ? x[c] : mx;
        for (size_t c = 0; c < cols; c++)
            sum += exp(x[c] - mx);
        total += mx + log(sum) - x[labels[r]];
        if (dlogits) {
            for (size_t c = 0; c < cols; c++) {
                double p = exp(x[c] - mx) / sum;
                dlogits[r * cols + c] = (float)((p - ((int32_t)c == labels[r])) / (double)rows);
            }
        }
    }
    *loss = (float)(total / (double)rows);
    return PS_OK;
}

int ps_ref_argmax_correct(const float *logits, const int32_t *labels, size_t rows, size_t cols,
                          size_t *correct) {
    if (cols == 0) return PS_EINVAL;
    size_t hits = 0;
    for (size_t r = 0; r < rows; r++) {
        size_t best = 0;
        for (size_t c = 1; c < cols; c++)
            if (logits[r * cols + c] > logits[r * cols + best]) best = c;
        hits += (int32_t)best == labels[r];
    }
    *correct = hits;
    return PS_OK;
}
