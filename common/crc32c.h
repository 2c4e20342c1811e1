/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used by iSCSI, ext4
 * and the tensor files: software slicing-by-8, SSE4.2 instruction when present. */
#ifndef PS_CRC32C_H
#define PS_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends `crc` (the result of a previous call, or 0 to start) over n bytes of
 * data and returns the new CRC. ps_crc32c_extend(ps_crc32c_extend(0, a, n), b, m)
 * equals the CRC of a followed by b. Thread-safe. */
uint32_t ps_crc32c_extend(uint32_t crc, const void *data, size_t n);
/* CRC-32C of n bytes ("123456789" gives 0xE3069283). */
uint32_t ps_crc32c(const void *data, size_t n);

/* Internal, for the tests: the portable path alone, and whether
 * ps_crc32c_extend uses the SSE4.2 instruction on this machine (1) or not (0). */
uint32_t ps__crc32c_extend_sw(uint32_t crc, const void *data, size_t n);
int ps__crc32c_hw_available(void);

#endif
