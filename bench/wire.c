/* bench/wire: throughput and latency of psd's data path (the real client library
 * against real psd processes over TCP on 127.0.0.1 and over ipc, Unix sockets in a
 * temp dir: --transport) beside baselines measured in the same run:
 *
 * - psd push, pull, and push-then-pull (one training step's exchange) through
 *   client/ps.h (libps), psd in async mode (each push applied on arrival; a pull
 *   answered at once from a snapshot copy), 1 worker, 1 and 2 shards (the tensor
 *   split in two row halves, one per shard; the "mlp step" row uses the default
 *   MLP's four variables placed as the worker places them);
 * - raw ZeroMQ: a DEALER/ROUTER echo in forked child processes (one per shard),
 *   no protocol: the payload out and a 1-byte reply (vs push), a 9-byte request
 *   and the payload back (vs pull), the payload out and back (vs push-then-pull).
 *   Payloads are sent zero-copy (zmq_msg_init_data) and received as zmq_msg_t
 *   (never copied into a user buffer);
 * - memcpy of the same bytes;
 * - plaintext and CurveZMQ (psd --curve-secret/--authorized-keys with keys from
 *   psctl keygen; raw: zmq_curve_keypair).
 *
 * Each measurement: a warm-up, a calibration so that one rep lasts >= --min-ms,
 * then --reps reps; the contestants of a row group are interleaved rep by rep,
 * and the ratio is the median over reps of the paired ratio t(raw) / t(psd).
 * Built by meson, never run by the tests. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "benchutil.h"
#include "optim_spec.h"
#include "placement.h"
#include "ps.h"
#include "ps_error.h"

#ifndef PS_BENCH_PSD
#define PS_BENCH_PSD "psd"
#endif
#ifndef PS_BENCH_PSCTL
#define PS_BENCH_PSCTL "psctl"
#endif

#define MAX_SIZES 32
#define MAX_REPS 101
#define MAX_SHARDS 2
#define MLP_FLOATS 101770u /* 784*128 + 128 + 128*10 + 10 */
#define GOAL_RATIO 0.90
#define GOAL_MLP_MS 0.4

/* ---- options ----------------------------------------------------------- */

typedef struct {
    size_t bytes; /* 0: the mlp step */
} size_spec;

typedef struct {
    int reps;
    double min_s;
    size_spec sizes[MAX_SIZES];
    int nsizes;
    bool plain, curve;
    bool tcp, ipc; /* --transport */
    int only;      /* --only: one psd contestant (and its raw baseline), -1: all */
    const char *psd, *psctl;
} opts;

static void usage(FILE *f, const char *argv0) {
    fprintf(f,
            "usage: %s [--sizes LIST] [--reps N] [--min-ms MS] [--enc plain|curve|both]\n"
            "          [--transport tcp|ipc|both] [--only C] [--psd PATH] [--psctl PATH]\n"
            "Throughput and latency of psd's data path (push, pull, push-then-pull through\n"
            "client/ps.h (libps) against psd processes it starts, 1 and 2 shards) beside a raw\n"
            "ZeroMQ DEALER/ROUTER echo and memcpy of the same bytes, plaintext and CurveZMQ.\n"
            "  --sizes LIST  comma-separated payload sizes, suffix K/M (KiB/MiB), or \"mlp\"\n"
            "                (the default MLP's 101,770 floats); default\n"
            "                4K,64K,1M,16M,64M,mlp\n"
            "  --reps N      timed reps per measurement, the median is reported (default 5)\n"
            "  --min-ms MS   least duration of one rep, the op is repeated inside (default 100)\n"
            "  --enc E       plain, curve or both (default both)\n"
            "  --transport T tcp (127.0.0.1), ipc (Unix sockets; psd --transport ipc) or both\n"
            "                (default both)\n"
            "  --only C      only psd contestant C (push, pull, push+pull or push-pull) and\n"
            "                its raw baseline, e.g. to profile one (default: all)\n"
            "  --psd PATH    psd binary (default $PSD, else the build's: %s)\n"
            "  --psctl PATH  psctl binary, for keygen (default $PSCTL, else %s)\n"
            "  --help        this text\n",
            argv0, PS_BENCH_PSD, PS_BENCH_PSCTL);
}

/* --only's names, in the order of the psd contestants (C_PUSH..C_PPC below). */
static int only_index(const char *name) {
    static const char *names[] = {"push", "pull", "push+pull", "push-pull"};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0) return i;
    return -1;
}

