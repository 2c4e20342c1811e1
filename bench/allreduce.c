/* bench/allreduce: the ring all-reduce (collective/ring.h) between 2 and 3
 * rank processes on this host, over TCP (127.0.0.1) and Unix sockets, 4 KiB
 * to 64 MiB, beside, in the same run:
 *
 * (b) the ring's bound from raw point-to-point bandwidth: 2 processes, one
 *     pushing the same message sizes through one socket of the same kind
 *     (same options as a ring link) to the other, which reads them into a
 *     buffer; a ring all-reduce moves 2(n-1)/n of the data through every
 *     link, so its algorithm bandwidth is at most p2p * n / (2(n-1));
 * (a) PyTorch's gloo all_reduce of the same sizes and ranks (--gloo SCRIPT:
 *     bench/gloo_allreduce.py run with --python, torch.distributed over
 *     tcp://127.0.0.1).
 * --nccl GPUS times ncclAllReduce of device buffers instead (collective/ps_nccl.h;
 * compiled with the CUDA backend, never run here: no GPU).
 *
 * Figures as nccl-tests defines them: algbw = bytes / time, busbw = algbw *
 * 2(n-1)/n. Each figure is the median of --reps rounds; a round runs, for each transport,
 * the p2p pair then each ring, every size once (a small size: several
 * all-reduces, the time per all-reduce, after a barrier), so that the ring and
 * its bound see the same load. cpu: CPU time (user + system) per all-reduce
 * summed over the ranks, and per p2p message summed over both ends.
 * Built by meson, never run by the tests. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchutil.h"
#include "link.h"
#include "ps_error.h"
#include "ps_nccl.h"
#include "ring.h"

#define MAX_SIZES 32
#define MAX_REPS 51

typedef struct {
    int ranks[4], n_ranks;
    int tcp, unix_;
    long min, max;
    int reps;
    long chunk;
    const char *gloo, *python;
    int nccl_gpus; /* --nccl GPUS: time ncclAllReduce instead (rank r on device r % GPUS) */
} options;

static size_t sizes[MAX_SIZES];
static int n_sizes;

static int iters_for(size_t bytes) {
    size_t it = ((size_t)8 << 20) / bytes;
    return it < 1 ? 1 : it > 100 ? 100 : (int)it;
}

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        perror("free port");
        exit(1);
    }
    close(fd);
    return ntohs(a.sin_port);
}

static void *share(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    return p;
}

/* CPU seconds (user + system, all threads) of this process so far. */
static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

static pid_t spawn(void) {
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    if (pid == 0) prctl(PR_SET_PDEATHSIG, SIGKILL);
    return pid;
}

