/* What a variable may be, wherever it travels or is stored: on the wire
 * (wire/wire.h), in psd's store and in checkpoint files (ckpt_file.h). */
#ifndef PS_VAR_LIMITS_H
#define PS_VAR_LIMITS_H

#include <stdint.h>

#define PS_WIRE_MAX_NAME 255u /* bytes in a tensor name */
#define PS_WIRE_MAX_RANK 8u   /* dimensions of a variable */

/* An embedding table's rows in one PullRows or PushRows: ids, and ids * dim values. */
#define PS_ROWS_MAX_IDS ((uint64_t)1 << 24)
#define PS_ROWS_MAX_VALUES ((uint64_t)1 << 28)

#endif
