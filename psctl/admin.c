/* psctl checkpoint / shutdown / status: sends one request to every psd shard at once
 * through libps (ps.h), waits for the answers under one deadline and reports each shard
 * (status: as a table or JSON). */
#include "admin.h"

#include "options.h"
#include "ps.h"
#include "ps_error.h"
#include "replicas.h"
#include "tfconfig.h"
#include "utf8.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_TIMEOUT_S "10"
#define MAX_TIMEOUT_S 86400

/* What one shard's request came to. */
enum { DONE_OK = 1, DONE_FAILED = -1, TIMED_OUT = -2 };

typedef struct {
    int state;
    ps_stats stats;          /* status, DONE_OK: owned */
    ps_checkpoint_info ckpt; /* checkpoint, DONE_OK */
    char line[768];          /* DONE_FAILED, or DONE_OK with a describe(): what to say about it */
} shard_req;

typedef enum { CMD_CHECKPOINT, CMD_SHUTDOWN, CMD_STATUS } cmd_kind;

/* One admin command: the request it sends and how it reports the expected reply. */
typedef struct {
    const char *name;
    const char *what; /* for --help: "write a checkpoint now" */
    cmd_kind kind;
    /* The line printed for a shard that answered (NULL: the command prints its own report). */
    void (*describe)(const shard_req *s, char *buf, size_t n);
    int json;                    /* accepts --json */
    const ps_exit_status *exits; /* what admin_main returns: N_EXITS entries */
} admin_cmd;

#define N_EXITS 3
static const ps_exit_status request_exits[N_EXITS] = {
    {0, "every shard succeeded"},
    {1, "a shard failed, answered an error or did not answer in time"},
    {2, "bad usage: a flag, the shards' list (--ps or TF_CONFIG), or CurveZMQ key files that "
        "cannot be used"},
};
static const ps_exit_status status_exits[N_EXITS] = {
    {0, "every shard answered"},
    {1, "a shard did not answer in time or answered an error"},
    {2, "bad usage: a flag, the shards' list (--ps or TF_CONFIG), or CurveZMQ key files that "
        "cannot be used"},
};

/* ---- the commands ---------------------------------------------------------------- */

/* "812 B", "5.2 kB", "5.2 MB", "1.3 GB" (powers of 1000). */
static void format_bytes(char *buf, size_t n, uint64_t bytes) {
    static const char *const units[] = {"kB", "MB", "GB", "TB"};
    if (bytes < 1000) {
        snprintf(buf, n, "%llu B", (unsigned long long)bytes);
        return;
    }
    double v = (double)bytes / 1000.0;
    size_t u = 0;
    while (v >= 999.95 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1000.0;
        u++;
    }
    snprintf(buf, n, "%.1f %s", v, units[u]);
}

static void describe_checkpoint(const shard_req *s, char *buf, size_t n) {
    const ps_checkpoint_info *r = &s->ckpt;
    char size[32];
    format_bytes(size, sizeof size, r->bytes);
    snprintf(buf, n, "checkpoint version %llu \xe2\x86\x92 %s (%s)", (unsigned long long)r->version,
             *r->path ? r->path : "?", size);
}

static void describe_shutdown(const shard_req *s, char *buf, size_t n) {
    (void)s;
    snprintf(buf, n, "shutting down");
}

static const admin_cmd checkpoint_cmd = {
    .name = "checkpoint",
    .what = "write a checkpoint now (psd needs --checkpoint-dir)",
    .kind = CMD_CHECKPOINT,
    .describe = describe_checkpoint,
    .exits = request_exits,
};
static const admin_cmd shutdown_cmd = {
    .name = "shutdown",
    .what = "stop gracefully (psd answers, then exits 0)",
    .kind = CMD_SHUTDOWN,
    .describe = describe_shutdown,
    .exits = request_exits,
};
static const admin_cmd status_cmd = {
    .name = "status",
    .what = "report its stats",
    .kind = CMD_STATUS,
    .json = 1,
    .exits = status_exits,
};

/* ---- options --------------------------------------------------------------------- */

typedef struct {
    const char *ps;   /* --ps host:port|ipc://PATH,... or NULL: TF_CONFIG */
    double timeout_s; /* --timeout */
    int json;         /* --json (status) */
    /* --curve-secret, --server-key: CurveZMQ key files, or NULL: plaintext */
    const char *curve_secret, *server_key;
} admin_opts;

