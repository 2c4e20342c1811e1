/* psctl checkpoint / shutdown / status: sends one request to every psd shard over a ZeroMQ
 * DEALER, waits for the answers under one deadline and reports each shard (status: as a
 * table or JSON). */
#include "admin.h"

#include "curve_keys.h"
#include "ps_error.h"
#include "tfconfig.h"
#include "utf8.h"
#include "wire.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#define DEFAULT_TIMEOUT_S 10.0
#define MAX_TIMEOUT_S 86400.0

/* One admin command: the request it sends and how it reports the expected reply. */
typedef struct {
    const char *name;
    const char *what; /* for --help: "write a checkpoint now" */
    Ps__Header__BodyCase reply;
    void (*fill)(Ps__Header *h);
    /* The line printed for a shard that answered (NULL: the command prints its own report). */
    void (*describe)(const Ps__Header *h, char *buf, size_t n);
    int json; /* accepts --json */
} admin_cmd;

/* ---- the commands ---------------------------------------------------------------- */

static Ps__Checkpoint checkpoint_body = PS__CHECKPOINT__INIT;
static Ps__Shutdown shutdown_body = PS__SHUTDOWN__INIT;
static Ps__Stats stats_body = PS__STATS__INIT;

static void fill_checkpoint(Ps__Header *h) {
    h->body_case = PS__HEADER__BODY_CHECKPOINT;
    h->checkpoint = &checkpoint_body;
}

static void fill_shutdown(Ps__Header *h) {
    h->body_case = PS__HEADER__BODY_SHUTDOWN;
    h->shutdown = &shutdown_body;
}

static void fill_stats(Ps__Header *h) {
    h->body_case = PS__HEADER__BODY_STATS;
    h->stats = &stats_body;
}

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

static void describe_checkpoint(const Ps__Header *h, char *buf, size_t n) {
    const Ps__CheckpointReply *r = h->checkpoint_reply;
    char size[32];
    format_bytes(size, sizeof size, r->bytes);
    snprintf(buf, n, "checkpoint version %llu \xe2\x86\x92 %s (%s)", (unsigned long long)r->version,
             r->path && *r->path ? r->path : "?", size);
}

static void describe_shutdown(const Ps__Header *h, char *buf, size_t n) {
    (void)h;
    snprintf(buf, n, "shutting down");
}

static const admin_cmd checkpoint_cmd = {"checkpoint",
                                         "write a checkpoint now (psd needs "
                                         "--checkpoint-dir)",
                                         PS__HEADER__BODY_CHECKPOINT_REPLY,
                                         fill_checkpoint,
                                         describe_checkpoint,
                                         0};
static const admin_cmd shutdown_cmd = {"shutdown",
                                       "stop gracefully (psd answers, then exits 0)",
                                       PS__HEADER__BODY_SHUTDOWN_REPLY,
                                       fill_shutdown,
                                       describe_shutdown,
                                       0};
static const admin_cmd status_cmd = {
    "status", "report its stats", PS__HEADER__BODY_STATS_REPLY, fill_stats, NULL, 1};

/* ---- options --------------------------------------------------------------------- */

typedef struct {
    const char *ps;   /* --ps host:port|ipc://PATH,... or NULL: TF_CONFIG */
    double timeout_s; /* --timeout */
    int json;         /* --json (status) */
    /* --curve-secret, --server-key: CurveZMQ key files, or NULL: plaintext */
    const char *curve_secret, *server_key;
} admin_opts;

