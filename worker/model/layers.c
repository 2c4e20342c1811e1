/* Dense and activation layers (see layers.h): thin compositions of kernels/. */
#include "layers.h"

#include "ps_error.h"

void ps_dense_forward(ps_k_dev *d, float *out, const float *in, const float *w, const float *b,
                      size_t B, size_t C_in, size_t C_out) {
    ps_k_gemm(d, false, false, B, C_out, C_in, 1.0f, in, w, 0.0f, out);
    if (b) ps_k_bias_add_rows_acc(d, out, b, B, C_out);
}

static void dense_backward(ps_k_dev *d, float *din, float *dw, float *db, const float *dout,
                           const float *in, const float *w, size_t B, size_t C_in, size_t C_out,
                           float beta) {
    /* dw[C_in, C_out] = in^T[C_in, B] @ dout[B, C_out] (+ beta * dw) */
    if (dw) ps_k_gemm(d, true, false, C_in, C_out, B, 1.0f, in, dout, beta, dw);
    if (db) {
        if (beta == 0.0f)
            ps_k_bias_grad_overwrite(d, db, dout, B, C_out);
        else
            ps_k_bias_grad_acc(d, db, dout, B, C_out);
    }
    /* din[B, C_in] = dout[B, C_out] @ w^T[C_out, C_in] */
    if (din) ps_k_gemm(d, false, true, B, C_in, C_out, 1.0f, dout, w, 0.0f, din);
}

void ps_dense_backward_overwrite(ps_k_dev *d, float *din, float *dw, float *db, const float *dout,
                                 const float *in, const float *w, size_t B, size_t C_in,
                                 size_t C_out) {
    dense_backward(d, din, dw, db, dout, in, w, B, C_in, C_out, 0.0f);
}

void ps_dense_backward_acc(ps_k_dev *d, float *din, float *dw, float *db, const float *dout,
                           const float *in, const float *w, size_t B, size_t C_in, size_t C_out) {
    dense_backward(d, din, dw, db, dout, in, w, B, C_in, C_out, 1.0f);
}

int ps_dense_forward_ex(ps_k_dev *d, ps_k_prec prec, float *out, const float *in, const float *w,
                        const float *b, size_t B, size_t C_in, size_t C_out) {
    int rc = ps_k_gemm_ex(d, prec, false, false, B, C_out, C_in, 1.0f, in, w, 0.0f, out);
    if (rc == PS_OK && b) ps_k_bias_add_rows_acc(d, out, b, B, C_out);
    return rc;
}

int ps_dense_backward_overwrite_ex(ps_k_dev *d, ps_k_prec prec, float *din, float *dw, float *db,
                                   const float *dout, const float *in, const float *w, size_t B,
                                   size_t C_in, size_t C_out) {
    int rc = dw ? ps_k_gemm_ex(d, prec, true, false, C_in, C_out, B, 1.0f, in, dout, 0.0f, dw)
                : PS_OK;
    if (rc == PS_OK && db) ps_k_bias_grad_overwrite(d, db, dout, B, C_out);
    if (rc == PS_OK && din)
        rc = ps_k_gemm_ex(d, prec, false, true, B, C_in, C_out, 1.0f, dout, w, 0.0f, din);
    return rc;
}

void ps_activation_forward(ps_k_dev *d, ps_k_act act, float *out, const float *in, size_t n) {
    ps_k_act_forward_overwrite(d, act, out, in, n);
}

void ps_activation_backward_overwrite(ps_k_dev *d, ps_k_act act, float *din, const float *dout,
                                      const float *out, size_t n) {
    ps_k_act_backward_overwrite(d, act, din, dout, NULL, out, n);
}
