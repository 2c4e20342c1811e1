/* psd's configuration table: flags, TF_CONFIG, defaults, bounds and --help. */
#include "config.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"
#include "ps_error.h"
#include "shared_flags.h"
#include "tfconfig.h"

#define F(field) PS_OPTION_FIELD(ps_server_config, field)

static const ps_option table[] = {
    {.like = &ps_flag_transport, PS_OPTION_AT(ps_server_config, transport)},
    {"bind", PS_OPTION_STR, F(bind), 0, 0, "0.0.0.0", NULL, "ADDR", "tcp: address to listen on"},
    {"port", PS_OPTION_LONG, F(port), 0, PS_MAX_PORT, NULL, NULL, "N",
     "tcp: port (0: any free port); TF_CONFIG gives it; required with tcp"},
    {"ipc-path", PS_OPTION_STR, F(ipc_path), 0, 0, "", NULL, "PATH",
     "ipc: Unix socket path (at most 107 bytes), required with ipc; a stale socket left "
     "by a dead psd is replaced, the socket is removed at a clean stop",
     .doc = "A socket another process listens on is an error (exit status 2). psd holds the lock "
            "file PATH.lock (flock) from before it looks at PATH until it exits, so of two psd "
            "started at once on one path exactly one serves and the other exits 2; a clean stop "
            "removes the lock file, and one a killed psd leaves behind is harmless (the lock "
            "died with the process). TF_CONFIG gives the path as ipc://PATH"},
    {"shard", PS_OPTION_LONG, F(shard), 0, PS_MAX_SHARDS - 1, "0", NULL, "N",
     "index of this shard (TF_CONFIG task.index)"},
    {"num-shards", PS_OPTION_LONG, F(num_shards), 1, PS_MAX_SHARDS, "1", NULL, "N",
     "shards in the job (TF_CONFIG: len(cluster.ps))"},
    {.like = &ps_flag_workers, PS_OPTION_AT(ps_server_config, workers)},
    {.like = &ps_flag_mode, PS_OPTION_AT(ps_server_config, mode)},
    {"ready-file", PS_OPTION_STR, F(ready_file), 0, 0, "", NULL, "FILE",
     "write \"host:port\" (ipc: \"ipc://PATH\") here once listening (for supervisors)",
     .doc = "It is written after any checkpoint is restored and the signal handlers are "
            "installed: a SIGTERM sent as soon as it appears stops psd cleanly"},
    {"log-level", PS_OPTION_CHOICE, F(log_level), 0, 0, "info", "debug|info|warn|error", NULL,
     "log verbosity"},
    {.like = &ps_flag_worker_timeout, PS_OPTION_AT(ps_server_config, worker_timeout_ms)},
    {.like = &ps_flag_replicas,
     PS_OPTION_AT(ps_server_config, replicas),
     .doc = "R below --workers makes the slowest workers backup workers. At most --workers; "
            "refused with --mode async"},
    {.like = &ps_flag_workers_min,
     PS_OPTION_AT(ps_server_config, workers_min),
     .doc = "At most --workers; refused with --mode async. A worker that joins later (a "
            "Hello to a slot not live) counts from the next step; data is not re-sharded: "
            "each worker reads the shard of its --index out of --workers"},
    {.like = &ps_flag_staleness,
     PS_OPTION_AT(ps_server_config, staleness),
     .doc = "Refused with --mode sync"},
    {"checkpoint-dir", PS_OPTION_STR, F(checkpoint_dir), 0, 0, "", NULL, "DIR",
     "write checkpoints here and restore the newest valid one at start (\"\": none)",
     .doc = "A checkpoint is written every --checkpoint-every seconds, on a Checkpoint request "
            "(psctl checkpoint) and at SIGTERM/SIGINT, to a temporary file renamed when complete "
            "(docs/FORMATS.md). Give each shard its own directory: a checkpoint of another shard "
            "(index or --num-shards) is refused (exit status 2)"},
    {.like = &ps_flag_checkpoint_every, PS_OPTION_AT(ps_server_config, checkpoint_every)},
    {"metrics-port", PS_OPTION_LONG, F(metrics_port), -1, PS_MAX_PORT, "-1", NULL, "N",
     "serve GET /metrics (Prometheus) and /healthz over HTTP on this port (0: any free "
     "port, logged as \"metrics on http://HOST:PORT/metrics\"; -1: off)"},
    {"metrics-bind", PS_OPTION_STR, F(metrics_bind), 0, 0, "0.0.0.0", NULL, "ADDR",
     "address for --metrics-port"},
    {"curve-secret", PS_OPTION_STR, F(curve_secret), 0, 0, "", NULL, "FILE",
     "CurveZMQ: encrypt and authenticate with this key pair (psctl keygen); needs "
     "--authorized-keys",
     .doc = "docs/SECURITY.md has the whole setup"},
    {"authorized-keys", PS_OPTION_STR, F(authorized_keys), 0, 0, "", NULL, "DIR",
     "CurveZMQ: accept only clients whose public key is a file in DIR"},
    {"max-message-mb", PS_OPTION_LONG, F(max_message_mb), 1, 1 << 20, "2048", NULL, "MB",
     "largest message accepted (ZMQ_MAXMSGSIZE); a bigger one drops the connection"},
    {"max-tensor-mb", PS_OPTION_LONG, F(max_tensor_mb), 1, 1 << 20, "1024", NULL, "MB",
     "largest tensor a request may create or carry"},
    {"max-vars", PS_OPTION_LONG, F(max_vars), 1, 100000000, "100000", NULL, "N",
     "variables this shard may hold"},
    {"max-table-mb", PS_OPTION_LONG, F(max_table_mb), 1, 1 << 30, "4096", NULL, "MB",
     "memory one embedding table's rows may take on this shard; at it the table's policy "
     "applies (the least recently pushed row evicted, or new rows refused)"},
    {"keep-checkpoints", PS_OPTION_LONG, F(keep_checkpoints), 1, 1000, "3", NULL, "K",
     "newest checkpoint files kept in DIR"},
    {"max-pending-pulls", PS_OPTION_LONG, F(max_pending_pulls), 1, 10000000, "10000", NULL, "N",
     "deferred pulls (waiting for a version or the staleness gate) held in total; one more "
     "is refused with EBUSY"},
    {"max-pending-per-peer", PS_OPTION_LONG, F(max_pending_per_peer), 1, 10000000, "64", NULL, "N",
     "deferred pulls one connection may have waiting; one more is refused with EBUSY"},
    {"max-pending-mb", PS_OPTION_LONG, F(max_pending_mb), 1, 1 << 20, "64", NULL, "MB",
     "memory all deferred pulls may take; one more is refused with EBUSY"},
    {"max-pull-wait-ms", PS_OPTION_LONG, F(max_pull_wait_ms), 10, 86400000, "600000", NULL, "MS",
     "a deferred pull still waiting after this long is answered ETIMEDOUT"},
    {"zmq-rcvhwm", PS_OPTION_LONG, F(zmq_rcvhwm), 1, 10000000, "1000", NULL, "N",
     "messages ZeroMQ queues per connection before psd reads them (ZMQ_RCVHWM); a peer "
     "beyond it waits"},
    {"zmq-sndhwm", PS_OPTION_LONG, F(zmq_sndhwm), 1, 10000000, "1000", NULL, "N",
     "replies ZeroMQ queues per connection (ZMQ_SNDHWM); a reply to a peer that does not "
     "read them is dropped and counted"},
    {"turn-messages", PS_OPTION_LONG, F(turn_messages), 1, 1000000, "256", NULL, "N",
     "requests handled per loop turn (and at most 10 ms of them) before timers, signals and "
     "HTTP get their turn"},
    {"replicas", PS_OPTION_LONG, F(group_replicas), 1, PS_MAX_REPLICAS, "1", NULL, "R",
     "psd processes serving this shard: a primary and R-1 backups that apply every update "
     "before it is acknowledged (needs --replica and --peers)",
     .doc = "Replica 0 starts as the primary. A backup that hears nothing from its primary for "
            "1.5 x --lease-ms takes over with the next term; workers list a shard's replicas "
            "in one ps entry separated by '|'. At most 2 for now: the rule for electing one of "
            "several backups is not built. docs/ARCHITECTURE.md, \"Replicated shards\", states "
            "the rule and its limits"},
    {"replica", PS_OPTION_LONG, F(replica), 0, PS_MAX_REPLICAS - 1, "0", NULL, "I",
     "this psd's index among its shard's --replicas (0 starts as the primary)"},
    {"peers", PS_OPTION_STR, F(peers), 0, 0, "", NULL, "ADDR,...",
     "with --replicas R > 1: the R addresses of this shard's replicas in replica order, this "
     "psd's own at --replica (host:port, or ipc://PATH)"},
    {"lease-ms", PS_OPTION_LONG, F(lease_ms), 50, 600000, "500", NULL, "MS",
     "with --replicas > 1: the primary acknowledges updates only while every backup has "
     "answered within this long; a backup takes over after 1.5 x this without a word"},
};
#define N_ENTRIES (sizeof table / sizeof table[0])