/* The options of every admin command; --json (last) only for status. */
static const ps_option table[] = {
    {"ps", PS_OPTION_ARG, PS_OPTION_FIELD(admin_opts, ps), 0, 0, NULL, NULL, "HOST:PORT,...",
     "the shards, in shard order; ipc://PATH for a shard on this machine's Unix socket",
     .default_text = "TF_CONFIG's cluster.ps"},
    {"timeout", PS_OPTION_SECONDS, PS_OPTION_FIELD(admin_opts, timeout_s), 0, MAX_TIMEOUT_S,
     DEFAULT_TIMEOUT_S, NULL, "SECONDS", "wait this long for each shard's answer",
     .flags = PS_OPTION_ABOVE_MIN},
    {"curve-secret", PS_OPTION_ARG, PS_OPTION_FIELD(admin_opts, curve_secret), 0, 0, NULL, NULL,
     "FILE",
     "CurveZMQ: talk to shards run with --curve-secret, with this key pair (psctl keygen; its "
     ".pub must be in the shards' --authorized-keys)"},
    {"server-key", PS_OPTION_ARG, PS_OPTION_FIELD(admin_opts, server_key), 0, 0, NULL, NULL, "FILE",
     "CurveZMQ: the shards' public key (their .pub file)"},
    {"json", PS_OPTION_FLAG, PS_OPTION_FIELD(admin_opts, json), 0, 0, NULL, NULL, NULL,
     "print a JSON array instead: per shard \"shard\", \"address\", \"ok\" and every "
     "StatsReply field (counters as numbers, \"incarnation\" as a decimal string, checkpoint "
     "fields null when there is none, \"vars\"), or \"ok\": false and \"error\""},
};
/* The entries cmd takes: all, or all but --json. */
static size_t n_options(const admin_cmd *cmd) {
    return sizeof table / sizeof table[0] - (cmd->json ? 0 : 1);
}

static void usage(const admin_cmd *cmd, FILE *f) {
    if (cmd->json)
        fprintf(f,
                "usage: psctl %s [--ps HOST:PORT|ipc://PATH,...] [--json] [--timeout SECONDS]\n"
                "       [--curve-secret FILE --server-key FILE]\n"
                "Asks every psd shard (all at once) to %s.\n"
                "Prints a table, one row per shard:\n"
                "  SHARD ADDRESS MODE VERSION WORKERS (live/total) UPTIME REQUESTS ERRORS\n"
                "  PUSHES (applied) DROPPED (pushes) PENDING (pulls) CKPT (version of the newest\n"
                "  checkpoint written or restored) CKPT_AGE (\"-\": none)\n"
                "A shard that does not answer shows \"unreachable (no answer in Ns)\".\n\n",
                cmd->name, cmd->what);
    else
        fprintf(f,
                "usage: psctl %s [--ps HOST:PORT|ipc://PATH,...] [--timeout SECONDS]\n"
                "       [--curve-secret FILE --server-key FILE]\n"
                "Asks every psd shard to %s.\nPrints one line per shard.\n\n",
                cmd->name, cmd->what);
    fprintf(f, "options:\n");
    ps_options_usage(table, n_options(cmd), f);
    fprintf(f, "\n");
    ps_exit_status_usage(cmd->exits, N_EXITS, f);
}

/* Returns 0 with o filled in, 1 after --help or --help-man, 2 after a message to stderr. */
static int parse(const admin_cmd *cmd, int argc, char **argv, admin_opts *o) {
    char prog[32], err[512];
    snprintf(prog, sizeof prog, "psctl %s", cmd->name);
    memset(o, 0, sizeof *o);
    int rc = ps_options_defaults(table, n_options(cmd), o, err, sizeof err);
    if (rc == PS_OK)
        rc = ps_options_parse_args(table, n_options(cmd), argc, argv, o, NULL, prog,
                                   PS_OPTIONS_IN_ORDER, NULL, err, sizeof err);
    if (rc == PS_OPTIONS_HELP || rc == PS_OPTIONS_HELP_MAN) {
        if (rc == PS_OPTIONS_HELP)
            usage(cmd, stdout);
        else
            ps_options_help_man(table, n_options(cmd), cmd->exits, N_EXITS, stdout);
        return 1;
    }
    if (rc != PS_OK) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return 2;
    }
    if (!o->curve_secret != !o->server_key) {
        fprintf(stderr, "%s: --curve-secret and --server-key go together\n", prog);
        fprintf(stderr, "Try '%s --help'.\n", prog);
        return 2;
    }
    return 0;
}