static void usage(const admin_cmd *cmd, FILE *f) {
    if (cmd->json)
        fprintf(f,
                "usage: psctl %s [--ps HOST:PORT|ipc://PATH,...] [--json] [--timeout SECONDS]\n"
                "       [--curve-secret FILE --server-key FILE]\n"
                "Asks every psd shard (all at once) to %s. Prints a table, one row per shard:\n"
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
    fprintf(f, "options:\n"
               "  --ps HOST:PORT,...     the shards, in shard order (default: TF_CONFIG's "
               "cluster.ps);\n"
               "                         ipc://PATH for a shard on this machine's Unix socket\n");
    if (cmd->json)
        fprintf(f,
                "  --json                 print a JSON array instead: per shard \"shard\",\n"
                "                         \"address\", \"ok\" and every StatsReply field "
                "(counters\n"
                "                         as numbers, \"incarnation\" as a decimal string,\n"
                "                         checkpoint fields null when there is none, \"vars\"),\n"
                "                         or \"ok\": false and \"error\"\n");
    fprintf(f,
            "  --timeout SECONDS      wait this long for each shard's answer (default %g)\n"
            "  --curve-secret FILE    CurveZMQ: talk to shards run with --curve-secret, with\n"
            "                         this key pair (psctl keygen; its .pub must be in the\n"
            "                         shards' --authorized-keys)\n"
            "  --server-key FILE      CurveZMQ: the shards' public key (their .pub file)\n"
            "  -h, --help             show this help\n\n"
            "Exit status: 0 every shard %s, 1 a shard failed, answered an error or\n"
            "did not answer in time, 2 bad usage.\n",
            DEFAULT_TIMEOUT_S, cmd->json ? "answered" : "succeeded");
}

/* Returns 0 with o filled in, 1 after --help, 2 after a message to stderr. */
static int parse(const admin_cmd *cmd, int argc, char **argv, admin_opts *o) {
    static const struct option longopts[] = {{"ps", required_argument, NULL, 'p'},
                                             {"timeout", required_argument, NULL, 't'},
                                             {"help", no_argument, NULL, 'h'},
                                             {"json", no_argument, NULL, 'j'},
                                             {"curve-secret", required_argument, NULL, 'c'},
                                             {"server-key", required_argument, NULL, 's'},
                                             {0, 0, 0, 0}};
    o->ps = NULL;
    o->timeout_s = DEFAULT_TIMEOUT_S;
    o->json = 0;
    o->curve_secret = o->server_key = NULL;
    opterr = 0;
    optind = 0;
    int c;
    while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            usage(cmd, stdout);
            return 1;
        case 'p':
            o->ps = optarg;
            break;
        case 'c':
            o->curve_secret = optarg;
            break;
        case 's':
            o->server_key = optarg;
            break;
        case 'j':
            if (!cmd->json) {
                fprintf(stderr, "psctl %s: unknown option '%s'\n", cmd->name, argv[optind - 1]);
                goto usage_hint;
            }
            o->json = 1;
            break;
        case 't': {
            char *end;
            errno = 0;
            double v = strtod(optarg, &end);
            if (end == optarg || *end || errno || !isfinite(v) || v <= 0 || v > MAX_TIMEOUT_S) {
                fprintf(stderr, "psctl %s: --timeout needs seconds > 0 (at most %g), got '%s'\n",
                        cmd->name, MAX_TIMEOUT_S, optarg);
                return 2;
            }
            o->timeout_s = v;
            break;
        }
        case ':':
            fprintf(stderr, "psctl %s: option '%s' needs a value\n", cmd->name, argv[optind - 1]);
            goto usage_hint;
        default:
            fprintf(stderr, "psctl %s: unknown option '%s'\n", cmd->name, argv[optind - 1]);
            goto usage_hint;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "psctl %s: unexpected argument '%s'\n", cmd->name, argv[optind]);
        goto usage_hint;
    }
    if (!o->curve_secret != !o->server_key) {
        fprintf(stderr, "psctl %s: --curve-secret and --server-key go together\n", cmd->name);
        goto usage_hint;
    }
    return 0;
usage_hint:
    fprintf(stderr, "Try 'psctl %s --help'.\n", cmd->name);
    return 2;
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
        int port;
        const char *ipc = ps_ipc_path(cl->ps[i]);
        if (ipc && ps_check_ipc_path(ipc, err, sizeof err) != PS_OK) {
            fprintf(stderr, "psctl %s: %s: ps %zu: %s\n", cmd->name, src, i, err);
            return 2;
        }
        if (!ipc && (ps_parse_hostport(cl->ps[i], NULL, 0, &port) != PS_OK || port == 0)) {
            fprintf(stderr, "psctl %s: %s: ps %zu '%s' is not HOST:PORT with a port 1..65535\n",
                    cmd->name, src, i, cl->ps[i]);
            return 2;
        }
    }
    return 0;
}

/* ---- requests -------------------------------------------------------------------- */

enum { WAITING = 0, DONE_OK = 1, DONE_FAILED = -1, TIMED_OUT = -2 };