static bool parse_sizes(const char *list, opts *o) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    o->nsizes = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->nsizes == MAX_SIZES) return false;
        if (strcmp(t, "mlp") == 0) {
            o->sizes[o->nsizes++].bytes = 0;
            continue;
        }
        char *end;
        errno = 0;
        unsigned long long v = strtoull(t, &end, 10);
        if (errno || end == t) return false;
        if (*end == 'K' || *end == 'k') {
            v <<= 10;
            end++;
        } else if (*end == 'M' || *end == 'm') {
            v <<= 20;
            end++;
        }
        /* whole floats, two row halves of whole floats */
        if (*end || v < 8 || v % 8 || v > (1ull << 31)) return false;
        o->sizes[o->nsizes++].bytes = (size_t)v;
    }
    return o->nsizes > 0;
}

static int parse_opts(int argc, char **argv, opts *o) {
    *o = (opts){.reps = 5, .min_s = 0.100, .plain = true, .curve = true, .tcp = true, .ipc = true};
    o->psd = getenv("PSD") ? getenv("PSD") : PS_BENCH_PSD;
    o->psctl = getenv("PSCTL") ? getenv("PSCTL") : PS_BENCH_PSCTL;
    parse_sizes("4K,64K,1M,16M,64M,mlp", o);
    o->only = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long v;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout, argv[0]);
            exit(0);
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "%s: unknown option or missing value: %s\n", argv[0], a);
            return -1;
        }
        const char *val = argv[++i];
        if (strcmp(a, "--sizes") == 0 && parse_sizes(val, o)) {
        } else if (strcmp(a, "--reps") == 0 && ps_bench_parse_long(val, 1, MAX_REPS, &v)) {
            o->reps = (int)v;
        } else if (strcmp(a, "--min-ms") == 0 && ps_bench_parse_long(val, 1, 60000, &v)) {
            o->min_s = (double)v / 1000.0;
        } else if (strcmp(a, "--enc") == 0 &&
                   (!strcmp(val, "plain") || !strcmp(val, "curve") || !strcmp(val, "both"))) {
            o->plain = strcmp(val, "curve") != 0;
            o->curve = strcmp(val, "plain") != 0;
        } else if (strcmp(a, "--transport") == 0 &&
                   (!strcmp(val, "tcp") || !strcmp(val, "ipc") || !strcmp(val, "both"))) {
            o->tcp = strcmp(val, "ipc") != 0;
            o->ipc = strcmp(val, "tcp") != 0;
        } else if (strcmp(a, "--only") == 0 && only_index(val) >= 0) {
            o->only = only_index(val);
        } else if (strcmp(a, "--psd") == 0) {
            o->psd = val;
        } else if (strcmp(a, "--psctl") == 0) {
            o->psctl = val;
        } else {
            fprintf(stderr, "%s: bad option or value: %s %s\n", argv[0], a, val);
            return -1;
        }
    }
    return 0;
}

/* ---- helpers ----------------------------------------------------------- */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The median of v[0..n) without reordering v. */
static double median(const double *v, int n) {
    double s[MAX_REPS];
    memcpy(s, v, (size_t)n * sizeof *s);
    return ps_bench_median(s, n);
}

static void die(const char *what) {
    fprintf(stderr, "wire: %s\n", what);
    exit(1);
}

/* Runs argv to completion with stdout to /dev/null; returns its exit status. */
static int run(char *const argv[]) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) dup2(fd, 1);
        execv(argv[0], argv);
        _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) < 0) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- raw ZeroMQ echo server (a forked child) ---------------------------- */

/* Request frame: 1 command byte + 8-byte size. 'A': the next frame is a payload,
 * answer 1 byte; 'E': answer the next frame back (the same message, zero-copy);
 * 'G': answer `size` bytes from a buffer (zero-copy); 'Q': quit. */
typedef struct {
    char cmd;
    uint64_t size;
} __attribute__((packed)) raw_req;

/* Binds ipc://ipc_path, or tcp on 127.0.0.1 when ipc_path is NULL, and writes the port
 * (0 for ipc) to port_fd once bound. */
