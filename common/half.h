/* Gradient encodings for the wire (psworker --compression): IEEE binary16
 * (fp16) and bfloat16, both rounded to nearest even, and the sparse top-k form
 * with its error feedback. No I/O, no state: pure conversions. Payloads are
 * little-endian like every tensor frame (the hosts are). */
#ifndef PS_HALF_H
#define PS_HALF_H

#include <stddef.h>
#include <stdint.h>

/* ---- fp16 / bf16 ---- */

/* x rounded to nearest even as binary16. |x| beyond the largest half (65504)
 * saturates to +-65504 (not infinity: a receiver refuses non-finite
 * gradients) and sets *saturated (may be NULL); NaN stays a NaN. */
uint16_t ps_f32_to_f16(float x, int *saturated);
float ps_f16_to_f32(uint16_t h);
/* x rounded to nearest even as bfloat16 (the top 16 bits of a float). A finite
 * x that would round to infinity saturates to +-max bfloat16 and sets
 * *saturated (may be NULL); NaN stays a NaN. */
uint16_t ps_f32_to_bf16(float x, int *saturated);
float ps_bf16_to_f32(uint16_t h);

typedef enum { PS_HALF_F16 = 0, PS_HALF_BF16 = 1 } ps_half_kind;

/* out[i] = encode(x[i]) for i < n (the same bits as ps_f32_to_f16 / ps_f32_to_bf16);
 * returns how many values saturated. fp16 uses the CPU's conversion instructions (x86-64
 * F16C) when it has them. */
size_t ps_half_encode(ps_half_kind kind, const float *x, size_t n, uint16_t *out);
/* out[i] = decode(in[i]); with add, out[i] += decode(in[i]) (summed in float). in: n
 * little-endian 16-bit values, any alignment (a received frame). */
void ps_half_decode(ps_half_kind kind, const void *in, size_t n, float *out, int add);
/* x[i] = decode(encode(x[i])): the value a receiver would see. */
void ps_half_round(ps_half_kind kind, float *x, size_t n);

/* ---- top-k with error feedback ---- */

/* Bytes of one (index, value) pair on the wire: u32 index, f32 value. */
#define PS_TOPK_PAIR_BYTES 8u

/* k for numel values at ratio in (0, 1]: max(1, ceil(ratio * numel)), at most numel. */
size_t ps_topk_k(size_t numel, float ratio);

/* Error feedback step: residual[i] += grad[i] (grad may be NULL: nothing added), then
 * the k entries of residual with the largest magnitude (ties: the lower index) are
 * written to pairs (k * PS_TOPK_PAIR_BYTES bytes, indices strictly increasing) and
 * zeroed in residual. scratch holds n values (the magnitudes' bits). n <= UINT32_MAX,
 * 1 <= k <= n. */
void ps_topk_compress(float *residual, const float *grad, size_t n, size_t k,
                      unsigned char *pairs, uint32_t *scratch);

/* Checks nnz pairs against a dense tensor of numel values: every index < numel
 * and strictly increasing. Returns 0, or -1 with *bad = the first bad pair. */
int ps_topk_check(const unsigned char *pairs, size_t nnz, size_t numel, size_t *bad);
/* dense[idx] = value (add: dense[idx] += value) for each pair; with !add the
 * rest of dense[0..numel) is zeroed first. The pairs must have been checked. */
void ps_topk_decode(const unsigned char *pairs, size_t nnz, float *dense, size_t numel, int add);

/* ---- the --compression flag ---- */

/* The same numbers as libps's ps_compression (client/ps.h). */
enum { PS_COMPRESSION_NONE = 0, PS_COMPRESSION_F16, PS_COMPRESSION_BF16, PS_COMPRESSION_TOPK };

/* Reads "none", "fp16", "bf16" or "topk:RATIO" (0 < RATIO <= 1) into *kind and *ratio
 * (0 unless top-k). Returns 0, or -1 with the reason in err. */
int ps_compression_parse(const char *text, int *kind, float *ratio, char *err, size_t errlen);
/* "none", "fp16", "bf16", "topk" for a kind. */
const char *ps_compression_name(int kind);

#endif
