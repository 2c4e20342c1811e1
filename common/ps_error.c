/* Names and descriptions for the ps_err codes. */
#include "errf.h"
#include "ps_error.h"

#include <stdarg.h>
#include <stdio.h>

static const struct {
    int code;
    const char *name;
    const char *text;
} errors[] = {
    {PS_OK, "OK", "success"},
    {PS_EINVAL, "EINVAL", "invalid argument"},
    {PS_EPROTO, "EPROTO", "malformed message"},
    {PS_EVERSION, "EVERSION", "protocol version mismatch"},
    {PS_ENOENT, "ENOENT", "unknown variable"},
    {PS_ESHAPE, "ESHAPE", "wrong shape or dtype"},
    {PS_ESTALE, "ESTALE", "stale push: step already applied"},
    {PS_ENOMEM, "ENOMEM", "out of memory"},
    {PS_EIO, "EIO", "I/O error"},
    {PS_ETIMEDOUT, "ETIMEDOUT", "timed out"},
    {PS_EEXIST, "EEXIST", "exists with a different definition"},
    {PS_EFORMAT, "EFORMAT", "bad file format"},
    {PS_EADDRINUSE, "EADDRINUSE", "address already in use"},
    {PS_ESHUTDOWN, "ESHUTDOWN", "server is shutting down"},
    {PS_EREMOTE, "EREMOTE", "error reply from peer"},
    {PS_EINTERNAL, "EINTERNAL", "internal error"},
    {PS_EREJOIN, "EREJOIN", "worker is not in the expected set: say Hello again"},
    {PS_ERESTARTED, "ERESTARTED", "a shard restarted during the request"},
    {PS_EBUSY, "EBUSY", "a server limit was reached: retry later"},
    {PS_ELOST, "ELOST", "a shard lost the job's variables"},
    {PS_ENOTPRIMARY, "ENOTPRIMARY", "this replica of the shard is not its primary"},
};

const char *ps_strerror(int err) {
    for (unsigned i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == err) return errors[i].text;
    return "unknown error";
}

const char *ps_errname(int err) {
    for (unsigned i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == err) return errors[i].name;
    return "EUNKNOWN";
}

int ps_errf(int code, char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}
