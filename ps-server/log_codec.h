/* The shard's log entries (shard.h, ps_shard_event) on the wire: a LogEntry
 * (ps.proto) and its payload frames, and back. */
#ifndef PS_LOG_CODEC_H
#define PS_LOG_CODEC_H

#include <stddef.h>
#include <zmq.h>

#include "optim_spec_proto.h"
#include "ps.pb-c.h"
#include "shard.h"

#define PS_LOG_MAX_PAYLOADS 1024

/* An entry ready to send: the message borrows from the event and from this. */
typedef struct {
    Ps__LogEntry msg;
    ps_opt_proto opt;
    uint8_t table[92]; /* PS_CKPT_TABLE_ATTR_BYTES */
    const void *data[PS_LOG_MAX_PAYLOADS];
    size_t len[PS_LOG_MAX_PAYLOADS];
    size_t n; /* payloads */
} ps_log_out;

/* Fills *o from e (sizes from sh, which applied e). PS_OK, or PS_EINVAL when an
 * entry names what sh does not hold (a bug) or has too many payloads. */
int ps__log_encode(const ps_shard *sh, const ps_shard_event *e, ps_log_out *o);

/* A received entry as an event; owns what the event points to. */
typedef struct {
    ps_shard_event e;
    uint64_t shape[8];
    ps_table_cfg table;
    const char **names;
    const float **grads;
    float *floats; /* every float payload, copied (aligned) */
    uint64_t *ids;
} ps_log_in;

/* Decodes m with its payload frames f[0..nf) (it uses *used of them). PS_OK, or
 * PS_EPROTO with the reason, PS_ENOMEM. Free with ps__log_in_free either way. */
int ps__log_decode(const ps_shard *sh, const Ps__LogEntry *m, const zmq_msg_t *f, size_t nf,
                   size_t *used, ps_log_in *in, char *err, size_t errlen);
void ps__log_in_free(ps_log_in *in);

#endif