static bool wait_ok(pid_t pid) {
    int st;
    return waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* ---- the ring ---- */

/* One rep per size: seconds per all-reduce (rank 0's clock) into out[], CPU
 * seconds per all-reduce summed over the ranks into cpu[]. */
static bool measure_ring(const options *o, int n, ps_ring_transport t, double *out, double *cpu) {
    char eps[4][32];
    const char *ep[4];
    for (int i = 0; i < n; i++) {
        snprintf(eps[i], sizeof eps[i], "127.0.0.1:%d", free_port());
        ep[i] = eps[i];
    }
    double *res = share(MAX_SIZES * sizeof(double) * 5);
    pid_t pid[4];
    for (int q = 0; q < n; q++) {
        if ((pid[q] = spawn()) > 0) continue;
        ps_ring_config c = {.rank = (unsigned)q,
                            .size = (unsigned)n,
                            .endpoints = ep,
                            .job_id = "bench",
                            .transport = t,
                            .chunk_bytes = (size_t)o->chunk};
        ps_ring *r;
        char err[600];
        if (ps_ring_open(&c, &r, err, sizeof err) != PS_OK) {
            fprintf(stderr, "rank %d: %s\n", q, err);
            _exit(1);
        }
        float *x = malloc(sizes[n_sizes - 1]), one = 1;
        memset(x, 0, sizes[n_sizes - 1]);
        for (int s = 0; s < n_sizes; s++) {
            size_t nf = sizes[s] / 4;
            int iters = iters_for(sizes[s]);
            if (ps_ring_allreduce(r, x, nf, err, sizeof err) != PS_OK) goto fail;   /* warm-up */
            if (ps_ring_allreduce(r, &one, 1, err, sizeof err) != PS_OK) goto fail; /* barrier */
            double t0 = ps_bench_now_s(), c0 = cpu_s();
            for (int i = 0; i < iters; i++)
                if (ps_ring_allreduce(r, x, nf, err, sizeof err) != PS_OK) goto fail;
            res[(q + 1) * MAX_SIZES + s] = (cpu_s() - c0) / iters;
            if (q == 0) res[s] = (ps_bench_now_s() - t0) / iters;
        }
        ps_ring_close(r);
        _exit(0);
    fail:
        fprintf(stderr, "rank %d: %s\n", q, err);
        _exit(1);
    }
    bool ok = true;
    for (int q = 0; q < n; q++)
        ok = wait_ok(pid[q]) && ok;
    memcpy(out, res, MAX_SIZES * sizeof(double));
    for (int i = 0; i < n_sizes; i++) {
        cpu[i] = 0;
        for (int q = 0; q < n; q++)
            cpu[i] += res[(q + 1) * MAX_SIZES + i];
    }
    munmap(res, MAX_SIZES * sizeof(double) * 5);
    return ok;
}

/* ---- point to point ---- */

static int p2p_listen(int is_unix, int port, struct sockaddr_storage *ss, socklen_t *len) {
    memset(ss, 0, sizeof *ss);
    if (is_unix) {
        struct sockaddr_un *u = (struct sockaddr_un *)ss;
        u->sun_family = AF_UNIX;
        int k = snprintf(u->sun_path + 1, sizeof u->sun_path - 1, "ps-bench-p2p:%d", port);
        *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)k);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        *len = sizeof *a;
    }
    int fd = socket(ss->ss_family, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, (struct sockaddr *)ss, *len) < 0 || listen(fd, 1) < 0) {
        perror("p2p listen");
        exit(1);
    }
    return fd;
}