static void echo_server(int port_fd, size_t max_bytes, const char *secret_z85,
                        const char *ipc_path) {
    char *buf = calloc(1, max_bytes ? max_bytes : 1);
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_ROUTER);
    int one = 1, zero = 0;
    int64_t maxmsg = -1;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    if (secret_z85) {
        zmq_setsockopt(s, ZMQ_CURVE_SERVER, &one, sizeof one);
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, secret_z85, 40);
    }
    char ep[256];
    if (ipc_path)
        snprintf(ep, sizeof ep, "ipc://%s", ipc_path);
    else
        snprintf(ep, sizeof ep, "tcp://127.0.0.1:*");
    if (!buf || zmq_bind(s, ep) != 0) _exit(2);
    size_t eplen = sizeof ep;
    zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, ep, &eplen);
    const char *colon = strrchr(ep, ':');
    int port = ipc_path ? 0 : atoi(colon + 1);
    if (write(port_fd, &port, sizeof port) != (ssize_t)sizeof port) _exit(2);
    close(port_fd);
    for (;;) {
        zmq_msg_t id, req, pay;
        zmq_msg_init(&id);
        zmq_msg_init(&req);
        if (zmq_msg_recv(&id, s, 0) < 0 || zmq_msg_recv(&req, s, 0) < 0) break;
        raw_req r = {0};
        memcpy(&r, zmq_msg_data(&req),
               zmq_msg_size(&req) < sizeof r ? zmq_msg_size(&req) : sizeof r);
        zmq_msg_close(&req);
        if (r.cmd == 'Q') break;
        zmq_msg_send(&id, s, ZMQ_SNDMORE);
        if (r.cmd == 'E') { /* every payload frame back, zero-copy */
            int more = 1;
            while (more) {
                zmq_msg_init(&pay);
                if (zmq_msg_recv(&pay, s, 0) < 0) break;
                more = zmq_msg_more(&pay);
                zmq_msg_send(&pay, s, more ? ZMQ_SNDMORE : 0);
            }
        } else if (r.cmd == 'A') {
            zmq_msg_init(&pay);
            zmq_msg_recv(&pay, s, 0);
            zmq_msg_close(&pay);
            zmq_send(s, "k", 1, 0);
        } else { /* 'G' */
            zmq_msg_init_data(&pay, buf, r.size <= max_bytes ? r.size : max_bytes, NULL, NULL);
            zmq_msg_send(&pay, s, 0);
        }
    }
    zmq_close(s);
    zmq_ctx_term(ctx);
    _exit(0);
}

typedef struct {
    pid_t pid;
    char ep[160]; /* shard address as the client takes it: "127.0.0.1:PORT" or "ipc://PATH" */
} child;

/* ZeroMQ endpoint of a child's address: "tcp://" prefixed unless it is ipc://. */
static void zmq_endpoint(const child *c, char *out, size_t len) {
    snprintf(out, len, "%s%s", strncmp(c->ep, "ipc://", 6) == 0 ? "" : "tcp://", c->ep);
}

static child start_echo(size_t max_bytes, const char *secret_z85, const char *ipc_path) {
    int p[2];
    if (pipe(p) != 0) die("pipe");
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        close(p[0]);
        echo_server(p[1], max_bytes, secret_z85, ipc_path);
    }
    close(p[1]);
    int port = 0;
    if (read(p[0], &port, sizeof port) != (ssize_t)sizeof port) die("echo server did not start");
    close(p[0]);
    child c = {.pid = pid};
    if (ipc_path)
        snprintf(c.ep, sizeof c.ep, "ipc://%s", ipc_path);
    else
        snprintf(c.ep, sizeof c.ep, "127.0.0.1:%d", port);
    return c;
}

static void stop_child(child *c) {
    if (c->pid > 0) {
        kill(c->pid, SIGTERM);
        waitpid(c->pid, NULL, 0);
    }
    c->pid = 0;
}

/* The raw client side: one DEALER per echo server. */
typedef struct {
    void *ctx;
    void *s[MAX_SHARDS];
    int n;
} raw_client;

static void raw_open(raw_client *rc, const child *srv, int n, const char *server_pub,
                     const char *pub, const char *sec) {
    rc->ctx = zmq_ctx_new();
    rc->n = n;
    for (int i = 0; i < n; i++) {
        rc->s[i] = zmq_socket(rc->ctx, ZMQ_DEALER);
        int zero = 0;
        zmq_setsockopt(rc->s[i], ZMQ_LINGER, &zero, sizeof zero);
        if (server_pub) {
            zmq_setsockopt(rc->s[i], ZMQ_CURVE_SERVERKEY, server_pub, 40);
            zmq_setsockopt(rc->s[i], ZMQ_CURVE_PUBLICKEY, pub, 40);
            zmq_setsockopt(rc->s[i], ZMQ_CURVE_SECRETKEY, sec, 40);
        }
        char ep[192];
        zmq_endpoint(&srv[i], ep, sizeof ep);
        if (zmq_connect(rc->s[i], ep) != 0) die("zmq_connect");
    }
}

static void raw_close(raw_client *rc) {
    for (int i = 0; i < rc->n; i++)
        zmq_close(rc->s[i]);
    zmq_ctx_term(rc->ctx);
}

/* One op to every server at once, each carrying its part of buf (part[i] bytes),
 * split into `frames` frames of equal size (the last takes the remainder). */