typedef struct {
    void *sock;
    uint64_t request_id;
    int state;
    Ps__Header *reply; /* DONE_OK: the decoded reply, owned */
    char line[768];    /* DONE_FAILED, or DONE_OK with a describe(): what to say about it */
} shard_req;

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void set_result(shard_req *s, int state, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_result(shard_req *s, int state, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->line, sizeof s->line, fmt, ap);
    va_end(ap);
    s->state = state;
}

/* Opens a DEALER to addr (a CURVE client when curve is non-NULL) and sends the request;
 * a failure is recorded in s. */
static void send_request(const admin_cmd *cmd, void *zctx, const char *addr,
                         const ps_curve_client *curve, shard_req *s) {
    s->sock = zmq_socket(zctx, ZMQ_DEALER);
    if (!s->sock) {
        set_result(s, DONE_FAILED, "cannot make a socket: %s", zmq_strerror(zmq_errno()));
        return;
    }
    int linger = 0, ipv6 = 1;
    zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s->sock, ZMQ_IPV6, &ipv6, sizeof ipv6);
    if (curve && ps_curve_client_apply(s->sock, curve) != PS_OK) {
        set_result(s, DONE_FAILED, "cannot set the CurveZMQ keys: %s", zmq_strerror(zmq_errno()));
        return;
    }
    char endpoint[300];
    snprintf(endpoint, sizeof endpoint, "%s%s", ps_ipc_path(addr) ? "" : "tcp://", addr);
    if (zmq_connect(s->sock, endpoint) != 0) {
        set_result(s, DONE_FAILED, "cannot connect: %s", zmq_strerror(zmq_errno()));
        return;
    }
    Ps__Header h = PS__HEADER__INIT;
    h.protocol_version = PS_PROTOCOL_VERSION;
    h.request_id = s->request_id;
    cmd->fill(&h);
    /* The DEALER queues the message until the connection is up. */
    if (ps_wire_send(s->sock, NULL, 0, &h, NULL, 0, ZMQ_DONTWAIT) != PS_OK)
        set_result(s, DONE_FAILED, "cannot send the %s request: %s", cmd->name,
                   zmq_strerror(zmq_errno()));
}

/* Reads one message from s's socket and records the outcome (keeping the reply) unless
 * it answers an older request (then it is dropped). */
static void take_reply(const admin_cmd *cmd, shard_req *s) {
    ps_frames f;
    if (ps_frames_recv(s->sock, ZMQ_DONTWAIT, &f) != PS_OK) return;
    Ps__Header *h = NULL;
    char err[256] = "";
    int rc = f.n >= 1 ? ps_header_decode(zmq_msg_data(&f.frames[0]), zmq_msg_size(&f.frames[0]), &h,
                                         err, sizeof err)
                      : PS_EPROTO;
    if (h && h->request_id != s->request_id) {
        /* not ours: keep waiting */
    } else if (rc != PS_OK) {
        set_result(s, DONE_FAILED, "bad reply (%s): %s", ps_errname(rc), err);
    } else if (h->body_case == PS__HEADER__BODY_ERROR) {
        set_result(s, DONE_FAILED, "%s failed: %s: %s", cmd->name,
                   h->error->code_name && *h->error->code_name ? h->error->code_name : "ERROR",
                   h->error->message ? h->error->message : "");
    } else if (h->body_case != cmd->reply) {
        set_result(s, DONE_FAILED, "unexpected reply to %s (body %d)", cmd->name,
                   (int)h->body_case);
    } else {
        if (cmd->describe) cmd->describe(h, s->line, sizeof s->line);
        s->state = DONE_OK;
        s->reply = h;
        h = NULL;
    }
    if (h) ps__header__free_unpacked(h, NULL);
    ps_frames_close(&f);
}

/* Sends cmd to every shard at once and waits for all answers until timeout_s. Returns
 * the n_ps outcomes in shard order (none WAITING; the caller frees them with
 * free_results), or NULL after a message when out of memory. */
