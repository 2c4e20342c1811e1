/* psd's configuration table: flags, TF_CONFIG, defaults, bounds and --help. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"
#include "tfconfig.h"

typedef enum { OPT_LONG, OPT_STR, OPT_MODE } opt_type;

typedef struct {
    const char *name;
    opt_type type;
    size_t offset;
    size_t size; /* OPT_STR: buffer size */
    long min, max;
    const char *def; /* NULL: required (unless TF_CONFIG gives it) */
    const char *help;
} config_entry;

#define F(field) offsetof(ps_server_config, field), sizeof(((ps_server_config *)0)->field)

static const config_entry table[] = {
    {"bind", OPT_STR, F(bind), 0, 0, "0.0.0.0", "address to listen on"},
    {"port", OPT_LONG, F(port), 0, 65535, NULL, "TCP port (0: any free port); TF_CONFIG gives it"},
    {"shard", OPT_LONG, F(shard), 0, 65535, "0", "index of this shard (TF_CONFIG task.index)"},
    {"num-shards", OPT_LONG, F(num_shards), 1, 65536, "1", "shards in the job (TF_CONFIG: len(cluster.ps))"},
    {"workers", OPT_LONG, F(workers), 1, 65536, "1",
     "workers in the job (TF_CONFIG: chief + workers); the sync barrier waits for all"},
    {"mode", OPT_MODE, F(mode), 0, 1, "sync", "sync (average all workers' pushes per step) or async"},
    {"ready-file", OPT_STR, F(ready_file), 0, 0, "",
     "write \"host:port\" here once listening (for supervisors)"},
    {"log-level", OPT_STR, F(log_level), 0, 0, "info", "debug, info, warn or error"},
};
#define N_ENTRIES (sizeof table / sizeof table[0])

const char *ps_mode_name(long mode) {
    return mode == PS_MODE_ASYNC ? "async" : "sync";
}

void ps_server_config_usage(FILE *out) {
    fprintf(out, "usage: psd [options]\n"
                 "Parameter-server shard: holds its share of the model's variables and applies\n"
                 "optimizer updates to them. Configuration comes from TF_CONFIG (task type \"ps\")\n"
                 "and these flags, which win.\n\noptions:\n");
    for (size_t i = 0; i < N_ENTRIES; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s %s", table[i].name,
                 table[i].type == OPT_STR ? "STR" : table[i].type == OPT_MODE ? "MODE" : "N");
        fprintf(out, "  %-22s %s", left, table[i].help);
        if (table[i].def && *table[i].def) fprintf(out, " [default: %s]", table[i].def);
        fprintf(out, "\n");
    }
    fprintf(out, "  %-22s %s\n", "-h, --help", "show this help");
    fprintf(out, "\nexit status: 0 after SIGTERM/SIGINT or a Shutdown request, 2 on bad configuration.\n");
}

static int set_value(ps_server_config *cfg, const config_entry *e, const char *val, char *err,
                     size_t errlen) {
    char *p = (char *)cfg + e->offset;
    if (e->type == OPT_STR) {
        if (strlen(val) >= e->size) {
            snprintf(err, errlen, "--%s: value too long", e->name);
            return PS_EINVAL;
        }
        memcpy(p, val, strlen(val) + 1);
        return PS_OK;
    }
    long v;
    if (e->type == OPT_MODE) {
        if (strcmp(val, "sync") == 0) v = PS_MODE_SYNC;
        else if (strcmp(val, "async") == 0) v = PS_MODE_ASYNC;
        else {
            snprintf(err, errlen, "--%s: '%s' is not sync or async", e->name, val);
            return PS_EINVAL;
        }
    } else {
        char *end;
        errno = 0;
        v = strtol(val, &end, 10);
        if (errno || end == val || *end || v < e->min || v > e->max) {
            snprintf(err, errlen, "--%s: '%s' is not an integer in [%ld, %ld]", e->name, val,
                     e->min, e->max);
            return PS_EINVAL;
        }
    }
    memcpy(p, &v, sizeof v);
    return PS_OK;
}

static int apply_tf_config(const char *json, ps_server_config *cfg, unsigned char *given, char *err,
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
        char host[256];
        int port;
        const char *addr = c.ps[c.task_index];
        if (ps_parse_hostport(addr, host, sizeof host, &port) != PS_OK) {
            snprintf(err, errlen, "TF_CONFIG: cluster.ps[%d] = '%s' is not host:port",
                     c.task_index, addr);
            rc = PS_EINVAL;
        } else {
            cfg->port = port;
            cfg->shard = c.task_index;
            cfg->num_shards = (long)c.n_ps;
            if (ps_cluster_num_workers(&c) > 0) cfg->workers = ps_cluster_num_workers(&c);
            for (size_t i = 0; i < N_ENTRIES; i++)
                if (strcmp(table[i].name, "port") == 0) given[i] = 1;
        }
    }
    ps_cluster_free(&c);
    return rc;
}

int ps_server_config_parse(int argc, char **argv, const char *tf_config, ps_server_config *cfg,
                           char *err, size_t errlen) {
    memset(cfg, 0, sizeof *cfg);
    unsigned char given[N_ENTRIES] = {0};
    for (size_t i = 0; i < N_ENTRIES; i++)
        if (table[i].def && set_value(cfg, &table[i], table[i].def, err, errlen) != PS_OK)
            return PS_EINVAL;
    if (tf_config && *tf_config && apply_tf_config(tf_config, cfg, given, err, errlen) != PS_OK)
        return PS_EINVAL;

    struct option longopts[N_ENTRIES + 2];
    for (size_t i = 0; i < N_ENTRIES; i++)
        longopts[i] = (struct option){table[i].name, required_argument, NULL, (int)i + 1000};
    longopts[N_ENTRIES] = (struct option){"help", no_argument, NULL, 'h'};
    longopts[N_ENTRIES + 1] = (struct option){0};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        if (c == 'h') {
            ps_server_config_usage(stdout);
            return 1;
        }
        if (c == '?' || c == ':') {
            const char *bad = argv[optind - 1];
            snprintf(err, errlen, "%s: %s (see psd --help)", bad,
                     c == ':' ? "needs a value" : "unknown option");
            return PS_EINVAL;
        }
        size_t i = (size_t)(c - 1000);
        if (set_value(cfg, &table[i], optarg, err, errlen) != PS_OK) return PS_EINVAL;
        given[i] = 1;
    }
    if (optind < argc) {
        snprintf(err, errlen, "unexpected argument '%s' (see psd --help)", argv[optind]);
        return PS_EINVAL;
    }
    for (size_t i = 0; i < N_ENTRIES; i++) {
        if (!table[i].def && !given[i]) {
            snprintf(err, errlen, "--%s is required (or set TF_CONFIG)", table[i].name);
            return PS_EINVAL;
        }
    }
    if (cfg->shard >= cfg->num_shards) {
        snprintf(err, errlen, "--shard %ld is out of range for --num-shards %ld", cfg->shard,
                 cfg->num_shards);
        return PS_EINVAL;
    }
    return PS_OK;
}