static bool xfer(int fd, void *buf, size_t n, bool out) {
    char *p = buf;
    while (n > 0) {
        ssize_t k = out ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

/* One rep per size: seconds per message, one way, pushed back to back, into
 * out[]; CPU seconds per message of both processes into cpu[]. */
static bool measure_p2p(int is_unix, double *out, double *cpu) {
    struct sockaddr_storage ss;
    socklen_t len;
    int lfd = p2p_listen(is_unix, free_port(), &ss, &len);
    double *res = share(MAX_SIZES * sizeof(double) * 2);
    pid_t pid = spawn();
    if (pid == 0) { /* the receiver */
        int fd = accept(lfd, NULL, NULL);
        ps__link_tune(fd, !is_unix);
        char *buf = malloc(sizes[n_sizes - 1]), ack = 1;
        for (int s = 0; s < n_sizes; s++)
            for (int k = 0; k < 2; k++) { /* k 0: warm-up */
                double c0 = cpu_s();
                for (int i = 0; i < iters_for(sizes[s]); i++)
                    if (!xfer(fd, buf, sizes[s], false)) _exit(1);
                if (!xfer(fd, &ack, 1, true)) _exit(1);
                res[MAX_SIZES + s] = (cpu_s() - c0) / iters_for(sizes[s]);
            }
        _exit(0);
    }
    int fd = socket(ss.ss_family, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&ss, len) < 0) {
        perror("p2p connect");
        exit(1);
    }
    ps__link_tune(fd, !is_unix);
    char *buf = malloc(sizes[n_sizes - 1]), ack;
    memset(buf, 1, sizes[n_sizes - 1]);
    bool ok = true;
    double mycpu[MAX_SIZES];
    for (int s = 0; s < n_sizes && ok; s++) {
        int iters = iters_for(sizes[s]);
        for (int k = 0; k < 2 && ok; k++) { /* k 0: warm-up */
            double t0 = ps_bench_now_s(), c0 = cpu_s();
            for (int i = 0; i < iters && ok; i++)
                ok = xfer(fd, buf, sizes[s], true);
            ok = ok && xfer(fd, &ack, 1, false);
            res[s] = (ps_bench_now_s() - t0) / iters;
            mycpu[s] = (cpu_s() - c0) / iters;
        }
    }
    close(fd);
    close(lfd);
    free(buf);
    ok = wait_ok(pid) && ok;
    memcpy(out, res, MAX_SIZES * sizeof(double));
    for (int i = 0; i < n_sizes; i++)
        cpu[i] = mycpu[i] + res[MAX_SIZES + i];
    munmap(res, MAX_SIZES * sizeof(double) * 2);
    return ok;
}

/* ---- NCCL (compiled only here: no GPU) ---- */

/* --nccl: each rank opens a ring (for the unique id) and a communicator, and
 * times ncclAllReduce of device buffers; prints one line per size. */
static bool run_nccl(const options *o, int n) {
    char eps[4][32];
    const char *ep[4];
    for (int i = 0; i < n; i++) {
        snprintf(eps[i], sizeof eps[i], "127.0.0.1:%d", free_port());
        ep[i] = eps[i];
    }
    pid_t pid[4];
    for (int q = 0; q < n; q++) {
        if ((pid[q] = spawn()) > 0) continue;
        ps_ring_config c = {
            .rank = (unsigned)q, .size = (unsigned)n, .endpoints = ep, .job_id = "bench-nccl"};
        ps_ring *r = NULL;
        ps_nccl *nc = NULL;
        float *dev = NULL;
        char err[600];
        if (ps_ring_open(&c, &r, err, sizeof err) != PS_OK ||
            ps_nccl_open(r, q % o->nccl_gpus, &nc, err, sizeof err) != PS_OK ||
            ps_nccl_alloc_floats(nc, sizes[n_sizes - 1] / 4, &dev, err, sizeof err) != PS_OK) {
            fprintf(stderr, "nccl rank %d: %s\n", q, err);
            _exit(1);
        }
        for (int s = 0; s < n_sizes; s++) {
            double reps[MAX_REPS];
            for (int k = 0; k < o->reps + 1; k++) {
                double t0 = ps_bench_now_s();
                if (ps_nccl_allreduce(nc, dev, sizes[s] / 4, err, sizeof err) != PS_OK) {
                    fprintf(stderr, "nccl rank %d: %s\n", q, err);
                    _exit(1);
                }
                if (k > 0) reps[k - 1] = ps_bench_now_s() - t0;
            }
            double tm = ps_bench_median(reps, o->reps), alg = sizes[s] / tm / 1e9;
            if (q == 0)
                printf("nccl  %-2d %9zu B %9.1f us algbw %7.3f busbw %7.3f\n", n, sizes[s],
                       tm * 1e6, alg, alg * 2.0 * (n - 1) / n);
        }
        fflush(stdout);
        ps_nccl_free_floats(dev);
        ps_nccl_close(nc);
        ps_ring_close(r);
        _exit(0);
    }
    bool ok = true;
    for (int q = 0; q < n; q++)
        ok = wait_ok(pid[q]) && ok;
    return ok;
}

/* ---- gloo ---- */

/* Runs the gloo script for n ranks: seconds per all-reduce into out[] (0 when
 * missing). */
static bool measure_gloo(const options *o, int n, double *out, double *cpu) {
    char cmd[2048];
    int k = snprintf(cmd, sizeof cmd, "%s %s --ranks %d --reps %d --sizes", o->python, o->gloo, n,
                     o->reps);
    for (int s = 0; s < n_sizes; s++)
        k += snprintf(cmd + k, sizeof cmd - (size_t)k, "%s%zu", s ? "," : " ", sizes[s]);
    FILE *p = popen(cmd, "r");
    if (!p) return false;
    char line[512];
    int got = 0;
    while (fgets(line, sizeof line, p)) {
        int ranks;
        size_t bytes;
        double t, c;
        if (sscanf(line, "gloo ranks=%d bytes=%zu time_s=%lf cpu_s=%lf", &ranks, &bytes, &t, &c) !=
            4)
            continue;
        for (int s = 0; s < n_sizes; s++)
            if (sizes[s] == bytes && ranks == n) {
                out[s] = t;
                cpu[s] = c;
                got++;
            }
    }
    int st = pclose(p);
    return st == 0 && got == n_sizes;
}

/* ---- main ---- */

static void usage(void) {
    fprintf(
        stderr,
        "usage: allreduce [--ranks 2,3] [--transports tcp,unix] [--min BYTES] "
        "[--max BYTES] [--reps N] [--chunk BYTES] [--gloo SCRIPT [--python PY]] [--nccl GPUS]\n");
    exit(2);
}

static void parse(int argc, char **argv, options *o) {
    *o = (options){.ranks = {2, 3},
                   .n_ranks = 2,
                   .tcp = 1,
                   .unix_ = 1,
                   .min = 4096,
                   .max = 64L << 20,
                   .reps = 5,
                   .python = "python3"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) usage();
        i++;
        if (strcmp(a, "--ranks") == 0) {
            o->n_ranks = 0;
            for (const char *p = v; *p && o->n_ranks < 4; p++)
                if (*p >= '2' && *p <= '4') o->ranks[o->n_ranks++] = *p - '0';
            if (o->n_ranks == 0) usage();
        } else if (strcmp(a, "--transports") == 0) {
            o->tcp = strstr(v, "tcp") != NULL;
            o->unix_ = strstr(v, "unix") != NULL;
        } else if (strcmp(a, "--min") == 0) {
            if (!ps_bench_parse_long(v, 4, 1L << 30, &o->min)) usage();
        } else if (strcmp(a, "--max") == 0) {
            if (!ps_bench_parse_long(v, 4, 1L << 30, &o->max)) usage();
        } else if (strcmp(a, "--reps") == 0) {
            long r;
            if (!ps_bench_parse_long(v, 1, MAX_REPS, &r)) usage();
            o->reps = (int)r;
        } else if (strcmp(a, "--chunk") == 0) {
            if (!ps_bench_parse_long(v, 0, 64L << 20, &o->chunk)) usage();
        } else if (strcmp(a, "--gloo") == 0) {
            o->gloo = v;
        } else if (strcmp(a, "--nccl") == 0) {
            long g;
            if (!ps_bench_parse_long(v, 1, 64, &g)) usage();
            o->nccl_gpus = (int)g;
        } else if (strcmp(a, "--python") == 0) {
            o->python = v;
        } else {
            usage();
        }
    }
    for (long s = o->min; s <= o->max && n_sizes < MAX_SIZES; s *= 4)
        sizes[n_sizes++] = (size_t)s & ~(size_t)3;
    if (n_sizes == 0) usage();
}

