/* Helpers the wire tests (test_wire, test_wire_frames) share: headers to send and a
 * check of a decoded tensor meta. */
#ifndef PS_TEST_WIRE_HELPERS_H
#define PS_TEST_WIRE_HELPERS_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

/* A header of this protocol version with request_id and no body. */
Ps__Header header(uint64_t request_id);
/* A Hello header (worker 1 of 2); its body is static. */
Ps__Header hello_header(uint64_t request_id);
/* Checks that m is a float32 tensor named name of the given shape, with its nbytes. */
void check_meta(const Ps__TensorMeta *m, const char *name, const uint64_t *shape, size_t rank);

#endif
