/* CPU backend of kernels/: the element-wise and per-row loops of Dense and
 * Conv2D (bias add, column sums) and of the activations, over the shared
 * formulas in ew.h. They are in the SIMD-cloned library (simd.h): at -O2 alone
 * a ReLU compiled to a compare and a branch per element, mispredicted on
 * activations of random sign, and ran at a fraction of memory speed. */
#include <string.h>

#include "backend.h"
#include "ew.h"
#include "simd.h"

PS_SIMD_CLONES
void ps__cpu_bias_add_rows_acc(float *x, const float *bias, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++) {
        float *row = x + r * cols;
        for (size_t c = 0; c < cols; c++)
            row[c] += bias[c];
    }
}

PS_SIMD_CLONES
void ps__cpu_col_sum(float *out, const float *x, size_t rows, size_t cols, bool acc) {
    if (!acc) memset(out, 0, cols * sizeof *out);
    for (size_t r = 0; r < rows; r++) {
        const float *row = x + r * cols;
        for (size_t c = 0; c < cols; c++)
            out[c] += row[c];
    }
}

/* The activation is chosen once per call, outside the loops, so each loop
 * body is one inlined ew.h formula that the compiler can vectorise. */
#define PS_ACT_CASES(LOOP)                                                                         \
    switch (act) {                                                                                 \
    case PS_K_ACT_RELU:                                                                            \
        LOOP(ps_ew_relu_fwd, ps_ew_relu_bwd, y);                                                   \
        break;                                                                                     \
    case PS_K_ACT_RELU6:                                                                           \
        LOOP(ps_ew_relu6_fwd, ps_ew_relu6_bwd, y);                                                 \
        break;                                                                                     \
    case PS_K_ACT_SIGMOID:                                                                         \
        LOOP(ps_ew_sigmoid_fwd, ps_ew_sigmoid_bwd, y);                                             \
        break;                                                                                     \
    case PS_K_ACT_TANH:                                                                            \
        LOOP(ps_ew_tanh_fwd, ps_ew_tanh_bwd, y);                                                   \
        break;                                                                                     \
    case PS_K_ACT_GELU:                                                                            \
        LOOP(ps_ew_gelu_fwd, ps_ew_gelu_bwd, x); /* GELU's derivative needs the input */           \
        break;                                                                                     \
    case PS_K_ACT_SWISH:                                                                           \
        LOOP(ps_ew_swish_fwd, ps_ew_swish_bwd, x);                                                 \
        break;                                                                                     \
    case PS_K_ACT_HARD_SIGMOID:                                                                    \
        LOOP(ps_ew_hard_sigmoid_fwd, ps_ew_hard_sigmoid_bwd, y);                                   \
        break;                                                                                     \
    case PS_K_ACT_HARD_SWISH:                                                                      \
        LOOP(ps_ew_hard_swish_fwd, ps_ew_hard_swish_bwd, x);                                       \
        break;                                                                                     \
    default:                                                                                       \
        LOOP(ps_ew_linear_fwd, ps_ew_linear_bwd, dy);                                              \
    }

static inline float ps_ew_linear_fwd(float x) {
    return x;
}

static inline float ps_ew_linear_bwd(float unused, float dy) {
    (void)unused;
    return dy;
}

PS_SIMD_CLONES
void ps__cpu_act_forward_overwrite(ps_k_act act, float *y, const float *x, size_t n) {
#define FWD(f, b, src)                                                                             \
    for (size_t i = 0; i < n; i++)                                                                 \
        y[i] = f(x[i]);
    PS_ACT_CASES(FWD)
#undef FWD
}

PS_SIMD_CLONES
void ps__cpu_act_backward(ps_k_act act, float *dx, const float *dy, const float *x, const float *y,
                          size_t n, bool acc) {
    /* each activation reads only one of x and y (src): the other may be NULL */
#define BWD(f, b, src)                                                                             \
    if (acc)                                                                                       \
        for (size_t i = 0; i < n; i++)                                                             \
            dx[i] += b(src[i], dy[i]);                                                             \
    else                                                                                           \
        for (size_t i = 0; i < n; i++)                                                             \
            dx[i] = b(src[i], dy[i]);
    PS_ACT_CASES(BWD)
#undef BWD
}