static shard_req *exchange(const admin_cmd *cmd, const ps_cluster *cl, double timeout_s,
                           const ps_curve_client *curve) {
    size_t n = cl->n_ps;
    shard_req *reqs = calloc(n, sizeof *reqs);
    zmq_pollitem_t *items = calloc(n, sizeof *items);
    void *zctx = zmq_ctx_new();
    if (!reqs || !items || !zctx) {
        fprintf(stderr, "psctl %s: out of memory\n", cmd->name);
        free(reqs);
        free(items);
        if (zctx) zmq_ctx_term(zctx);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        reqs[i].request_id = i + 1;
        send_request(cmd, zctx, cl->ps[i], curve, &reqs[i]);
    }
    uint64_t deadline = now_ms() + (uint64_t)(timeout_s * 1000.0 + 0.5);
    for (;;) {
        size_t waiting = 0;
        for (size_t i = 0; i < n; i++) {
            int w = reqs[i].state == WAITING;
            items[i] = (zmq_pollitem_t){reqs[i].sock, -1, w ? ZMQ_POLLIN : 0, 0};
            waiting += (size_t)w;
        }
        uint64_t now = now_ms();
        if (waiting == 0 || now >= deadline) break;
        int ready = zmq_poll(items, (int)n, (long)(deadline - now));
        if (ready < 0) {
            if (zmq_errno() == EINTR) continue;
            fprintf(stderr, "psctl %s: poll failed: %s\n", cmd->name, zmq_strerror(zmq_errno()));
            break;
        }
        for (size_t i = 0; i < n; i++)
            if (items[i].revents & ZMQ_POLLIN) take_reply(cmd, &reqs[i]);
    }
    for (size_t i = 0; i < n; i++) {
        if (reqs[i].state == WAITING) reqs[i].state = TIMED_OUT;
        if (reqs[i].sock) zmq_close(reqs[i].sock);
        reqs[i].sock = NULL;
    }
    zmq_ctx_term(zctx);
    free(items);
    return reqs;
}

static void free_results(shard_req *reqs, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (reqs[i].reply) ps__header__free_unpacked(reqs[i].reply, NULL);
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

static const char *mode_name(const Ps__StatsReply *r, char *buf, size_t n) {
    if (r->mode == PS__MODE__MODE_SYNC) return "sync";
    if (r->mode == PS__MODE__MODE_ASYNC) return "async";
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
    const Ps__StatsReply *r = s->reply->stats_reply;
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
    const Ps__StatsReply *r = s->reply->stats_reply;
    char buf[32];
    cJSON_AddTrueToObject(o, "ok");
    add_text(o, "mode", mode_name(r, buf, sizeof buf));
    add_u64(o, "version", r->version);
    add_u64(o, "shard_index", r->shard_index);
    add_u64(o, "num_workers", r->num_workers);
    add_u64(o, "live_workers", r->live_workers);
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
        add_text(v, "name", r->vars[k]->name);
        add_u64(v, "numel", r->vars[k]->numel);
        add_text(v, "optimizer", r->vars[k]->optimizer);
        cJSON_AddItemToArray(vars, v);
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
        if (reqs[i].state == DONE_OK && reqs[i].reply->stats_reply->shard_index != i)
            fprintf(stderr,
                    "psctl status: ps %zu %s says it is shard %u: the list is not in "
                    "shard order\n",
                    i, cl->ps[i], (unsigned)reqs[i].reply->stats_reply->shard_index);
    int failed = report_failed(&status_cmd, reqs, cl->n_ps);
    return rc || failed ? 1 : 0;
}

static int admin_main(const admin_cmd *cmd, int argc, char **argv) {
    admin_opts o;
    int r = parse(cmd, argc, argv, &o);
    if (r == 1) return 0;
    if (r != 0) return 2;
    ps_curve_client curve;
    if (o.curve_secret) {
        char err[1200];
        if (ps_curve_client_load(&curve, o.curve_secret, o.server_key, err, sizeof err) != PS_OK) {
            fprintf(stderr, "psctl %s: %s\n", cmd->name, err);
            return 2;
        }
    }
    ps_cluster cl = {0};
    r = load_shards(cmd, &o, &cl);
    if (r == 0) {
        shard_req *reqs = exchange(cmd, &cl, o.timeout_s, o.curve_secret ? &curve : NULL);
        if (!reqs)
            r = 1;
        else if (cmd->describe)
            r = report_lines(cmd, &cl, reqs, o.timeout_s);
        else
            r = report_status(&cl, reqs, o.timeout_s, o.json);
        if (reqs) free_results(reqs, cl.n_ps);
    }
    ps_cluster_free(&cl);
    if (o.curve_secret) ps_curve_wipe(&curve, sizeof curve);
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