/* The shards from --ps, else from $TF_CONFIG's cluster.ps, each a usable host:port or
 * ipc://PATH.
 * Returns 0 (the caller frees cl), or 2 after a message. */
static int load_shards(const admin_cmd *cmd, const admin_opts *o, ps_cluster *cl) {
    char err[256];
    const char *src = "--ps";
    int rc;
    if (o->ps) {
        rc = ps_cluster_from_lists(o->ps, NULL, cl, err, sizeof err);
    } else {
        const char *tf = getenv("TF_CONFIG");
        if (!tf || !*tf) {
            fprintf(stderr, "psctl %s: --ps is required (or TF_CONFIG with cluster.ps)\n",
                    cmd->name);
            return 2;
        }
        src = "TF_CONFIG";
        rc = ps_cluster_from_tfconfig(tf, cl, err, sizeof err);
    }
    if (rc != PS_OK) {
        fprintf(stderr, "psctl %s: %s: %s\n", cmd->name, src, err);
        return 2;
    }
    if (cl->n_ps == 0) {
        fprintf(stderr, "psctl %s: %s lists no ps shards\n", cmd->name, src);
        return 2;
    }
    for (size_t i = 0; i < cl->n_ps; i++) {
        /* "host:port" with a port 1..65535, "ipc://PATH", or a replica group "A|B" of those */
        if (ps_check_shard_entry(cl->ps[i], err, sizeof err) != PS_OK) {
            fprintf(stderr, "psctl %s: %s: ps %zu: %s\n", cmd->name, src, i, err);
            return 2;
        }
    }
    return 0;
}

/* ---- requests -------------------------------------------------------------------- */

static void set_result(shard_req *s, int state, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_result(shard_req *s, int state, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->line, sizeof s->line, fmt, ap);
    va_end(ap);
    s->state = state;
}

/* Sends cmd to every shard at once through libps and waits for all answers until
 * timeout_s. Returns the n_ps outcomes in shard order (the caller frees them with
 * free_results), or NULL after a message (2 in *bad_usage for unusable CurveZMQ keys). */
static shard_req *exchange(const admin_cmd *cmd, const ps_cluster *cl, const admin_opts *o,
                           int *bad_usage) {
    size_t n = cl->n_ps;
    char err[1200];
    ps_client *c = NULL;
    shard_req *reqs = calloc(n, sizeof *reqs);
    ps_shard_result *res = calloc(n, sizeof *res);
    ps_stats *stats = cmd->kind == CMD_STATUS ? calloc(n, sizeof *stats) : NULL;
    ps_checkpoint_info *ckpt = cmd->kind == CMD_CHECKPOINT ? calloc(n, sizeof *ckpt) : NULL;
    int rc = !reqs || !res || (cmd->kind == CMD_STATUS && !stats) ||
                     (cmd->kind == CMD_CHECKPOINT && !ckpt)
                 ? PS_ENOMEM
                 : ps_client_open(&c, (const char *const *)cl->ps, n, 0, 1, err, sizeof err);
    if (rc == PS_ENOMEM) snprintf(err, sizeof err, "out of memory");
    if (rc == PS_OK && o->curve_secret) {
        rc = ps_client_set_curve(c, o->curve_secret, o->server_key, err, sizeof err);
        if (rc != PS_OK) *bad_usage = 2;
    }
    if (rc == PS_OK) {
        double ms = o->timeout_s * 1000.0 + 0.5;
        ps_client_set_timeout(c, ms < 1 ? 1 : ms > 2e9 ? 2000000000 : (int)ms);
        ps_client_set_ipv6(c, 1);
        if (cmd->kind == CMD_STATUS)
            ps_client_stats_all(c, stats, res);
        else if (cmd->kind == CMD_CHECKPOINT)
            ps_client_checkpoint_all(c, ckpt, res);
        else
            ps_client_shutdown_all(c, res);
    }
    ps_client_close(c);
    if (rc != PS_OK) {
        fprintf(stderr, "psctl %s: %s\n", cmd->name, err);
        free(reqs);
        reqs = NULL;
    }
    for (size_t i = 0; reqs && i < n; i++) {
        shard_req *s = &reqs[i];
        const ps_shard_result *r = &res[i];
        if (r->rc == PS_OK) {
            s->state = DONE_OK;
            if (stats) s->stats = stats[i];
            if (ckpt) s->ckpt = ckpt[i];
            if (cmd->describe) cmd->describe(s, s->line, sizeof s->line);
        } else if (r->remote) {
            set_result(s, DONE_FAILED, "%s failed: %s: %s", cmd->name, ps_errname(r->rc), r->error);
        } else if (r->rc == PS_ETIMEDOUT) {
            s->state = TIMED_OUT;
        } else {
            set_result(s, DONE_FAILED, "%s", r->error);
        }
    }
    if (!reqs && stats)
        for (size_t i = 0; i < n; i++)
            ps_stats_free(&stats[i]);
    free(stats);
    free(ckpt);
    free(res);
    return reqs;
}