const char *ps_mode_name(long mode) {
    return mode == PS_MODE_ASYNC ? "async" : "sync";
}

/* What main.c returns. */
static const ps_exit_status exits[] = {
    {0, "a clean stop: after SIGTERM/SIGINT (with --checkpoint-dir, once the final checkpoint "
        "is written) or a Shutdown request"},
    {1, "the checkpoint promised at SIGTERM/SIGINT could not be written (the updates since the "
        "last one are lost)"},
    {2, "bad configuration (a message names the flag or TF_CONFIG field), or psd could not "
        "start: its address or --ipc-path is taken (another psd holds PATH.lock), the key "
        "files or --checkpoint-dir are unusable, the newest checkpoint belongs to another "
        "shard, the --metrics-port cannot be bound or the --ready-file written"},
};
#define N_EXITS (sizeof exits / sizeof exits[0])

void ps_server_config_usage(FILE *out) {
    fprintf(out,
            "usage: psd [options]\n"
            "Parameter-server shard: holds its share of the model's variables and applies\n"
            "optimizer updates to them. Configuration comes from TF_CONFIG (task type \"ps\")\n"
            "and these flags, which win.\n\noptions:\n");
    ps_options_usage(table, N_ENTRIES, out);
    fprintf(out, "\n");
    ps_exit_status_usage(exits, N_EXITS, out);
}

