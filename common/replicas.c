/* Shard entries with replicas: splitting "ADDR|ADDR|..." and checking each address. */
#include "replicas.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ps_error.h"
#include "tfconfig.h"

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t errlen, const char *fmt,
                                                      ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return PS_EINVAL;
}

int ps_replicas_split(const char *entry, ps_replica_part parts[PS_MAX_REPLICAS], size_t *n,
                      char *err, size_t errlen) {
    *n = 0;
    if (!entry) return fail(err, errlen, "no address");
    size_t count = 0;
    for (const char *p = entry;; count++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == 0)
            return fail(err, errlen,
                        entry[0] ? "replica %zu is empty (want ADDR|ADDR|..., no empty part)"
                                 : "empty address",
                        count);
        if (count == PS_MAX_REPLICAS)
            return fail(err, errlen, "more than %d replicas", PS_MAX_REPLICAS);
        parts[count] = (ps_replica_part){p, len};
        if (!bar) break;
        p = bar + 1;
    }
    *n = count + 1;
    return PS_OK;
}

int ps_check_shard_entry(const char *entry, char *err, size_t errlen) {
    ps_replica_part parts[PS_MAX_REPLICAS];
    size_t n;
    int rc = ps_replicas_split(entry, parts, &n, err, errlen);
    if (rc != PS_OK) return rc;
    for (size_t k = 0; k < n; k++) {
        char addr[512], why[256];
        int port = 0;
        if (parts[k].len >= sizeof addr)
            return fail(err, errlen, "replica %zu: longer than %zu bytes", k, sizeof addr - 1);
        memcpy(addr, parts[k].at, parts[k].len);
        addr[parts[k].len] = '\0';
        const char *ipc = ps_ipc_path(addr);
        char label[32] = ""; /* names the replica only in a group */
        if (n > 1) snprintf(label, sizeof label, "replica %zu ", k);
        if (ipc && ps_check_ipc_path(ipc, why, sizeof why) != PS_OK)
            return fail(err, errlen, "%s'%.200s': %s", label, addr, why);
        if (!ipc && (ps_parse_hostport(addr, NULL, 0, &port) != PS_OK || port == 0))
            return fail(err, errlen, "%s'%.200s' is not host:port (port 1..65535) or ipc://PATH",
                        label, addr);
    }
    return PS_OK;
}