static void raw_op(raw_client *rc, char cmd, char *buf, const size_t *part, int frames) {
    size_t off = 0;
    for (int i = 0; i < rc->n; i++) {
        raw_req r = {cmd, part[i]};
        if (cmd == 'G') {
            zmq_send(rc->s[i], &r, sizeof r, 0);
        } else {
            zmq_send(rc->s[i], &r, sizeof r, ZMQ_SNDMORE);
            size_t each = part[i] / (size_t)frames, sent = 0;
            for (int k = 0; k < frames; k++) {
                size_t len = k == frames - 1 ? part[i] - sent : each;
                zmq_msg_t m;
                zmq_msg_init_data(&m, buf + off + sent, len, NULL, NULL);
                if (zmq_msg_send(&m, rc->s[i], k == frames - 1 ? 0 : ZMQ_SNDMORE) < 0)
                    die("zmq_msg_send");
                sent += len;
            }
        }
        off += part[i];
    }
    for (int i = 0; i < rc->n; i++) {
        int more = 1;
        while (more) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, rc->s[i], 0) < 0) die("zmq_msg_recv");
            more = zmq_msg_more(&m);
            zmq_msg_close(&m);
        }
    }
}

/* ---- psd ------------------------------------------------------------------ */

typedef struct {
    char dir[64]; /* temp dir: keys, ready files */
    char server_key[128], client_key[128], server_pub[128], auth_dir[128];
} keyset;

/* Starts psd shard `shard` on 127.0.0.1 (any free port), or with ipc on the Unix socket
 * DIR/psd.<shard>.sock; returns once its ready file names its address. */
static child start_psd(const opts *o, unsigned shard, unsigned nshards, const keyset *ks,
                       bool curve, bool ipc) {
    char ready[160], shard_s[16], n_s[16], sock[160];
    snprintf(ready, sizeof ready, "%s/ready.%u", ks->dir, shard);
    unlink(ready);
    snprintf(shard_s, sizeof shard_s, "%u", shard);
    snprintf(n_s, sizeof n_s, "%u", nshards);
    snprintf(sock, sizeof sock, "%s/psd.%u.sock", ks->dir, shard);
    const char *args[32] = {
        o->psd,  "--bind",       "127.0.0.1", "--port",      "0",    "--ready-file",
        ready,   "--mode",       "async",     "--workers",   "1",    "--shard",
        shard_s, "--num-shards", n_s,         "--log-level", "warn", "--checkpoint-every",
        "0"};
    int na = 19;
    if (ipc) { /* in place of --bind 127.0.0.1 --port 0 */
        args[1] = "--transport";
        args[2] = "ipc";
        args[3] = "--ipc-path";
        args[4] = sock;
    }
    if (curve) {
        args[na++] = "--curve-secret";
        args[na++] = ks->server_key;
        args[na++] = "--authorized-keys";
        args[na++] = ks->auth_dir;
    }
    args[na] = NULL;
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        execv(o->psd, (char *const *)args);
        fprintf(stderr, "wire: cannot run %s: %s\n", o->psd, strerror(errno));
        _exit(127);
    }
    for (int i = 0; i < 1000; i++) { /* up to 10 s */
        FILE *f = fopen(ready, "r");
        if (f) {
            char line[160] = "";
            bool ok = fgets(line, sizeof line, f) != NULL && strchr(line, '\n');
            fclose(f);
            if (ok) { /* "host:port" or "ipc://PATH", as the client takes it */
                child c = {.pid = pid};
                line[strcspn(line, "\n")] = '\0';
                snprintf(c.ep, sizeof c.ep, "%s", line);
                return c;
            }
        }
        if (waitpid(pid, NULL, WNOHANG) == pid) die("psd exited at start");
        usleep(10000);
    }
    kill(pid, SIGTERM);
    die("psd did not write its ready file within 10 s");
    return (child){0};
}

/* A tensor set for one row of the table: floats in params/grads, placed on shards. */
typedef struct {
    size_t floats;
    float *param, *grad;
    size_t shard_bytes[MAX_SHARDS];
    ps_placement pl;
    ps_place_var vars[4];
    size_t nvars, var_off[4], var_rank[4];
} tensors;

