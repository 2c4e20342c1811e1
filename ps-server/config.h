/* psd configuration: one table drives the flags, TF_CONFIG, defaults,
 * validation and --help. */
#ifndef PS_SERVER_CONFIG_H
#define PS_SERVER_CONFIG_H

#include <stdio.h>

typedef enum { PS_MODE_SYNC = 0, PS_MODE_ASYNC = 1 } ps_mode;
typedef enum { PS_TRANSPORT_TCP = 0, PS_TRANSPORT_IPC = 1 } ps_transport;

typedef struct {
    long transport;      /* ps_transport */
    char bind[256];      /* tcp: address to bind: "0.0.0.0", "127.0.0.1", ... */
    long port;           /* tcp: 0 = any free port */
    char ipc_path[1024]; /* ipc: the Unix socket (at most PS_IPC_PATH_MAX bytes) */
    long shard;          /* this shard's index */
    long num_shards;
    long workers;              /* workers in the job (sync barrier size) */
    long mode;                 /* ps_mode */
    char ready_file[1024];     /* written with "host:port" (ipc: "ipc://PATH") once bound */
    long log_level;            /* 0 debug, 1 info, 2 warn, 3 error (ps_log_level) */
    long worker_timeout_ms;    /* a worker silent this long leaves the expected set */
    long replicas;             /* sync: pushes that close a step (0: all live workers) */
    long staleness;            /* async: max clock lead over the slowest live worker (-1: none) */
    long workers_min;          /* sync: steps close only with this many live (0: all expected) */
    char checkpoint_dir[1024]; /* "" : no checkpoints */
    long checkpoint_every;     /* seconds between periodic checkpoints (0: only on request/exit) */
    long keep_checkpoints;     /* newest checkpoint files kept */
    long metrics_port;         /* HTTP /metrics and /healthz; -1: off, 0: any free port */
    char metrics_bind[256];
    char curve_secret[1024];     /* CurveZMQ: this server's key pair file ("": plaintext) */
    char authorized_keys[1024];  /* CurveZMQ: directory of client public keys */
    long max_message_mb;         /* ZMQ_MAXMSGSIZE */
    long max_tensor_mb;          /* largest tensor a request may carry or create */
    long max_vars;               /* variables a shard may hold */
    long max_table_mb;           /* one embedding table's rows on this shard, at most */
    long max_pending_pulls;      /* deferred pulls in total */
    long max_pending_per_peer;   /* deferred pulls of one connection */
    long max_pending_mb;         /* memory of all deferred pulls */
    long max_pull_wait_ms;       /* a deferred pull waiting longer is answered ETIMEDOUT */
    long zmq_rcvhwm, zmq_sndhwm; /* ZeroMQ's per-connection queues (messages) */
    long turn_messages;          /* requests handled per loop turn */
    /* A replicated shard (docs/ARCHITECTURE.md, "Replicated shards") */
    long group_replicas; /* --replicas: psd serving this shard, a primary and backups */
    long replica;        /* this psd's index among them (0 starts as the primary) */
    char peers[2048];    /* the group's addresses, comma-separated, in replica order */
    long lease_ms;       /* the primary's lease; a backup takes over after 1.5 of it */
} ps_server_config;

/* The most replicas a group may have (psd --replicas). */
#define PS_MAX_REPLICAS 2

/* Fills cfg from TF_CONFIG (when tf_config is non-NULL and non-empty, task type
 * must be "ps") and then from the flags, which win. Returns PS_OK; 1 when --help
 * or --help-man was asked (usage, or the man page's scdoc, already printed to
 * stdout); PS_EINVAL with a reason in err for bad or missing configuration. */
int ps_server_config_parse(int argc, char **argv, const char *tf_config, ps_server_config *cfg,
                           char *err, size_t errlen);
/* Prints the usage text generated from the table. */
void ps_server_config_usage(FILE *out);
const char *ps_mode_name(long mode);

#endif