static void free_results(shard_req *reqs, size_t n) {
    for (size_t i = 0; i < n; i++)
        ps_stats_free(&reqs[i].stats);
    free(reqs);
}

/* Ends a report: "psctl CMD: k of n shards failed" on stderr when k > 0. Returns the
 * exit code: 0 all succeeded, 1 otherwise. */
static int report_failed(const admin_cmd *cmd, const shard_req *reqs, size_t n) {
    size_t failed = 0;
    for (size_t i = 0; i < n; i++)
        failed += reqs[i].state != DONE_OK;
    if (failed)
        fprintf(stderr, "psctl %s: %zu of %zu shard%s failed\n", cmd->name, failed, n,
                n == 1 ? "" : "s");
    return failed ? 1 : 0;
}

/* checkpoint, shutdown: one line per shard in shard order (stdout for successes,
 * stderr for failures). Returns the exit code. */
static int report_lines(const admin_cmd *cmd, const ps_cluster *cl, shard_req *reqs,
                        double timeout_s) {
    for (size_t i = 0; i < cl->n_ps; i++) {
        shard_req *s = &reqs[i];
        if (s->state == TIMED_OUT) set_result(s, DONE_FAILED, "no answer within %g s", timeout_s);
        fprintf(s->state == DONE_OK ? stdout : stderr, "ps %zu %s: %s\n", i, cl->ps[i], s->line);
    }
    return report_failed(cmd, reqs, cl->n_ps);
}

/* ---- psctl status ---------------------------------------------------------------- */

/* "42.0s", "3m07s", "2h05m", "3d04h". */
static void format_duration(char *buf, size_t n, double secs) {
    if (!(secs >= 0)) secs = 0;
    if (secs < 59.95) {
        snprintf(buf, n, "%.1fs", secs);
        return;
    }
    unsigned long long t = (unsigned long long)(secs + 0.5);
    if (t < 3600)
        snprintf(buf, n, "%llum%02llus", t / 60, t % 60);
    else if (t < 86400)
        snprintf(buf, n, "%lluh%02llum", t / 3600, t % 3600 / 60);
    else
        snprintf(buf, n, "%llud%02lluh", t / 86400, t % 86400 / 3600);
}

static const char *mode_name(const ps_stats *r, char *buf, size_t n) {
    if (r->mode == PS_MODE_SYNC) return "sync";
    if (r->mode == PS_MODE_ASYNC) return "async";
    snprintf(buf, n, "mode-%d", (int)r->mode);
    return buf;
}

/* What a shard's row says when it gave no stats. */
static void failure_text(const shard_req *s, double timeout_s, char *buf, size_t n) {
    if (s->state == TIMED_OUT)
        snprintf(buf, n, "unreachable (no answer in %gs)", timeout_s);
    else
        snprintf(buf, n, "%s", s->line);
}

enum {
    COL_SHARD,
    COL_ADDRESS,
    COL_MODE,
    COL_VERSION,
    COL_WORKERS,
    COL_UPTIME,
    COL_REQUESTS,
    COL_ERRORS,
    COL_PUSHES,
    COL_DROPPED,
    COL_PENDING,
    COL_CKPT,
    COL_CKPT_AGE,
    N_COLS
};
static const char *const col_names[N_COLS] = {
    "SHARD",  "ADDRESS", "MODE",    "VERSION", "WORKERS", "UPTIME",  "REQUESTS",
    "ERRORS", "PUSHES",  "DROPPED", "PENDING", "CKPT",    "CKPT_AGE"};
