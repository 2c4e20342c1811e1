/* CRC-32C: a slicing-by-8 table walk, and the SSE4.2 crc32 instruction on x86-64
 * CPUs that have it (chosen once, at the first call). */
#include "crc32c.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82F63B78u /* Castagnoli, bit-reversed */

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;
static int use_hw;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_HW_PATH 1

__attribute__((target("sse4.2"))) static uint32_t extend_hw(uint32_t crc, const uint8_t *p,
                                                            size_t n) {
    uint64_t c = crc;
    for (; n > 0 && ((uintptr_t)p & 7) != 0; n--, p++)
        c = _mm_crc32_u8((uint32_t)c, *p);
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
    }
    for (; n > 0; n--, p++)
        c = _mm_crc32_u8((uint32_t)c, *p);
    return (uint32_t)c;
}
#else
#define HAVE_HW_PATH 0
#endif

static void init_tables(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (POLY & (0u - (c & 1u)));
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int s = 1; s < 8; s++)
            table[s][i] = (table[s - 1][i] >> 8) ^ table[0][table[s - 1][i] & 0xFF];
#if HAVE_HW_PATH
    use_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#endif
}

/* The raw (un-inverted) register update, slicing by 8 bytes. Little-endian
 * loads are assembled byte by byte, so this is correct on any host. */
static uint32_t extend_sw(uint32_t c, const uint8_t *p, size_t n) {
    for (; n > 0 && ((uintptr_t)p & 7) != 0; n--, p++)
        c = (c >> 8) ^ table[0][(c ^ *p) & 0xFF];
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        c = table[7][lo & 0xFF] ^ table[6][(lo >> 8) & 0xFF] ^ table[5][(lo >> 16) & 0xFF] ^
            table[4][lo >> 24] ^ table[3][p[4]] ^ table[2][p[5]] ^ table[1][p[6]] ^ table[0][p[7]];
    }
    for (; n > 0; n--, p++)
        c = (c >> 8) ^ table[0][(c ^ *p) & 0xFF];
    return c;
}

uint32_t ps__crc32c_extend_sw(uint32_t crc, const void *data, size_t n) {
    pthread_once(&table_once, init_tables);
    return ~extend_sw(~crc, data, n);
}

int ps__crc32c_hw_available(void) {
    pthread_once(&table_once, init_tables);
    return use_hw;
}

uint32_t ps_crc32c_extend(uint32_t crc, const void *data, size_t n) {
    pthread_once(&table_once, init_tables);
#if HAVE_HW_PATH
    if (use_hw) return ~extend_hw(~crc, data, n);
#endif
    return ~extend_sw(~crc, data, n);
}

uint32_t ps_crc32c(const void *data, size_t n) {
    return ps_crc32c_extend(0, data, n);
}
