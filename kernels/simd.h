/* Internal to the CPU backend: PS_SIMD_CLONES marks a hot loop nest to be
 * compiled twice on x86-64, for AVX2+FMA (x86-64-v3) and for the baseline,
 * the loader picking the clone the machine runs (an ifunc): the build stays
 * portable (no -march) and the loops use 8-wide FMAs where they exist.
 * Elsewhere it is empty, and so it is with clang (14 emitted no symbol for
 * these functions and the fuzz build failed to link). The files that use it
 * are compiled with the dynamic vectorizer cost model (kernels/meson.build),
 * so loops of unknown length vectorise at -O2 too. */
#ifndef PS_KERNELS_SIMD_H
#define PS_KERNELS_SIMD_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__) \
    && !defined(PS_NO_SIMD_CLONES)
#define PS_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define PS_SIMD_CLONES
#endif

/* For the helpers of a PS_SIMD_CLONES function: inlined into each clone, so
 * they are compiled for its target (a call would run the baseline code). */
#if defined(__GNUC__)
#define PS_INLINE inline __attribute__((always_inline))
#else
#define PS_INLINE inline
#endif

#endif
