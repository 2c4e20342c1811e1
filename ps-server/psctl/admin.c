/* psctl checkpoint / psctl shutdown: sends one request to every psd shard over a ZeroMQ
 * DEALER, waits for the answers under one deadline and reports each shard. */
#include "admin.h"

#include "ps_error.h"
#include "tfconfig.h"
#include "wire.h"

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
    void (*describe)(const Ps__Header *h, char *buf, size_t n);
} admin_cmd;

/* ---- the two commands ------------------------------------------------------------ */

static Ps__Checkpoint checkpoint_body = PS__CHECKPOINT__INIT;
static Ps__Shutdown shutdown_body = PS__SHUTDOWN__INIT;

static void fill_checkpoint(Ps__Header *h) {
    h->body_case = PS__HEADER__BODY_CHECKPOINT;
    h->checkpoint = &checkpoint_body;
}

static void fill_shutdown(Ps__Header *h) {
    h->body_case = PS__HEADER__BODY_SHUTDOWN;
    h->shutdown = &shutdown_body;
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
                                         PS__HEADER__BODY_CHECKPOINT_REPLY, fill_checkpoint,
                                         describe_checkpoint};
static const admin_cmd shutdown_cmd = {"shutdown", "stop gracefully (psd answers, then exits 0)",
                                       PS__HEADER__BODY_SHUTDOWN_REPLY, fill_shutdown,
                                       describe_shutdown};

/* ---- options --------------------------------------------------------------------- */

typedef struct {
    const char *ps;   /* --ps host:port,... or NULL: TF_CONFIG */
    double timeout_s; /* --timeout */
} admin_opts;

static void usage(const admin_cmd *cmd, FILE *f) {
    fprintf(f,
            "usage: psctl %s [--ps HOST:PORT,...] [--timeout SECONDS]\n"
            "Asks every psd shard to %s.\nPrints one line per shard.\n\n"
            "options:\n"
            "  --ps HOST:PORT,...     the shards, in shard order (default: TF_CONFIG's "
            "cluster.ps)\n"
            "  --timeout SECONDS      wait this long for each shard's answer (default %g)\n"
            "  -h, --help             show this help\n\n"
            "Exit status: 0 every shard succeeded, 1 a shard failed, answered an error or\n"
            "did not answer in time, 2 bad usage.\n",
            cmd->name, cmd->what, DEFAULT_TIMEOUT_S);
}

/* Returns 0 with o filled in, 1 after --help, 2 after a message to stderr. */
static int parse(const admin_cmd *cmd, int argc, char **argv, admin_opts *o) {
    static const struct option longopts[] = {{"ps", required_argument, NULL, 'p'},
                                             {"timeout", required_argument, NULL, 't'},
                                             {"help", no_argument, NULL, 'h'},
                                             {0, 0, 0, 0}};
    o->ps = NULL;
    o->timeout_s = DEFAULT_TIMEOUT_S;
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
    return 0;
usage_hint:
    fprintf(stderr, "Try 'psctl %s --help'.\n", cmd->name);
    return 2;
}

/* The shards from --ps, else from $TF_CONFIG's cluster.ps, each a usable host:port.
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
        if (ps_parse_hostport(cl->ps[i], NULL, 0, &port) != PS_OK || port == 0) {
            fprintf(stderr, "psctl %s: %s: ps %zu '%s' is not HOST:PORT with a port 1..65535\n",
                    cmd->name, src, i, cl->ps[i]);
            return 2;
        }
    }
    return 0;
}

/* ---- requests -------------------------------------------------------------------- */

enum { WAITING = 0, DONE_OK = 1, DONE_FAILED = -1 };

typedef struct {
    void *sock;
    uint64_t request_id;
    int state;
    char line[768]; /* what to print about this shard */
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

/* Opens a DEALER to addr and sends the request; a failure is recorded in s. */
static void send_request(const admin_cmd *cmd, void *zctx, const char *addr, shard_req *s) {
    s->sock = zmq_socket(zctx, ZMQ_DEALER);
    if (!s->sock) {
        set_result(s, DONE_FAILED, "cannot make a socket: %s", zmq_strerror(zmq_errno()));
        return;
    }
    int linger = 0, ipv6 = 1;
    zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s->sock, ZMQ_IPV6, &ipv6, sizeof ipv6);
    char endpoint[300];
    snprintf(endpoint, sizeof endpoint, "tcp://%s", addr);
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

/* Reads one message from s's socket and records the outcome unless it answers an
 * older request (then it is dropped). */
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
        cmd->describe(h, s->line, sizeof s->line);
        s->state = DONE_OK;
    }
    if (h) ps__header__free_unpacked(h, NULL);
    ps_frames_close(&f);
}

/* Sends cmd to every shard and waits for all answers until timeout_s. Prints one line
 * per shard in shard order (stdout for successes, stderr for failures). Returns the
 * exit code: 0 all succeeded, 1 otherwise. */
static int run_requests(const admin_cmd *cmd, const ps_cluster *cl, double timeout_s) {
    size_t n = cl->n_ps;
    shard_req *reqs = calloc(n, sizeof *reqs);
    zmq_pollitem_t *items = calloc(n, sizeof *items);
    void *zctx = zmq_ctx_new();
    if (!reqs || !items || !zctx) {
        fprintf(stderr, "psctl %s: out of memory\n", cmd->name);
        free(reqs);
        free(items);
        if (zctx) zmq_ctx_term(zctx);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        reqs[i].request_id = i + 1;
        send_request(cmd, zctx, cl->ps[i], &reqs[i]);
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
    size_t failed = 0;
    for (size_t i = 0; i < n; i++) {
        shard_req *s = &reqs[i];
        if (s->state == WAITING) set_result(s, DONE_FAILED, "no answer within %g s", timeout_s);
        failed += s->state != DONE_OK;
        fprintf(s->state == DONE_OK ? stdout : stderr, "ps %zu %s: %s\n", i, cl->ps[i], s->line);
        if (s->sock) zmq_close(s->sock);
    }
    if (failed)
        fprintf(stderr, "psctl %s: %zu of %zu shard%s failed\n", cmd->name, failed, n,
                n == 1 ? "" : "s");
    zmq_ctx_term(zctx);
    free(items);
    free(reqs);
    return failed ? 1 : 0;
}

static int admin_main(const admin_cmd *cmd, int argc, char **argv) {
    admin_opts o;
    int r = parse(cmd, argc, argv, &o);
    if (r == 1) return 0;
    if (r != 0) return 2;
    ps_cluster cl = {0};
    r = load_shards(cmd, &o, &cl);
    if (r == 0) r = run_requests(cmd, &cl, o.timeout_s);
    ps_cluster_free(&cl);
    return r;
}

int psctl_checkpoint_main(int argc, char **argv) {
    return admin_main(&checkpoint_cmd, argc, argv);
}

int psctl_shutdown_main(int argc, char **argv) {
    return admin_main(&shutdown_cmd, argc, argv);
}