/* Takes this shard's address, index and the job's size from TF_CONFIG; *gave_port is set
 * when its address is host:port. Returns PS_OK or PS_EINVAL with a reason. */
static int apply_tf_config(const char *json, ps_server_config *cfg, int *gave_port, char *err,
                           size_t errlen) {
    ps_cluster c;
    char why[256];
    int rc = ps_cluster_from_tfconfig(json, &c, why, sizeof why);
    if (rc != PS_OK) {
        snprintf(err, errlen, "%s%s", strncmp(why, "TF_CONFIG", 9) ? "TF_CONFIG: " : "", why);
        return PS_EINVAL;
    }
    rc = PS_OK;
    if (strcmp(c.task_type, "ps") != 0) {
        snprintf(err, errlen, "TF_CONFIG: psd needs task.type \"ps\" (got \"%s\")", c.task_type);
        rc = PS_EINVAL;
    } else if (c.n_ps == 0) {
        snprintf(err, errlen, "TF_CONFIG: cluster.ps is empty");
        rc = PS_EINVAL;
    } else {
        char host[256], why[200];
        int port;
        const char *addr = c.ps[c.task_index];
        const char *ipc = ps_ipc_path(addr);
        if (ipc && ps_check_ipc_path(ipc, why, sizeof why) != PS_OK) {
            snprintf(err, errlen, "TF_CONFIG: cluster.ps[%d]: %s", c.task_index, why);
            rc = PS_EINVAL;
        } else if (ipc) { /* the flags may still say otherwise (checked after them) */
            cfg->transport = PS_TRANSPORT_IPC;
            snprintf(cfg->ipc_path, sizeof cfg->ipc_path, "%s", ipc);
        } else if (ps_parse_hostport(addr, host, sizeof host, &port) != PS_OK) {
            snprintf(err, errlen, "TF_CONFIG: cluster.ps[%d] = '%s' is not host:port", c.task_index,
                     addr);
            rc = PS_EINVAL;
        } else {
            cfg->port = port;
            *gave_port = 1;
        }
        if (rc == PS_OK) {
            cfg->shard = c.task_index;
            cfg->num_shards = (long)c.n_ps;
            if (ps_cluster_num_workers(&c) > 0) cfg->workers = ps_cluster_num_workers(&c);
        }
    }
    ps_cluster_free(&c);
    return rc;
}