static void make_tensors(tensors *t, const size_spec *sz, unsigned nshards) {
    memset(t, 0, sizeof *t);
    size_t min_slice = 1; /* generic sizes: always two row halves on 2 shards */
    if (sz->bytes == 0) { /* the default MLP, placed as the worker places it */
        static const char *names[] = {"dense/kernel", "dense/bias", "dense_1/kernel",
                                      "dense_1/bias"};
        static const size_t rows[] = {784, 128, 128, 10}, cols[] = {128, 1, 10, 1},
                            rank[] = {2, 1, 2, 1};
        for (size_t i = 0; i < 4; i++) {
            t->vars[i] = (ps_place_var){names[i], rows[i], cols[i]};
            t->var_off[i] = t->floats;
            t->var_rank[i] = rank[i];
            t->floats += rows[i] * cols[i];
        }
        t->nvars = 4;
        min_slice = PS_PLACE_MIN_SLICE_BYTES;
    } else {
        t->floats = sz->bytes / 4;
        size_t cols = t->floats % 512 == 0 ? 256 : t->floats / 2;
        t->vars[0] = (ps_place_var){"w", t->floats / cols, cols};
        t->var_rank[0] = 2;
        t->nvars = 1;
    }
    t->param = aligned_alloc(64, (t->floats * 4 + 63) / 64 * 64);
    t->grad = aligned_alloc(64, (t->floats * 4 + 63) / 64 * 64);
    if (!t->param || !t->grad) die("out of memory");
    memset(t->param, 0, t->floats * 4);
    memset(t->grad, 0, t->floats * 4);
    if (ps_place(t->vars, t->nvars, nshards, min_slice, &t->pl) != PS_OK) die("ps_place");
    for (size_t k = 0; k < t->pl.n; k++) {
        const ps_place_piece *pc = &t->pl.pieces[k];
        t->shard_bytes[pc->shard] += (pc->row_end - pc->row_begin) * t->vars[pc->var].row_numel * 4;
    }
}

static void free_tensors(tensors *t) {
    ps_placement_free(&t->pl);
    free(t->param);
    free(t->grad);
}

static ps_client *open_client(const child *psd, unsigned nshards, tensors *t, const keyset *ks,
                              bool curve) {
    const char *ep[MAX_SHARDS];
    for (unsigned i = 0; i < nshards; i++)
        ep[i] = psd[i].ep;
    ps_client *c;
    char err[512];
    if (ps_client_open(&c, ep, nshards, 0, 1, err, sizeof err) != PS_OK) die(err);
    if (curve && ps_client_set_curve(c, ks->client_key, ks->server_pub, err, sizeof err) != PS_OK)
        die(err);
    ps_opt_spec opt = ps_opt_spec_default(PS_OPT_SGD);
    opt.lr = 1e-6f;
    for (size_t k = 0; k < t->pl.n; k++) {
        const ps_place_piece *pc = &t->pl.pieces[k];
        const ps_place_var *v = &t->vars[pc->var];
        ps_client_tensor ct = {.shard = pc->shard, .rank = t->var_rank[pc->var], .opt = opt};
        snprintf(ct.name, sizeof ct.name, "%s", pc->name);
        ct.shape[0] = pc->row_end - pc->row_begin;
        ct.shape[1] = ct.rank > 1 ? v->row_numel : 0;
        size_t off = t->var_off[pc->var] + pc->row_begin * v->row_numel;
        ct.param = t->param + off;
        ct.grad = t->grad + off;
        if (ps_client_add(c, &ct) != PS_OK) die("ps_client_add");
    }
    int async = 0;
    uint64_t version;
    if (ps_client_hello(c, &async, &version) != PS_OK || !async) {
        fprintf(stderr, "wire: hello: %s\n", ps_client_error(c));
        exit(1);
    }
    if (ps_client_create_vars(c, NULL) != PS_OK) {
        fprintf(stderr, "wire: create_vars: %s\n", ps_client_error(c));
        exit(1);
    }
    return c;
}

/* ---- contestants ---------------------------------------------------------- */

/* push+pull: two requests (Push, then Pull); push-pull: one PushPull, the
 * training step's exchange */
/* raw out+back 16fr: the same bytes as raw out+back in 16 frames each way (how to
 * frame a big tensor: psd sends each tensor as one frame) */
enum { C_PUSH, C_PULL, C_PP, C_PPC, R_ONEWAY, R_GET, R_ECHO, R_ECHO16, C_MEMCPY, N_CONT };
static const char *cont_name[N_CONT] = {"psd push",      "psd pull",          "psd push+pull",
                                        "psd push-pull", "raw out+1B reply",  "raw 9B req+back",
                                        "raw out+back",  "raw out+back 16fr", "memcpy"};
static const int cont_dirs[N_CONT] = {1, 1, 2, 2, 1, 1, 2, 2, 1}; /* payload = dirs x size */
static const int cont_raw[N_CONT] = {R_ONEWAY, R_GET, R_ECHO, R_ECHO, -1, -1, -1, R_ECHO, -1};

typedef struct {
    ps_client *c;
    uint64_t clock;
    raw_client *raw;
    tensors *t;
    char *src, *dst; /* memcpy */
} env;

