/* The public kernels API: device selection and memory, and dispatch of each
 * kernel to the CPU backend (cpu.c) or the CUDA backend (cuda.cu). */
#include "kernels.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ps_error.h"

static ps_k_dev cpu_dev = {.kind = PS_K_CPU, .name = "cpu"};

#ifdef PS_HAVE_CUDA
#define IF_CUDA(d, call)                                                                           \
    do {                                                                                           \
        if ((d)->kind == PS_K_CUDA) {                                                              \
            call;                                                                                  \
            return;                                                                                \
        }                                                                                          \
    } while (0)
#define IF_CUDA_RET(d, call)                                                                       \
    do {                                                                                           \
        if ((d)->kind == PS_K_CUDA) return call;                                                   \
    } while (0)
#else
#define IF_CUDA(d, call) (void)(d)
#define IF_CUDA_RET(d, call) (void)(d)
#endif

ps_k_dev *ps_k_cpu(void) {
    return &cpu_dev;
}

bool ps_k_cuda_built(void) {
#ifdef PS_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

int ps_k_cuda_device_count(void) {
#ifdef PS_HAVE_CUDA
    return ps__cuda_device_count();
#else
    return 0;
#endif
}

/* Parses "cuda" / "cuda:N" into *ordinal; returns false on anything else. */
static bool parse_cuda_spec(const char *spec, int *ordinal) {
    if (strcmp(spec, "cuda") == 0) {
        *ordinal = 0;
        return true;
    }
    if (strncmp(spec, "cuda:", 5) != 0 || spec[5] < '0' || spec[5] > '9') return false;
    char *end;
    errno = 0;
    long v = strtol(spec + 5, &end, 10);
    if (errno || *end || v > 1024) return false;
    *ordinal = (int)v;
    return true;
}

int ps_k_dev_open(const char *spec, ps_k_dev **out, char *err, size_t errlen) {
    int ordinal = 0;
    *out = NULL;
    if (!spec || strcmp(spec, "cpu") == 0 ||
        (strcmp(spec, "auto") == 0 && ps_k_cuda_device_count() == 0)) {
        *out = &cpu_dev;
        return PS_OK;
    }
    if (strcmp(spec, "auto") != 0 && !parse_cuda_spec(spec, &ordinal)) {
        if (err) snprintf(err, errlen, "bad device '%s' (want auto, cpu or cuda:N)", spec);
        return PS_EINVAL;
    }
#ifdef PS_HAVE_CUDA
    int n = ps__cuda_device_count();
    if (ordinal >= n) {
        if (err) snprintf(err, errlen, "device %s: only %d CUDA device(s) present", spec, n);
        return PS_EINVAL;
    }
    ps_k_dev *d = calloc(1, sizeof *d);
    if (!d) return PS_ENOMEM;
    d->kind = PS_K_CUDA;
    d->ordinal = ordinal;
    snprintf(d->name, sizeof d->name, "cuda:%d", ordinal);
    int rc = ps__cuda_open(d, ordinal, err, errlen);
    if (rc != PS_OK) {
        free(d);
        return rc;
    }
    *out = d;
    return PS_OK;
#else
    if (err) snprintf(err, errlen, "device %s: this build has no CUDA backend", spec);
    return PS_EINVAL;
#endif
}

void ps_k_dev_close(ps_k_dev *d) {
    if (!d || d == &cpu_dev) return;
#ifdef PS_HAVE_CUDA
    ps__cuda_close(d);
#endif
    free(d);
}

ps_k_kind ps_k_dev_kind(const ps_k_dev *d) {
    return d->kind;
}

const char *ps_k_dev_name(const ps_k_dev *d) {
    return d->name;
}

int ps_k_sync(ps_k_dev *d) {
    IF_CUDA_RET(d, ps__cuda_sync(d));
    return __atomic_exchange_n(&d->err, PS_OK, __ATOMIC_ACQ_REL);
}

void ps__dev_fail(ps_k_dev *d, int rc) {
    int none = PS_OK;
    if (rc != PS_OK)
        __atomic_compare_exchange_n(&d->err, &none, rc, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

int ps_k_malloc(ps_k_dev *d, size_t bytes, void **out) {
    IF_CUDA_RET(d, ps__cuda_malloc(d, bytes, out));
    size_t sz = (bytes + 63) / 64 * 64;
    *out = aligned_alloc(64, sz ? sz : 64);
    return *out ? PS_OK : PS_ENOMEM;
}

void ps_k_free(ps_k_dev *d, void *p) {
    IF_CUDA(d, ps__cuda_free(d, p));
    free(p);
}

int ps_k_host_alloc(ps_k_dev *d, size_t bytes, void **out) {
    IF_CUDA_RET(d, ps__cuda_host_alloc(d, bytes, out));
    size_t sz = (bytes + 63) / 64 * 64;
    *out = aligned_alloc(64, sz ? sz : 64);
    return *out ? PS_OK : PS_ENOMEM;
}

void ps_k_host_free(ps_k_dev *d, void *p) {
    IF_CUDA(d, ps__cuda_host_free(d, p));
    free(p);
}

int ps_k_copy_to_dev(ps_k_dev *d, void *dst, const void *src, size_t bytes) {
    IF_CUDA_RET(d, ps__cuda_copy(d, dst, src, bytes, true));
    if (bytes) memmove(dst, src, bytes);
    return PS_OK;
}

int ps_k_copy_to_host(ps_k_dev *d, void *dst, const void *src, size_t bytes) {
    IF_CUDA_RET(d, ps__cuda_copy(d, dst, src, bytes, false));
    if (bytes) memmove(dst, src, bytes);
    return PS_OK;
}

int ps_k_zero(ps_k_dev *d, void *p, size_t bytes) {
    IF_CUDA_RET(d, ps__cuda_zero(d, p, bytes));
    if (bytes) memset(p, 0, bytes);
    return PS_OK;
}

void ps_k_gemm(ps_k_dev *d, bool trans_a, bool trans_b, size_t M, size_t N, size_t K, float alpha,
               const float *A, const float *B, float beta, float *C) {
    IF_CUDA(d, ps__cuda_gemm(d, trans_a, trans_b, M, N, K, alpha, A, B, beta, C));
    ps__cpu_gemm(trans_a, trans_b, M, N, K, alpha, A, B, beta, C);
}

void ps_k_bias_add_rows_acc(ps_k_dev *d, float *x, const float *bias, size_t rows, size_t cols) {
    IF_CUDA(d, ps__cuda_bias_add_rows_acc(d, x, bias, rows, cols));
    ps__cpu_bias_add_rows_acc(x, bias, rows, cols);
}

void ps_k_col_sum_overwrite(ps_k_dev *d, float *out, const float *x, size_t rows, size_t cols) {
    IF_CUDA(d, ps__cuda_col_sum(d, out, x, rows, cols, false));
    ps__cpu_col_sum(out, x, rows, cols, false);
}

void ps_k_col_sum_acc(ps_k_dev *d, float *out, const float *x, size_t rows, size_t cols) {
    IF_CUDA(d, ps__cuda_col_sum(d, out, x, rows, cols, true));
    ps__cpu_col_sum(out, x, rows, cols, true);
}

void ps_k_act_forward_overwrite(ps_k_dev *d, ps_k_act act, float *y, const float *x, size_t n) {
    IF_CUDA(d, ps__cuda_act_forward_overwrite(d, act, y, x, n));
    ps__cpu_act_forward_overwrite(act, y, x, n);
}

void ps_k_act_backward_overwrite(ps_k_dev *d, ps_k_act act, float *dx, const float *dy,
                                 const float *x, const float *y, size_t n) {
    IF_CUDA(d, ps__cuda_act_backward(d, act, dx, dy, x, y, n, false));
    ps__cpu_act_backward(act, dx, dy, x, y, n, false);
}

void ps_k_act_backward_acc(ps_k_dev *d, ps_k_act act, float *dx, const float *dy, const float *x,
                           const float *y, size_t n) {
    IF_CUDA(d, ps__cuda_act_backward(d, act, dx, dy, x, y, n, true));
    ps__cpu_act_backward(act, dx, dy, x, y, n, true);
}

void ps_k_softmax_rows_overwrite(ps_k_dev *d, float *probs, const float *logits, size_t rows,
                                 size_t cols) {
    IF_CUDA(d, ps__cuda_softmax_rows_overwrite(d, probs, logits, rows, cols));
    ps__cpu_softmax_rows_overwrite(probs, logits, rows, cols);
}

int ps_k_softmax_ce_overwrite(ps_k_dev *d, float *dlogits, const float *logits,
                              const int32_t *labels, size_t rows, size_t cols, float *loss) {
    IF_CUDA_RET(d, ps__cuda_softmax_ce_overwrite(d, dlogits, logits, labels, rows, cols, loss));
    return ps__cpu_softmax_ce_overwrite(dlogits, logits, labels, rows, cols, loss);
}

int ps_k_argmax_correct(ps_k_dev *d, const float *logits, const int32_t *labels, size_t rows,
                        size_t cols, size_t *correct) {
    IF_CUDA_RET(d, ps__cuda_argmax_correct(d, logits, labels, rows, cols, correct));
    return ps__cpu_argmax_correct(logits, labels, rows, cols, correct);
}

void ps_k_round(ps_k_dev *d, ps_k_prec prec, float *x, size_t n) {
    if (prec == PS_K_PREC_F32 || n == 0) return;
    IF_CUDA(d, ps__cuda_round(d, prec, x, n));
    ps__cpu_round(prec, x, n);
}

void ps_k_scale(ps_k_dev *d, float *x, float alpha, size_t n) {
    IF_CUDA(d, ps__cuda_scale(d, x, alpha, n));
    ps__cpu_scale(x, alpha, n);
}

int ps_k_gemm_ex(ps_k_dev *d, ps_k_prec prec, bool trans_a, bool trans_b, size_t M, size_t N,
                 size_t K, float alpha, const float *A, const float *B, float beta, float *C) {
    IF_CUDA_RET(d, ps__cuda_gemm_ex(d, prec, trans_a, trans_b, M, N, K, alpha, A, B, beta, C));
    return ps__cpu_gemm_ex(prec, trans_a, trans_b, M, N, K, alpha, A, B, beta, C);
}

int ps_k_bce_overwrite(ps_k_dev *d, float *dlogits, const float *logits, const float *targets,
                       size_t rows, size_t cols, float *loss) {
    IF_CUDA_RET(d, ps__cuda_bce_overwrite(d, dlogits, logits, targets, rows, cols, loss));
    return ps__cpu_bce_overwrite(dlogits, logits, targets, rows, cols, loss);
}

int ps_k_mse_overwrite(ps_k_dev *d, float *dpred, const float *pred, const float *targets,
                       size_t rows, size_t cols, float *loss) {
    IF_CUDA_RET(d, ps__cuda_mse_overwrite(d, dpred, pred, targets, rows, cols, loss));
    return ps__cpu_mse_overwrite(dpred, pred, targets, rows, cols, loss);
}

void ps_k_onehot_overwrite(ps_k_dev *d, float *out, const int32_t *labels, size_t rows,
                           size_t cols) {
    IF_CUDA(d, ps__cuda_onehot_overwrite(d, out, labels, rows, cols));
    ps__cpu_onehot_overwrite(out, labels, rows, cols);
}

int ps_k_binary_correct(ps_k_dev *d, const float *logits, const int32_t *labels, size_t rows,
                        size_t *correct) {
    IF_CUDA_RET(d, ps__cuda_binary_correct(d, logits, labels, rows, correct));
    return ps__cpu_binary_correct(logits, labels, rows, correct);
}

int ps_k_sum(ps_k_dev *d, const float *x, size_t n, double *out) {
    IF_CUDA_RET(d, ps__cuda_sum(d, x, n, false, out));
    return ps__cpu_sum(x, n, false, out);
}

int ps_k_sumsq(ps_k_dev *d, const float *x, size_t n, double *out) {
    IF_CUDA_RET(d, ps__cuda_sum(d, x, n, true, out));
    return ps__cpu_sum(x, n, true, out);
}

void ps_k_dropout_group_forward_overwrite(ps_k_dev *d, float *y, const float *x, size_t n,
                                          size_t group, float rate, uint64_t seed) {
    IF_CUDA(d, ps__cuda_dropout(d, y, x, n, group, rate, seed));
    ps__cpu_dropout(y, x, n, group, rate, seed);
}

void ps_k_dropout_group_backward_overwrite(ps_k_dev *d, float *dx, const float *dy, size_t n,
                                           size_t group, float rate, uint64_t seed) {
    ps_k_dropout_group_forward_overwrite(d, dx, dy, n, group, rate, seed); /* the same mask */
}

void ps_k_dropout_forward_overwrite(ps_k_dev *d, float *y, const float *x, size_t n, float rate,
                                    uint64_t seed) {
    ps_k_dropout_group_forward_overwrite(d, y, x, n, 1, rate, seed);
}

void ps_k_dropout_backward_overwrite(ps_k_dev *d, float *dx, const float *dy, size_t n, float rate,
                                     uint64_t seed) {
    ps_k_dropout_group_forward_overwrite(d, dx, dy, n, 1, rate, seed);
}

void ps_k_im2col_overwrite(ps_k_dev *d, const ps_k_conv *p, float *cols, const float *x, size_t n) {
    IF_CUDA(d, ps__cuda_im2col_overwrite(d, p, cols, x, n));
    ps__cpu_im2col_overwrite(p, cols, x, n);
}

void ps_k_col2im_overwrite(ps_k_dev *d, const ps_k_conv *p, float *dx, const float *cols,
                           size_t n) {
    IF_CUDA(d, ps__cuda_col2im_overwrite(d, p, dx, cols, n));
    ps__cpu_col2im_overwrite(p, dx, cols, n);
}

void ps_k_maxpool_forward_overwrite(ps_k_dev *d, const ps_k_pool *p, float *y, int32_t *arg,
                                    const float *x) {
    IF_CUDA(d, ps__cuda_maxpool_forward_overwrite(d, p, y, arg, x));
    ps__cpu_maxpool_forward_overwrite(p, y, arg, x);
}

void ps_k_maxpool_backward_overwrite(ps_k_dev *d, const ps_k_pool *p, float *dx, const float *dy,
                                     const int32_t *arg) {
    IF_CUDA(d, ps__cuda_maxpool_backward_overwrite(d, p, dx, dy, arg));
    ps__cpu_maxpool_backward_overwrite(p, dx, dy, arg);
}

void ps_k_avgpool_forward_overwrite(ps_k_dev *d, const ps_k_pool *p, float *y, const float *x) {
    IF_CUDA(d, ps__cuda_avgpool_forward_overwrite(d, p, y, x));
    ps__cpu_avgpool_forward_overwrite(p, y, x);
}

void ps_k_avgpool_backward_overwrite(ps_k_dev *d, const ps_k_pool *p, float *dx, const float *dy) {
    IF_CUDA(d, ps__cuda_avgpool_backward_overwrite(d, p, dx, dy));
    ps__cpu_avgpool_backward_overwrite(p, dx, dy);
}

void ps_k_bn_forward_train_overwrite(ps_k_dev *d, float *y, float *mean, float *var, const float *x,
                                     const float *gamma, const float *beta, size_t rows, size_t c,
                                     float eps) {
    IF_CUDA(d, ps__cuda_bn_forward_train_overwrite(d, y, mean, var, x, gamma, beta, rows, c, eps));
    ps__cpu_bn_forward_train_overwrite(y, mean, var, x, gamma, beta, rows, c, eps);
}

void ps_k_bn_forward_infer_overwrite(ps_k_dev *d, float *y, const float *x, const float *mean,
                                     const float *var, const float *gamma, const float *beta,
                                     size_t rows, size_t c, float eps) {
    IF_CUDA(d, ps__cuda_bn_forward_infer_overwrite(d, y, x, mean, var, gamma, beta, rows, c, eps));
    ps__cpu_bn_forward_infer_overwrite(y, x, mean, var, gamma, beta, rows, c, eps);
}

void ps_k_bn_backward_overwrite(ps_k_dev *d, float *dx, float *dgamma, float *dbeta,
                                const float *dy, const float *x, const float *mean,
                                const float *var, const float *gamma, size_t rows, size_t c,
                                float eps) {
    IF_CUDA(d, ps__cuda_bn_backward_overwrite(d, dx, dgamma, dbeta, dy, x, mean, var, gamma, rows,
                                              c, eps));
    ps__cpu_bn_backward_overwrite(dx, dgamma, dbeta, dy, x, mean, var, gamma, rows, c, eps);
}

void ps_k_dwconv2d_forward_overwrite(ps_k_dev *d, const ps_k_conv *p, float *y, const float *x,
                                     const float *w, const float *b) {
    IF_CUDA(d, ps__cuda_dwconv2d_forward_overwrite(d, p, y, x, w, b));
    ps__cpu_dwconv2d_forward_overwrite(p, y, x, w, b);
}

void ps_k_dwconv2d_backward_overwrite(ps_k_dev *d, const ps_k_conv *p, float *dx, float *dw,
                                      float *db, const float *dy, const float *x, const float *w) {
    IF_CUDA(d, ps__cuda_dwconv2d_backward_overwrite(d, p, dx, dw, db, dy, x, w));
    ps__cpu_dwconv2d_backward_overwrite(p, dx, dw, db, dy, x, w);
}

void ps_k_gap_forward_overwrite(ps_k_dev *d, float *y, const float *x, size_t n, size_t hw,
                                size_t c) {
    IF_CUDA(d, ps__cuda_gap_forward_overwrite(d, y, x, n, hw, c));
    ps__cpu_gap_forward_overwrite(y, x, n, hw, c);
}

void ps_k_gap_backward_overwrite(ps_k_dev *d, float *dx, const float *dy, size_t n, size_t hw,
                                 size_t c) {
    IF_CUDA(d, ps__cuda_gap_backward_overwrite(d, dx, dy, n, hw, c));
    ps__cpu_gap_backward_overwrite(dx, dy, n, hw, c);
}

void ps_k_pad2d_forward_overwrite(ps_k_dev *d, float *y, const float *x, size_t n, size_t h,
                                  size_t w, size_t c, size_t top, size_t bottom, size_t left,
                                  size_t right) {
    IF_CUDA(d, ps__cuda_pad2d(d, y, x, n, h, w, c, top, bottom, left, right, false));
    ps__cpu_pad2d_forward_overwrite(y, x, n, h, w, c, top, bottom, left, right);
}

void ps_k_pad2d_backward_overwrite(ps_k_dev *d, float *dx, const float *dy, size_t n, size_t h,
                                   size_t w, size_t c, size_t top, size_t bottom, size_t left,
                                   size_t right) {
    IF_CUDA(d, ps__cuda_pad2d(d, dx, dy, n, h, w, c, top, bottom, left, right, true));
    ps__cpu_pad2d_backward_overwrite(dx, dy, n, h, w, c, top, bottom, left, right);
}

void ps_k_add_overwrite(ps_k_dev *d, float *y, const float *a, const float *b, size_t n) {
    IF_CUDA(d, ps__cuda_add_overwrite(d, y, a, b, n));
    ps__cpu_add_overwrite(y, a, b, n);
}

void ps_k_add_acc(ps_k_dev *d, float *y, const float *x, size_t n) {
    IF_CUDA(d, ps__cuda_add_acc(d, y, x, n));
    ps__cpu_add_acc(y, x, n);
}

void ps_k_concat_cols_overwrite(ps_k_dev *d, float *y, const float *x, size_t rows, size_t c_total,
                                size_t c_off, size_t c_x) {
    IF_CUDA(d, ps__cuda_concat_cols(d, y, x, rows, c_total, c_off, c_x, false));
    ps__cpu_concat_cols_overwrite(y, x, rows, c_total, c_off, c_x);
}

void ps_k_split_cols_overwrite(ps_k_dev *d, float *dx, const float *dy, size_t rows, size_t c_total,
                               size_t c_off, size_t c_x) {
    IF_CUDA(d, ps__cuda_concat_cols(d, dx, dy, rows, c_total, c_off, c_x, true));
    ps__cpu_split_cols_overwrite(dx, dy, rows, c_total, c_off, c_x);
}

void ps_k_mul_forward_overwrite(ps_k_dev *d, float *y, const float *a, const float *b, size_t n) {
    IF_CUDA(d, ps__cuda_mul_forward_overwrite(d, y, a, b, n));
    ps__cpu_mul_forward_overwrite(y, a, b, n);
}

void ps_k_mul_backward_overwrite(ps_k_dev *d, float *da, float *db, const float *dy, const float *a,
                                 const float *b, size_t n) {
    IF_CUDA(d, ps__cuda_mul_backward_overwrite(d, da, db, dy, a, b, n));
    ps__cpu_mul_backward_overwrite(da, db, dy, a, b, n);
}

void ps_k_mul_channels_forward_overwrite(ps_k_dev *d, float *y, const float *x, const float *s,
                                         size_t n, size_t hw, size_t c) {
    IF_CUDA(d, ps__cuda_mul_channels_forward_overwrite(d, y, x, s, n, hw, c));
    ps__cpu_mul_channels_forward_overwrite(y, x, s, n, hw, c);
}

void ps_k_mul_channels_backward_overwrite(ps_k_dev *d, float *dx, float *ds, const float *dy,
                                          const float *x, const float *s, size_t n, size_t hw,
                                          size_t c) {
    IF_CUDA(d, ps__cuda_mul_channels_backward_overwrite(d, dx, ds, dy, x, s, n, hw, c));
    ps__cpu_mul_channels_backward_overwrite(dx, ds, dy, x, s, n, hw, c);
}

void ps_k_rescale_forward_overwrite(ps_k_dev *d, float *y, const float *x, float scale,
                                    float offset, size_t n) {
    IF_CUDA(d, ps__cuda_rescale(d, y, x, scale, offset, n));
    ps__cpu_rescale(y, x, scale, offset, n);
}

void ps_k_rescale_backward_overwrite(ps_k_dev *d, float *dx, const float *dy, float scale,
                                     size_t n) {
    IF_CUDA(d, ps__cuda_rescale(d, dx, dy, scale, 0.0f, n));
    ps__cpu_rescale(dx, dy, scale, 0.0f, n);
}

void ps_k_norm_forward_overwrite(ps_k_dev *d, float *y, const float *x, const float *mean,
                                 const float *var, size_t n, size_t c, float eps) {
    IF_CUDA(d, ps__cuda_norm(d, y, x, mean, var, n, c, eps));
    ps__cpu_norm(y, x, mean, var, n, c, eps);
}

void ps_k_norm_backward_overwrite(ps_k_dev *d, float *dx, const float *dy, const float *var,
                                  size_t n, size_t c, float eps) {
    IF_CUDA(d, ps__cuda_norm(d, dx, dy, NULL, var, n, c, eps));
    ps__cpu_norm(dx, dy, NULL, var, n, c, eps);
}

/* The crop is the adjoint of zero padding and the other way round: pad2d's
 * backward (a crop of its padded input) and forward (a zero-padded copy),
 * with h and w the cropped sizes. */
static bool crop_fits(ps_k_dev *d, size_t h, size_t w, size_t top, size_t bottom, size_t left,
                      size_t right) {
    bool ok = top < h && bottom < h - top && left < w && right < w - left;
    if (!ok) ps__dev_fail(d, PS_EINVAL);
    return ok;
}

void ps_k_crop2d_forward_overwrite(ps_k_dev *d, float *y, const float *x, size_t n, size_t h,
                                   size_t w, size_t c, size_t top, size_t bottom, size_t left,
                                   size_t right) {
    if (!crop_fits(d, h, w, top, bottom, left, right)) return;
    ps_k_pad2d_backward_overwrite(d, y, x, n, h - top - bottom, w - left - right, c, top, bottom,
                                  left, right);
}

void ps_k_crop2d_backward_overwrite(ps_k_dev *d, float *dx, const float *dy, size_t n, size_t h,
                                    size_t w, size_t c, size_t top, size_t bottom, size_t left,
                                    size_t right) {
    if (!crop_fits(d, h, w, top, bottom, left, right)) return;
    ps_k_pad2d_forward_overwrite(d, dx, dy, n, h - top - bottom, w - left - right, c, top, bottom,
                                 left, right);
}

void ps_k_ln_forward_overwrite(ps_k_dev *d, float *y, float *mean, float *rstd, const float *x,
                               const float *gamma, const float *beta, size_t rows, size_t c,
                               float eps) {
    IF_CUDA(d, ps__cuda_ln_forward_overwrite(d, y, mean, rstd, x, gamma, beta, rows, c, eps));
    ps__cpu_ln_forward_overwrite(y, mean, rstd, x, gamma, beta, rows, c, eps);
}

void ps_k_ln_backward_overwrite(ps_k_dev *d, float *dx, float *dgamma, float *dbeta,
                                const float *dy, const float *x, const float *mean,
                                const float *rstd, const float *gamma, size_t rows, size_t c) {
    IF_CUDA(
        d, ps__cuda_ln_backward_overwrite(d, dx, dgamma, dbeta, dy, x, mean, rstd, gamma, rows, c));
    ps__cpu_ln_backward_overwrite(dx, dgamma, dbeta, dy, x, mean, rstd, gamma, rows, c);
}

void ps_k_gather_rows_overwrite(ps_k_dev *d, float *y, const float *rows, const uint32_t *where,
                                size_t batch, size_t dim) {
    IF_CUDA(d, ps__cuda_gather_rows_overwrite(d, y, rows, where, batch, dim));
    ps__cpu_gather_rows_overwrite(y, rows, where, batch, dim);
}

void ps_k_scatter_rows_overwrite(ps_k_dev *d, float *drows, const float *dy, const uint32_t *order,
                                 const uint32_t *offs, size_t n, size_t dim) {
    IF_CUDA(d, ps__cuda_scatter_rows_overwrite(d, drows, dy, order, offs, n, dim));
    ps__cpu_scatter_rows_overwrite(drows, dy, order, offs, n, dim);
}