/* 1 when the flag `name` was given on the command line. */
static int was_given(const unsigned char *given, const char *name) {
    return given[ps_options_find(table, N_ENTRIES, name) - table];
}

/* --transport against --bind/--port/--ipc-path (flags or TF_CONFIG's own ps entry).
 * Returns PS_OK or PS_EINVAL with a reason. */
static int check_transport(ps_server_config *cfg, const unsigned char *given, char *err,
                           size_t errlen) {
    char why[200];
    if (cfg->transport == PS_TRANSPORT_TCP) {
        if (was_given(given, "ipc-path")) {
            snprintf(err, errlen, "--ipc-path applies to --transport ipc only");
            return PS_EINVAL;
        }
        cfg->ipc_path[0] = '\0'; /* from TF_CONFIG, overridden by --transport tcp */
        return PS_OK;
    }
    if (!cfg->ipc_path[0]) {
        snprintf(err, errlen,
                 "--transport ipc needs --ipc-path PATH (the Unix socket to listen on)");
        return PS_EINVAL;
    }
    if (ps_check_ipc_path(cfg->ipc_path, why, sizeof why) != PS_OK) {
        snprintf(err, errlen, "--ipc-path: %s", why);
        return PS_EINVAL;
    }
    if (was_given(given, "bind") || was_given(given, "port")) {
        snprintf(err, errlen, "--bind and --port apply to --transport tcp only");
        return PS_EINVAL;
    }
    return PS_OK;
}

/* --replicas, --replica, --peers and --lease-ms together. PS_OK or PS_EINVAL. */
static int check_replicas(const ps_server_config *cfg, const unsigned char *given, char *err,
                          size_t errlen) {
    if (cfg->group_replicas == 1) {
        const char *stray = was_given(given, "replica")    ? "--replica"
                            : was_given(given, "peers")    ? "--peers"
                            : was_given(given, "lease-ms") ? "--lease-ms"
                                                           : NULL;
        if (stray) {
            snprintf(err, errlen, "%s applies with --replicas 2 only (this shard has one psd)",
                     stray);
            return PS_EINVAL;
        }
        return PS_OK;
    }
    if (cfg->replica >= cfg->group_replicas) {
        snprintf(err, errlen, "--replica %ld is out of range for --replicas %ld", cfg->replica,
                 cfg->group_replicas);
        return PS_EINVAL;
    }
    size_t n = 0;
    for (const char *p = cfg->peers; *p; n++) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 0) break;
        p += len + (e ? 1 : 0);
        if (e && !*p) {
            n = 0;
            break;
        }
    }
    if (n != (size_t)cfg->group_replicas) {
        snprintf(err, errlen,
                 "--replicas %ld needs --peers with exactly %ld comma-separated addresses (the "
                 "shard's replicas in order, this psd's own at --replica %ld); got '%s'",
                 cfg->group_replicas, cfg->group_replicas, cfg->replica, cfg->peers);
        return PS_EINVAL;
    }
    return PS_OK;
}

