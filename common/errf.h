/* The one helper for "write a reason, return the code" (the project's functions report
 * a failure as a negative ps_err plus a one-line reason in a caller's buffer). Internal:
 * not part of the installed API. */
#ifndef PS_ERRF_H
#define PS_ERRF_H

#include <stddef.h>

#include "ps_error.h"

/* Writes a one-line reason (printf format) into err[errlen] (err may be NULL or errlen
 * 0: nothing is written) and returns code: `return ps_errf(PS_EINVAL, err, errlen, ...)`. */
int ps_errf(int code, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