/* Numbers are right-aligned. */
static const unsigned char col_right[N_COLS] = {0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

/* an address is at most ~280 bytes (host:port or ipc://PATH from --ps or TF_CONFIG) */
#define CELL 300
typedef char status_row[N_COLS][CELL];

/* Fills the cells of shard i's row; a shard without stats only gets SHARD and ADDRESS. */
static void fill_row(status_row row, size_t i, const char *addr, const shard_req *s) {
    memset(row, 0, sizeof(status_row));
    snprintf(row[COL_SHARD], CELL, "%zu", i);
    snprintf(row[COL_ADDRESS], CELL, "%s", addr);
    if (s->state != DONE_OK) return;
    const ps_stats *r = &s->stats;
    char mode[32];
    snprintf(row[COL_MODE], CELL, "%s", mode_name(r, mode, sizeof mode));
    snprintf(row[COL_VERSION], CELL, "%llu", (unsigned long long)r->version);
    snprintf(row[COL_WORKERS], CELL, "%u/%u", (unsigned)r->live_workers, (unsigned)r->num_workers);
    format_duration(row[COL_UPTIME], CELL, r->uptime_seconds);
    snprintf(row[COL_REQUESTS], CELL, "%llu", (unsigned long long)r->requests);
    snprintf(row[COL_ERRORS], CELL, "%llu", (unsigned long long)r->errors);
    snprintf(row[COL_PUSHES], CELL, "%llu", (unsigned long long)r->pushes_applied);
    snprintf(row[COL_DROPPED], CELL, "%llu", (unsigned long long)r->dropped_pushes);
    snprintf(row[COL_PENDING], CELL, "%llu", (unsigned long long)r->pending_pulls);
    if (r->checkpoint_age_seconds < 0) {
        snprintf(row[COL_CKPT], CELL, "-");
        snprintf(row[COL_CKPT_AGE], CELL, "-");
    } else {
        snprintf(row[COL_CKPT], CELL, "%llu", (unsigned long long)r->checkpoint_version);
        format_duration(row[COL_CKPT_AGE], CELL, r->checkpoint_age_seconds);
    }
}

static void print_cells(status_row row, const size_t *width, size_t ncols) {
    for (size_t j = 0; j < ncols; j++)
        printf(col_right[j] ? "%s%*s" : "%s%-*s", j ? "  " : "", (int)width[j], row[j]);
}

/* The table on stdout; rows of shards without stats name the failure after ADDRESS. */
/* The embedding tables, a line per table and shard, under the shards' table
 * (nothing when no shard holds one). */
static void print_tables(const ps_cluster *cl, const shard_req *reqs) {
    int header = 0;
    for (size_t i = 0; i < cl->n_ps; i++) {
        if (reqs[i].state != DONE_OK) continue;
        const ps_stats *r = &reqs[i].stats;
        for (size_t k = 0; k < r->n_tables; k++) {
            const ps_table_stats *t = &r->tables[k];
            if (!header++)
                printf("\n%-24s %5s %5s %12s %12s %10s %10s %10s %12s %12s\n", "TABLE", "SHARD",
                       "DIM", "ROWS", "ADMITTED", "EVICTED", "EXPIRED", "REFUSED", "DROPPED",
                       "BYTES");
            char name[25];
            snprintf(name, sizeof name, "%s", t->name);
            for (char *c = name; *c; c++)
                if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?'; /* no control characters */
            printf("%-24s %5zu %5llu %12llu %12llu %10llu %10llu %10llu %12llu %12llu\n", name, i,
                   (unsigned long long)t->dim, (unsigned long long)t->rows,
                   (unsigned long long)t->admitted, (unsigned long long)t->evicted,
                   (unsigned long long)t->expired, (unsigned long long)t->refused,
                   (unsigned long long)t->dropped, (unsigned long long)t->bytes);
        }
    }
}

static void print_table(const ps_cluster *cl, const shard_req *reqs, double timeout_s) {
    size_t n = cl->n_ps;
    status_row *rows = calloc(n + 1, sizeof *rows);
    if (!rows) {
        fprintf(stderr, "psctl status: out of memory\n");
        return;
    }
    size_t width[N_COLS];
    for (size_t j = 0; j < N_COLS; j++) {
        snprintf(rows[0][j], CELL, "%s", col_names[j]);
        width[j] = strlen(col_names[j]);
    }
    for (size_t i = 0; i < n; i++) {
        fill_row(rows[i + 1], i, cl->ps[i], &reqs[i]);
        for (size_t j = 0; j < N_COLS; j++)
            if (strlen(rows[i + 1][j]) > width[j]) width[j] = strlen(rows[i + 1][j]);
    }
    for (size_t i = 0; i <= n; i++) {
        if (i == 0 || reqs[i - 1].state == DONE_OK) {
            print_cells(rows[i], width, N_COLS);
        } else {
            char why[CELL + 64];
            failure_text(&reqs[i - 1], timeout_s, why, sizeof why);
            print_cells(rows[i], width, COL_ADDRESS + 1);
            printf("  %s", why);
        }
        putchar('\n');
    }
    free(rows);
    print_tables(cl, reqs);
}

/* Adds a string as valid UTF-8 (bad bytes become U+FFFD): cJSON escapes quotes,
 * backslashes and control characters but copies other bytes as they are, so text
 * that is not UTF-8 would make the whole output invalid JSON. */
static void add_text(cJSON *o, const char *key, const char *s) {
    char buf[3 * 1024];
    cJSON_AddStringToObject(o, key, ps_utf8_sanitize(s ? s : "", buf, sizeof buf));
}

static void add_u64(cJSON *o, const char *key, uint64_t v) {
    cJSON_AddNumberToObject(o, key, (double)v); /* exact below 2^53 */
}

/* One shard's JSON object: shard, address, ok, then every StatsReply field or "error". */
static cJSON *shard_json(size_t i, const char *addr, const shard_req *s, double timeout_s) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    add_u64(o, "shard", i);
    add_text(o, "address", addr);
    if (s->state != DONE_OK) {
        char why[sizeof s->line + 64];
        failure_text(s, timeout_s, why, sizeof why);
        cJSON_AddFalseToObject(o, "ok");
        add_text(o, "error", why);
        return o;
    }
    const ps_stats *r = &s->stats;
    char buf[32];
    cJSON_AddTrueToObject(o, "ok");
    add_text(o, "mode", mode_name(r, buf, sizeof buf));
    add_u64(o, "version", r->version);
    add_u64(o, "shard_index", r->shard_index);
    add_u64(o, "num_workers", r->num_workers);
    add_u64(o, "live_workers", r->live_workers);
    cJSON *live = cJSON_AddArrayToObject(o, "live_set");
    for (size_t k = 0; live && k < r->n_live_set; k++)
        cJSON_AddItemToArray(live, cJSON_CreateNumber(r->live_set[k]));
    add_u64(o, "workers_min", r->workers_min);
    cJSON_AddNumberToObject(o, "uptime_seconds", r->uptime_seconds);
    add_u64(o, "requests", r->requests);
    add_u64(o, "errors", r->errors);
    add_u64(o, "pushes_applied", r->pushes_applied);
    add_u64(o, "updates_applied", r->updates_applied);
    add_u64(o, "stale_pushes", r->stale_pushes);
    add_u64(o, "dropped_pushes", r->dropped_pushes);
    add_u64(o, "pending_pulls", r->pending_pulls);
    add_u64(o, "bytes_in", r->bytes_in);
    add_u64(o, "bytes_out", r->bytes_out);
    add_u64(o, "workers_removed", r->workers_removed);
    add_u64(o, "max_staleness", r->max_staleness);
    add_u64(o, "staleness_waits", r->staleness_waits);
    add_u64(o, "auth_denied", r->auth_denied);
    add_u64(o, "pending_pull_bytes", r->pending_pull_bytes);
    add_u64(o, "pending_pulls_refused", r->pending_pulls_refused);
    add_u64(o, "pending_pulls_timed_out", r->pending_pulls_timed_out);
    add_u64(o, "pending_pulls_released", r->pending_pulls_released);
    add_u64(o, "dropped_replies", r->dropped_replies);
    add_u64(o, "loop_turns_cut", r->loop_turns_cut);
    add_u64(o, "checkpoints", r->checkpoints);
    add_u64(o, "checkpoint_failures", r->checkpoint_failures);
    add_u64(o, "push_bytes", r->push_bytes);
    cJSON_AddStringToObject(o, "job_id", r->job_id ? r->job_id : "");
    if (r->checkpoint_age_seconds < 0) {
        cJSON_AddNullToObject(o, "checkpoint_version");
        cJSON_AddNullToObject(o, "checkpoint_age_seconds");
    } else {
        add_u64(o, "checkpoint_version", r->checkpoint_version);
        cJSON_AddNumberToObject(o, "checkpoint_age_seconds", r->checkpoint_age_seconds);
    }
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)r->incarnation); /* 64 random bits */
    add_text(o, "incarnation", buf);
    cJSON *vars = cJSON_AddArrayToObject(o, "vars");
    for (size_t k = 0; vars && k < r->n_vars; k++) {
        cJSON *v = cJSON_CreateObject();
        if (!v) break;
        add_text(v, "name", r->vars[k].name);
        add_u64(v, "numel", r->vars[k].numel);
        add_text(v, "optimizer", r->vars[k].optimizer);
        cJSON_AddItemToArray(vars, v);
    }
    cJSON *tables = cJSON_AddArrayToObject(o, "tables");
    for (size_t k = 0; tables && k < r->n_tables; k++) {
        const ps_table_stats *t = &r->tables[k];
        cJSON *v = cJSON_CreateObject();
        if (!v) break;
        add_text(v, "name", t->name);
        add_u64(v, "dim", t->dim);
        add_u64(v, "num_rows", t->num_rows);
        add_text(v, "optimizer", t->optimizer);
        add_u64(v, "rows", t->rows);
        add_u64(v, "admitted", t->admitted);
        add_u64(v, "evicted", t->evicted);
        add_u64(v, "expired", t->expired);
        add_u64(v, "refused", t->refused);
        add_u64(v, "dropped", t->dropped);
        add_u64(v, "bytes", t->bytes);
        add_u64(v, "max_rows", t->max_rows);
        cJSON_AddItemToArray(tables, v);
    }
    return o;
}

