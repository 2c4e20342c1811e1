/* Which GEMM kernels OpenBLAS chose for this CPU, and whether the CPU could run faster
 * ones: an OpenBLAS older than the CPU does not recognise it and falls back to its SSE3
 * ("Prescott") kernels, several times slower than the AVX2 or AVX-512 ones. */
#include <cblas.h>
#include <stddef.h>
#include <strings.h>

#include "kernels.h"

/* OpenBLAS's x86-64 kernel sets whose sgemm uses neither AVX2 nor AVX-512. */
static const char *const pre_avx2[] = {"Prescott",   "Core2",     "Penryn",       "Dunnington",
                                       "Nehalem",    "Atom",      "Sandybridge",  "Barcelona",
                                       "Bobcat",     "Opteron",   "Opteron_SSE3", "Katmai",
                                       "Coppermine", "Northwood", "Banias"};

const char *ps_k_blas_better_core(const char *core, int avx2_fma, int avx512) {
    if (!core) return NULL;
    int old = 0;
    for (size_t i = 0; i < sizeof pre_avx2 / sizeof pre_avx2[0]; i++)
        if (strcasecmp(core, pre_avx2[i]) == 0) old = 1;
    if (!old) return NULL;
    if (avx512) return "SkylakeX";
    if (avx2_fma) return "Haswell";
    return NULL;
}

ps_k_blas_kernels ps_k_cpu_blas_kernels(void) {
    int avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    ps_k_blas_kernels k = {.core = openblas_get_corename()};
    k.better = ps_k_blas_better_core(k.core, avx2_fma, avx512);
    k.cpu_isa = avx512 ? "AVX-512" : avx2_fma ? "AVX2" : "neither AVX2 nor AVX-512";
    return k;
}