static void op(env *e, int which) {
    switch (which) {
    case C_PUSH:
        if (ps_client_push_next(e->c, e->clock++, NULL) != PS_OK) die(ps_client_error(e->c));
        break;
    case C_PULL: {
        uint64_t v;
        if (ps_client_pull(e->c, 0, &v) != PS_OK) die(ps_client_error(e->c));
        break;
    }
    case C_PP:
        op(e, C_PUSH);
        op(e, C_PULL);
        break;
    case C_PPC:
        ps_client_step_begin(e->c, e->clock++);
        if (ps_client_step_end(e->c, NULL, NULL) != PS_OK) die(ps_client_error(e->c));
        break;
    case R_ONEWAY:
        raw_op(e->raw, 'A', (char *)e->t->grad, e->t->shard_bytes, 1);
        break;
    case R_GET:
        raw_op(e->raw, 'G', NULL, e->t->shard_bytes, 1);
        break;
    case R_ECHO:
        raw_op(e->raw, 'E', (char *)e->t->grad, e->t->shard_bytes, 1);
        break;
    case R_ECHO16:
        raw_op(e->raw, 'E', (char *)e->t->grad, e->t->shard_bytes, 16);
        break;
    case C_MEMCPY:
        memcpy(e->dst, e->src, e->t->floats * 4);
        __asm__ __volatile__("" ::"r"(e->dst) : "memory");
        break;
    }
}

static double time_ops(env *e, int which, long n) {
    double t0 = now();
    for (long i = 0; i < n; i++)
        op(e, which);
    return now() - t0;
}

/* Ops per rep so that a rep lasts >= min_s (after one warm-up op). */
static long calibrate(env *e, int which, double min_s) {
    op(e, which);
    long n = 1;
    for (;;) {
        double t = time_ops(e, which, n);
        if (t >= min_s) return n;
        if (t < min_s / 8) {
            n *= 8;
        } else {
            return (long)((double)n * min_s / t * 1.05) + 1;
        }
    }
}

typedef struct {
    double s_per_op, ratio;
    long n;
} result;

static void measure(env *e, const int *which, int nw, const opts *o, result *res) {
    long n[N_CONT];
    double t[N_CONT][MAX_REPS];
    for (int k = 0; k < nw; k++)
        n[k] = calibrate(e, which[k], o->min_s);
    for (int r = 0; r < o->reps; r++)
        for (int k = 0; k < nw; k++) { /* interleaved; order alternates per rep */
            int kk = r % 2 ? nw - 1 - k : k;
            t[kk][r] = time_ops(e, which[kk], n[kk]) / (double)n[kk];
        }
    for (int k = 0; k < nw; k++) {
        res[which[k]] = (result){median(t[k], o->reps), 0, n[k]};
        int raw = cont_raw[which[k]];
        for (int j = 0; j < nw && raw >= 0; j++)
            if (which[j] == raw) {
                double ratios[MAX_REPS];
                for (int r = 0; r < o->reps; r++)
                    ratios[r] = t[j][r] / t[k][r];
                res[which[k]].ratio = median(ratios, o->reps);
            }
    }
}

/* ---- main ------------------------------------------------------------------ */

static void size_label(const size_spec *sz, char *out, size_t len) {
    if (sz->bytes == 0)
        snprintf(out, len, "mlp step");
    else if (sz->bytes % (1u << 20) == 0)
        snprintf(out, len, "%zu MiB", sz->bytes >> 20);
    else if (sz->bytes % 1024 == 0)
        snprintf(out, len, "%zu KiB", sz->bytes >> 10);
    else
        snprintf(out, len, "%zu B", sz->bytes);
}

/* Per transport (0 tcp, 1 ipc): */
typedef struct {
    double ratio[4];  /* 16 MiB, 1 shard: push, pull, push+pull, push-pull */
    double mlp_us[2]; /* mlp step push-pull latency, 1 and 2 shards */
    bool have16, have_mlp[2];
} summary;