/* The JSON array on stdout. Returns 0, or -1 when out of memory (after a message). */
static int print_json(const ps_cluster *cl, const shard_req *reqs, double timeout_s) {
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; arr && i < cl->n_ps; i++) {
        cJSON *o = shard_json(i, cl->ps[i], &reqs[i], timeout_s);
        if (!o) {
            cJSON_Delete(arr);
            arr = NULL;
        } else {
            cJSON_AddItemToArray(arr, o);
        }
    }
    char *text = arr ? cJSON_Print(arr) : NULL;
    cJSON_Delete(arr);
    if (!text) {
        fprintf(stderr, "psctl status: out of memory\n");
        return -1;
    }
    printf("%s\n", text);
    cJSON_free(text);
    return 0;
}

/* status: the table or JSON on stdout; failures also summed up on stderr, and a shard
 * that calls itself another index than its place in the list is pointed out. Returns
 * the exit code. */
static int report_status(const ps_cluster *cl, const shard_req *reqs, double timeout_s, int json) {
    int rc = 0;
    if (json)
        rc = print_json(cl, reqs, timeout_s);
    else
        print_table(cl, reqs, timeout_s);
    fflush(stdout);
    for (size_t i = 0; i < cl->n_ps; i++)
        if (reqs[i].state == DONE_OK && reqs[i].stats.shard_index != i)
            fprintf(stderr,
                    "psctl status: ps %zu %s says it is shard %u: the list is not in "
                    "shard order\n",
                    i, cl->ps[i], (unsigned)reqs[i].stats.shard_index);
    int failed = report_failed(&status_cmd, reqs, cl->n_ps);
    return rc || failed ? 1 : 0;
}

static int admin_main(const admin_cmd *cmd, int argc, char **argv) {
    admin_opts o;
    int r = parse(cmd, argc, argv, &o);
    if (r == 1) return 0;
    if (r != 0) return 2;
    ps_cluster cl = {0};
    r = load_shards(cmd, &o, &cl);
    if (r == 0) {
        int bad_usage = 0;
        shard_req *reqs = exchange(cmd, &cl, &o, &bad_usage);
        if (!reqs)
            r = bad_usage ? bad_usage : 1;
        else if (cmd->describe)
            r = report_lines(cmd, &cl, reqs, o.timeout_s);
        else
            r = report_status(&cl, reqs, o.timeout_s, o.json);
        if (reqs) free_results(reqs, cl.n_ps);
    }
    ps_cluster_free(&cl);
    return r;
}

int psctl_checkpoint_main(int argc, char **argv) {
    return admin_main(&checkpoint_cmd, argc, argv);
}

int psctl_shutdown_main(int argc, char **argv) {
    return admin_main(&shutdown_cmd, argc, argv);
}

int psctl_status_main(int argc, char **argv) {
    return admin_main(&status_cmd, argc, argv);
}
