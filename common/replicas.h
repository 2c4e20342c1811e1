/* A shard entry of a ps list: one address, or the addresses of the shard's replica group
 * separated by '|' ("10.0.0.1:5000|10.0.0.2:5000", the initial primary first). */
#ifndef PS_REPLICAS_H
#define PS_REPLICAS_H

#include <stddef.h>

/* Most replicas one shard entry may list. */
#define PS_MAX_REPLICAS 8

/* One replica's address inside an entry (not NUL-terminated there). */
typedef struct {
    const char *at;
    size_t len;
} ps_replica_part;

/* Splits entry at '|' into parts[0..*n) pointing into entry (an entry without '|' is one
 * part). Does not check the addresses themselves. Returns PS_OK, or PS_EINVAL with a
 * one-line reason in err (when non-NULL): an empty part ("a||b", "|a", "a|", ""), or more
 * than PS_MAX_REPLICAS parts. */
int ps_replicas_split(const char *entry, ps_replica_part parts[PS_MAX_REPLICAS], size_t *n,
                      char *err, size_t errlen);

/* Checks a shard entry where it is used as an address: each replica "host:port" with a port
 * 1..65535 (ps_parse_hostport) or "ipc://PATH" (ps_check_ipc_path). Returns PS_OK, or
 * PS_EINVAL with a one-line reason in err naming the replica. */
int ps_check_shard_entry(const char *entry, char *err, size_t errlen);

#endif