static void make_keys(const opts *o, keyset *ks) {
    snprintf(ks->dir, sizeof ks->dir, "/tmp/ps-wire-XXXXXX");
    if (!mkdtemp(ks->dir)) die("mkdtemp");
    snprintf(ks->server_key, sizeof ks->server_key, "%s/server.key", ks->dir);
    snprintf(ks->server_pub, sizeof ks->server_pub, "%s/server.pub", ks->dir);
    snprintf(ks->client_key, sizeof ks->client_key, "%s/client.key", ks->dir);
    snprintf(ks->auth_dir, sizeof ks->auth_dir, "%s/auth", ks->dir);
    if (!o->curve) return;
    if (mkdir(ks->auth_dir, 0700) != 0) die("mkdir");
    char *a1[] = {(char *)o->psctl, "keygen", "server", "--dir", ks->dir, NULL};
    char *a2[] = {(char *)o->psctl, "keygen", "client", "--dir", ks->auth_dir, NULL};
    if (run(a1) != 0 || run(a2) != 0) die("psctl keygen failed (see --psctl)");
    /* the client's key pair lives in auth/ next to its .pub; psd reads only *.pub */
    snprintf(ks->client_key, sizeof ks->client_key, "%s/auth/client.key", ks->dir);
}

static void remove_keys(const keyset *ks) {
    const char *files[] = {"server.key",  "server.pub", "auth/client.key", "auth/client.pub",
                           "ready.0",     "ready.1",    "psd.0.sock",      "psd.1.sock",
                           "echo.0.sock", "echo.1.sock"};
    char p[256];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(p, sizeof p, "%s/%s", ks->dir, files[i]);
        unlink(p);
    }
    rmdir(ks->auth_dir);
    rmdir(ks->dir);
}

