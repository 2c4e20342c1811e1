/* The flags more than one program takes (psd, psworker, psctl local), defined once:
 * name, type, bounds, default and help. A program's option table names one with
 * {.like = &ps_flag_X, PS_OPTION_AT(its_config, field)} and may give its own help,
 * metavar or default, never its own bounds. */
#ifndef PS_SHARED_FLAGS_H
#define PS_SHARED_FLAGS_H

#include "options.h"

#define PS_MAX_WORKERS 65536 /* --workers; a worker's --index is below it */
#define PS_MAX_SHARDS 65536  /* psd --num-shards, psctl local --ps; psd --shard is below it */
#define PS_MAX_PORT 65535    /* TCP ports (0: any free one where a program allows it) */

extern const ps_option ps_flag_workers;          /* --workers N */
extern const ps_option ps_flag_mode;             /* --mode sync|async (index: 0 sync) */
extern const ps_option ps_flag_transport;        /* --transport tcp|ipc (index: 1 ipc) */
extern const ps_option ps_flag_worker_timeout;   /* --worker-timeout MS (psd) */
extern const ps_option ps_flag_replicas;         /* --replicas-to-aggregate R (psd, sync) */
extern const ps_option ps_flag_staleness;        /* --staleness S (psd, async) */
extern const ps_option ps_flag_workers_min;      /* --workers-min M (psd, sync) */
extern const ps_option ps_flag_checkpoint_every; /* --checkpoint-every SECONDS (psd) */
extern const ps_option ps_flag_epochs;           /* --epochs N (psworker) */
extern const ps_option ps_flag_batch;            /* --batch N (psworker) */
extern const ps_option ps_flag_seed;             /* --seed N (psworker) */
extern const ps_option ps_flag_strategy;         /* --strategy parameter_server|mirrored|
                                                    multi_worker_mirrored (index: 0 PS) */
extern const ps_option ps_flag_communication;    /* --communication auto|ring|nccl (index) */
extern const ps_option ps_flag_compression;      /* --compression none|fp16|bf16|topk:R (text,
                                                    read by ps_compression_parse, half.h) */

#endif