static void human(size_t b, char *out, size_t n) {
    if (b >= (1u << 20))
        snprintf(out, n, "%zu MiB", b >> 20);
    else
        snprintf(out, n, "%zu KiB", b >> 10);
}

int main(int argc, char **argv) {
    options o;
    parse(argc, argv, &o);
    if (o.nccl_gpus) {
        bool ok = true;
        for (int i = 0; i < o.n_ranks; i++)
            ok = run_nccl(&o, o.ranks[i]) && ok;
        return ok ? 0 : 1;
    }
    /* rounds: p2p, then each ring, once per size; medians over rounds, so
     * that the ring and its bound see the same load (this machine is shared) */
    static double ring_r[2][4][MAX_REPS][MAX_SIZES], ringc_r[2][4][MAX_REPS][MAX_SIZES];
    static double p2p_r[2][MAX_REPS][MAX_SIZES], p2pc_r[2][MAX_REPS][MAX_SIZES];
    static double ring[2][4][MAX_SIZES], ringc[2][4][MAX_SIZES], p2p[2][MAX_SIZES],
        p2pc[2][MAX_SIZES], gloo[4][MAX_SIZES], glooc[4][MAX_SIZES];
    bool have_gloo[4] = {false};
    const char *tname[2] = {"tcp", "unix"};
    for (int k = 0; k < o.reps; k++)
        for (int t = 0; t < 2; t++) {
            if (!(t == 0 ? o.tcp : o.unix_)) continue;
            if (!measure_p2p(t, p2p_r[t][k], p2pc_r[t][k])) {
                fprintf(stderr, "allreduce: the %s point-to-point run failed\n", tname[t]);
                return 1;
            }
            for (int i = 0; i < o.n_ranks; i++) {
                int n = o.ranks[i];
                if (!measure_ring(&o, n, t == 0 ? PS_RING_TCP : PS_RING_UNIX, ring_r[t][n - 1][k],
                                  ringc_r[t][n - 1][k])) {
                    fprintf(stderr, "allreduce: the %s ring of %d failed\n", tname[t], n);
                    return 1;
                }
            }
        }
    for (int t = 0; t < 2; t++)
        for (int s = 0; s < n_sizes; s++) {
            double v[MAX_REPS];
            for (int k = 0; k < o.reps; k++)
                v[k] = p2p_r[t][k][s];
            p2p[t][s] = ps_bench_median(v, o.reps);
            for (int k = 0; k < o.reps; k++)
                v[k] = p2pc_r[t][k][s];
            p2pc[t][s] = ps_bench_median(v, o.reps);
            for (int n = 2; n <= 4; n++) {
                for (int k = 0; k < o.reps; k++)
                    v[k] = ring_r[t][n - 1][k][s];
                ring[t][n - 1][s] = ps_bench_median(v, o.reps);
                for (int k = 0; k < o.reps; k++)
                    v[k] = ringc_r[t][n - 1][k][s];
                ringc[t][n - 1][s] = ps_bench_median(v, o.reps);
            }
        }
    if (o.gloo)
        for (int i = 0; i < o.n_ranks; i++) {
            have_gloo[o.ranks[i] - 1] =
                measure_gloo(&o, o.ranks[i], gloo[o.ranks[i] - 1], glooc[o.ranks[i] - 1]);
            if (!have_gloo[o.ranks[i] - 1])
                fprintf(stderr, "allreduce: gloo with %d ranks did not run (%s %s)\n", o.ranks[i],
                        o.python, o.gloo);
        }
    printf("ring all-reduce, median of %d; GB/s = 1e9 bytes/s; bound = p2p * n/(2(n-1))\n", o.reps);
    printf("cpu: CPU time per all-reduce (all ranks; ring, gloo) / per p2p message (both ends), "
           "us\n");
    printf("%-5s %-2s %-7s %9s %7s %7s %7s %7s %8s %7s %7s %9s %8s %9s\n", "trans", "n", "size",
           "time_us", "algbw", "busbw", "p2p", "bound", "vs_bound", "gloo", "vs_gloo", "cpu_ring",
           "cpu_p2p", "cpu_gloo");
    for (int t = 0; t < 2; t++) {
        if (!(t == 0 ? o.tcp : o.unix_)) continue;
        for (int i = 0; i < o.n_ranks; i++) {
            int n = o.ranks[i];
            for (int s = 0; s < n_sizes; s++) {
                double tm = ring[t][n - 1][s], alg = sizes[s] / tm / 1e9;
                double bus = alg * 2.0 * (n - 1) / n, pb = sizes[s] / p2p[t][s] / 1e9;
                double bound = pb * n / (2.0 * (n - 1));
                char sz[32], gl[16] = "-", gr[16] = "-", gc[24] = "-";
                human(sizes[s], sz, sizeof sz);
                if (have_gloo[n - 1]) {
                    double ga = sizes[s] / gloo[n - 1][s] / 1e9;
                    snprintf(gl, sizeof gl, "%.3f", ga);
                    snprintf(gr, sizeof gr, "%.2fx", alg / ga);
                    snprintf(gc, sizeof gc, "%.1f", glooc[n - 1][s] * 1e6);
                }
                printf("%-5s %-2d %-7s %9.1f %7.3f %7.3f %7.3f %7.3f %7.2fx %7s %7s %9.1f %8.1f "
                       "%9s\n",
                       tname[t], n, sz, tm * 1e6, alg, bus, pb, bound, alg / bound, gl, gr,
                       ringc[t][n - 1][s] * 1e6, p2pc[t][s] * 1e6, gc);
            }
        }
    }
    return 0;
}