int ps_server_config_parse(int argc, char **argv, const char *tf_config, ps_server_config *cfg,
                           char *err, size_t errlen) {
    memset(cfg, 0, sizeof *cfg);
    unsigned char given[N_ENTRIES] = {0};
    int tf_port = 0;
    if (ps_options_defaults(table, N_ENTRIES, cfg, err, errlen) != PS_OK) return PS_EINVAL;
    /* The flags win over TF_CONFIG, so they are stored after it; but --help and --help-man
     * answer whatever TF_CONFIG holds: a first pass into a scratch config finds them (and
     * a bad flag) before TF_CONFIG is read. */
    ps_server_config scratch = *cfg;
    int rc = ps_options_parse(table, N_ENTRIES, argc, argv, &scratch, NULL, "psd", err, errlen);
    if (rc == PS_OK) {
        if (tf_config && *tf_config &&
            apply_tf_config(tf_config, cfg, &tf_port, err, errlen) != PS_OK)
            return PS_EINVAL;
        rc = ps_options_parse(table, N_ENTRIES, argc, argv, cfg, given, "psd", err, errlen);
    }
    if (rc == PS_OPTIONS_HELP || rc == PS_OPTIONS_HELP_MAN) {
        if (rc == PS_OPTIONS_HELP)
            ps_server_config_usage(stdout);
        else
            ps_options_help_man(table, N_ENTRIES, exits, N_EXITS, stdout);
        return 1;
    }
    if (rc != PS_OK) return PS_EINVAL;
    if (check_transport(cfg, given, err, errlen) != PS_OK) return PS_EINVAL;
    for (size_t i = 0; i < N_ENTRIES; i++) {
        ps_option o = ps_option_resolve(&table[i]);
        int is_port = strcmp(o.name, "port") == 0;
        if (is_port && (tf_port || cfg->transport == PS_TRANSPORT_IPC)) continue;
        if (!o.def && !given[i]) {
            snprintf(err, errlen, "--%s is required (or set TF_CONFIG)", o.name);
            return PS_EINVAL;
        }
    }
    if (cfg->shard >= cfg->num_shards) {
        snprintf(err, errlen, "--shard %ld is out of range for --num-shards %ld", cfg->shard,
                 cfg->num_shards);
        return PS_EINVAL;
    }
    if (cfg->replicas > cfg->workers) {
        snprintf(err, errlen, "--replicas-to-aggregate %ld is more than the job's %ld workers",
                 cfg->replicas, cfg->workers);
        return PS_EINVAL;
    }
    if (cfg->replicas && cfg->mode != PS_MODE_SYNC) {
        snprintf(err, errlen, "--replicas-to-aggregate applies to --mode sync only");
        return PS_EINVAL;
    }
    if (!cfg->curve_secret[0] != !cfg->authorized_keys[0]) {
        snprintf(err, errlen, "--curve-secret and --authorized-keys go together");
        return PS_EINVAL;
    }
    if (cfg->workers_min > cfg->workers) {
        snprintf(err, errlen, "--workers-min %ld is more than the job's %ld workers",
                 cfg->workers_min, cfg->workers);
        return PS_EINVAL;
    }
    if (cfg->workers_min && cfg->mode != PS_MODE_SYNC) {
        snprintf(err, errlen, "--workers-min applies to --mode sync only");
        return PS_EINVAL;
    }
    if (cfg->staleness >= 0 && cfg->mode != PS_MODE_ASYNC) {
        snprintf(err, errlen, "--staleness applies to --mode async only");
        return PS_EINVAL;
    }
    return check_replicas(cfg, given, err, errlen);
}