int main(int argc, char **argv) {
    opts o;
    if (parse_opts(argc, argv, &o) != 0) {
        usage(stderr, argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    printf("command:");
    for (int i = 0; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\npsd: %s (async mode: each push applied on arrival, a pull answered at once, "
           "zero-copy; 1 worker; SGD)\n",
           o.psd);
    int zmaj, zmin, zpat;
    zmq_version(&zmaj, &zmin, &zpat);
    printf("libzmq %d.%d.%d; transport: %s%s%s\n", zmaj, zmin, zpat,
           o.tcp ? "tcp on 127.0.0.1" : "", o.tcp && o.ipc ? " and " : "",
           o.ipc ? "ipc (Unix sockets in a temp dir; psd --transport ipc)" : "");
    printf("timing: per measurement a warm-up, reps of >= %.0f ms (the op repeated inside), "
           "median of %d reps;\n"
           "        the contestants of a group interleaved; ratio = median over reps of "
           "t(raw) / t(psd)\n"
           "        (push vs raw out+1B reply, pull vs raw 9B req+back, push+pull (a push, then a "
           "pull)\n"
           "        and push-pull (one request) vs raw out+back; 1.00 = as fast as raw)\n"
           "GB/s = payload bytes moved per op (push+pull, push-pull and out+back: 2 x size) / "
           "time per op; "
           "1 GB = 1e9 B\n\n",
           o.min_s * 1e3, o.reps);
    keyset ks;
    make_keys(&o, &ks);

    size_t max_bytes = 0;
    for (int i = 0; i < o.nsizes; i++) {
        size_t b = o.sizes[i].bytes ? o.sizes[i].bytes : MLP_FLOATS * 4;
        if (b > max_bytes) max_bytes = b;
    }
    char *src = malloc(max_bytes), *dst = malloc(max_bytes);
    if (!src || !dst) die("out of memory");
    memset(src, 1, max_bytes);
    memset(dst, 2, max_bytes);

    printf("%-9s %6s %-9s %-5s %-17s %6s %9s %11s %7s\n", "size", "shards", "transport", "enc",
           "contestant", "ops/rep", "GB/s", "us/op", "vs raw");
    fflush(stdout);
    summary sums[2] = {{{0}}};
    for (int enc = 0; enc < 2; enc++) {
        bool curve = enc == 1;
        if ((curve && !o.curve) || (!curve && !o.plain)) continue;
        for (int tr = 0; tr < 2; tr++) {
            bool ipc = tr == 1;
            if ((ipc && !o.ipc) || (!ipc && !o.tcp)) continue;
            summary *sum = &sums[tr];
            char echo_sock[MAX_SHARDS][160];
            /* raw echo servers first (fork before this phase's zmq contexts exist) */
            char pub[41] = "", sec[41] = "", cpub[41] = "", csec[41] = "";
            if (curve && (zmq_curve_keypair(pub, sec) != 0 || zmq_curve_keypair(cpub, csec) != 0))
                die("zmq_curve_keypair (libzmq without CURVE?)");
            child echo[MAX_SHARDS];
            for (int i = 0; i < MAX_SHARDS; i++) {
                snprintf(echo_sock[i], sizeof echo_sock[i], "%s/echo.%d.sock", ks.dir, i);
                echo[i] = start_echo(max_bytes, curve ? sec : NULL, ipc ? echo_sock[i] : NULL);
            }
            for (int si = 0; si < o.nsizes; si++) {
                for (unsigned nsh = 1; nsh <= MAX_SHARDS; nsh++) {
                    tensors t;
                    make_tensors(&t, &o.sizes[si], nsh);
                    child psd[MAX_SHARDS];
                    for (unsigned i = 0; i < nsh; i++)
                        psd[i] = start_psd(&o, i, nsh, &ks, curve, ipc);
                    raw_client raw;
                    raw_open(&raw, echo, (int)nsh, curve ? pub : NULL, cpub, csec);
                    env e = {.c = open_client(psd, nsh, &t, &ks, curve),
                             .raw = &raw,
                             .t = &t,
                             .src = src,
                             .dst = dst};
                    result res[N_CONT] = {0};
                    static const int all[] = {C_PUSH, C_PULL, C_PP,     C_PPC,   R_ONEWAY,
                                              R_GET,  R_ECHO, R_ECHO16, C_MEMCPY};
                    int which[N_CONT], nw = 0;
                    for (int k = 0; k < N_CONT; k++)
                        if (o.only < 0 || all[k] == o.only || all[k] == cont_raw[o.only])
                            which[nw++] = all[k];
                    measure(&e, which, nw, &o, res);
                    char label[32];
                    size_label(&o.sizes[si], label, sizeof label);
                    for (int k = 0; k < N_CONT; k++) {
                        if (k == C_MEMCPY && (nsh > 1 || curve || (ipc && o.tcp)))
                            continue;                /* once per size */
                        if (res[k].n == 0) continue; /* not measured (--only) */
                        double bytes = (double)cont_dirs[k] * (double)t.floats * 4.0;
                        char ratio[16] = "-";
                        if (cont_raw[k] >= 0) snprintf(ratio, sizeof ratio, "%.2f", res[k].ratio);
                        printf("%-9s %6u %-9s %-5s %-17s %6ld %9.2f %11.1f %7s\n", label, nsh,
                               k == C_MEMCPY ? "-" : (ipc ? "ipc" : "tcp"),
                               k == C_MEMCPY ? "-" : (curve ? "curve" : "plain"), cont_name[k],
                               res[k].n, bytes / res[k].s_per_op / 1e9, res[k].s_per_op * 1e6,
                               ratio);
                    }
                    fflush(stdout);
                    if (!curve && nsh == 1 && o.sizes[si].bytes == (16u << 20) && o.only < 0) {
                        sum->have16 = true;
                        for (int k = 0; k < 4; k++)
                            sum->ratio[k] = res[k].ratio;
                    }
                    if (!curve && o.sizes[si].bytes == 0 && (o.only < 0 || o.only == C_PPC)) {
                        sum->have_mlp[nsh - 1] = true;
                        sum->mlp_us[nsh - 1] = res[C_PPC].s_per_op * 1e6;
                    }
                    ps_client_goodbye(e.c);
                    ps_client_close(e.c);
                    raw_close(&raw);
                    for (unsigned i = 0; i < nsh; i++)
                        stop_child(&psd[i]);
                    free_tensors(&t);
                }
            }
            for (int i = 0; i < MAX_SHARDS; i++)
                stop_child(&echo[i]);
        }
    }

    printf("\nTargets (plaintext; printed, not asserted):\n");
    for (int tr = 0; tr < 2; tr++) {
        const summary *sum = &sums[tr];
        const char *tname = tr ? "ipc" : "tcp";
        if (!(tr ? o.ipc : o.tcp)) continue;
        if (sum->have16) {
            const char *what[4] = {"push", "pull", "push+pull", "push-pull"};
            for (int k = 0; k < 4; k++)
                printf("  %s, 16 MiB, 1 shard, %-9s >= %.2f x raw ZeroMQ: %.2f  %s\n", tname,
                       what[k], GOAL_RATIO, sum->ratio[k],
                       sum->ratio[k] >= GOAL_RATIO ? "met" : "NOT met");
        } else {
            printf("  %s: 16 MiB not in --sizes: the ratio targets are not measured\n", tname);
        }
        for (int s = 0; s < 2; s++) {
            if (!sum->have_mlp[s]) continue;
            printf("  %s, mlp step (%u floats out and back, one push-pull), %d shard%s, <= %.1f "
                   "ms: %.3f ms  %s\n",
                   tname, MLP_FLOATS, s + 1, s ? "s" : "", GOAL_MLP_MS, sum->mlp_us[s] / 1e3,
                   sum->mlp_us[s] / 1e3 <= GOAL_MLP_MS ? "met" : "NOT met");
        }
        if (!sum->have_mlp[0])
            printf("  %s: mlp not in --sizes: the latency target is not measured\n", tname);
    }
    remove_keys(&ks);
    free(src);
    free(dst);
    return 0;
}
