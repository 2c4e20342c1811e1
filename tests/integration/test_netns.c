/* Training across hosts: three network namespaces A, B, C (10.231.77.1-3/24),
 * each joined by a veth pair to a bridge in a fourth namespace (the switch), so
 * the host's own network is untouched.
 * - parameter server: psd shard 0 runs in A, shard 1 in B, the chief in B and
 *   worker 1 in C, all configured by the same TF_CONFIG; the job trains 300 sync
 *   steps;
 * - multi_worker_mirrored: one worker in each of A, B, C, each given a TF_CONFIG
 *   naming only the three workers' addresses (its own task index); no psd; the
 *   ring trains 300 steps.
 * Skipped (exit 77) where namespaces cannot be made. */
#include <arpa/inet.h>
#include <check.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"
#include "saved.h"
#include "testutil.h"

#define NETNS_DIR "/var/run/netns" /* where `ip netns` keeps its names */
#define PREFIX "pstnet"            /* namespaces are PREFIX <pid> <s|a|b|c|p> */
#define SUBNET "10.231.77."
#define OUTSIDE "198.51.100.7" /* TEST-NET-2: off the bridge */
#define PORT 23000
#define RING_PORT 23100
#define RING_WORKERS 3
#define STEPS 300
#define STR(x) STR_(x)
#define STR_(x) #x

enum { SWITCH, HOST_A, HOST_B, HOST_C, N_NS };
static const char ns_suffix[N_NS] = {'s', 'a', 'b', 'c'};

static pid_t main_pid;     /* the test binary's pid (the forked test inherits it) */
static const char *ip_exe; /* the `ip` binary */

static const char *find_ip(void) {
    static const char *const where[] = {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"};
    for (size_t i = 0; i < sizeof where / sizeof where[0]; i++)
        if (access(where[i], X_OK) == 0) return where[i];
    return NULL;
}

/* First line of a file into buf ("" when there is none). */
static void first_line(const char *path, char *buf, size_t n) {
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (!fgets(buf, (int)n, f)) buf[0] = 0;
    fclose(f);
    buf[strcspn(buf, "\n")] = 0;
}

/* Runs `ip ARGS...` (NULL-terminated) with its output in `log`, for at most 5 s.
 * Returns 0, or -1 with the command and ip's message in err. */
__attribute__((sentinel)) static int run_ip(const char *log, char *err, size_t errlen, ...) {
    const char *argv[32] = {ip_exe};
    int n = 1;
    va_list ap;
    va_start(ap, errlen);
    for (const char *a; (a = va_arg(ap, const char *)) != NULL && n < 31;)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    unlink(log);
    pid_t pid = ps_test_spawn(argv, log);
    int st = pid > 0 ? ps_test_wait(pid, 5000) : -1;
    if (st == 0) return 0;
    char cmd[512] = "ip", msg[512];
    for (int i = 1; i < n; i++)
        snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd), " %s", argv[i]);
    first_line(log, msg, sizeof msg);
    snprintf(err, errlen, "'%s' failed (status %d): %s", cmd, st, msg[0] ? msg : "no output");
    return -1;
}

/* SIGKILLs every process whose network namespace is the named one (ours,
 * started with `ip netns exec`). Returns how many were signalled. */
static int kill_ns_processes(const char *name) {
    char path[512];
    struct stat ns, st;
    snprintf(path, sizeof path, "%s/%s", NETNS_DIR, name);
    if (stat(path, &ns) != 0) return 0;
    DIR *d = opendir("/proc");
    if (!d) return 0;
    int killed = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0 || pid == getpid()) continue;
        snprintf(path, sizeof path, "/proc/%ld/ns/net", pid);
        if (stat(path, &st) == 0 && st.st_dev == ns.st_dev && st.st_ino == ns.st_ino &&
            kill((pid_t)pid, SIGKILL) == 0)
            killed++;
    }
    closedir(d);
    return killed;
}

/* Kills what runs in the namespace, then deletes it (its veth ends go with it).
 * Returns 0 when the name is gone. */
static int delete_ns(const char *name, const char *log) {
    char path[512], err[600];
    snprintf(path, sizeof path, "%s/%s", NETNS_DIR, name);
    if (access(path, F_OK) != 0) return 0;
    kill_ns_processes(name);
    if (run_ip(log, err, sizeof err, "netns", "delete", name, NULL) != 0)
        fprintf(stderr, "%s\n", err);
    return access(path, F_OK) == 0 ? -1 : 0;
}

/* Deletes this prefix's namespaces: those of `owner`, or with owner 0 those
 * whose creating test process is gone (left by a crashed or killed run). */
static void delete_namespaces_of(pid_t owner) {
    DIR *d = opendir(NETNS_DIR);
    if (!d) return;
    char names[64][256];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && n < 64;) {
        if (strncmp(e->d_name, PREFIX, strlen(PREFIX)) != 0) continue;
        char *end;
        long pid = strtol(e->d_name + strlen(PREFIX), &end, 10);
        if (pid <= 0 || end[0] == 0 || end[1] != 0 || !strchr("sabcp", end[0])) continue;
        int stale = kill((pid_t)pid, 0) != 0 && errno == ESRCH;
        if (owner ? pid == owner : stale) snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    }
    closedir(d);
    char *tmp = ps_test_mkdtemp();
    char log[4200];
    snprintf(log, sizeof log, "%s/ip.log", tmp ? tmp : "/tmp");
    for (int i = 0; i < n; i++) {
        if (!owner) printf("netns: removing stale namespace %s\n", names[i]);
        delete_ns(names[i], log);
    }
    if (tmp) {
        ps_test_rmdir(tmp);
        free(tmp);
    }
}

/* Unchecked teardown, run in the parent: the forked test cannot clean up
 * after a Check timeout or a crash of its own. */
static void remove_our_namespaces(void) {
    delete_namespaces_of(main_pid);
}

/* Connects to addr:port from the calling process's network namespace and,
 * with `greet`, reads the 10-byte ZMTP signature libzmq sends unprompted (a
 * psd answers with it; a proxy or a stranger does not). Returns 0, or an errno
 * value: ETIMEDOUT after timeout_ms, EPROTO when the bytes are not ZMTP. */
static int tcp_probe(const char *addr, int port, int greet, int timeout_ms) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, addr, &sa.sin_addr);
    long long deadline = ps_test_now_ms() + timeout_ms;
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 ? 0 : errno;
    if (rc == EINPROGRESS) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int r = poll(&p, 1, timeout_ms);
        socklen_t len = sizeof rc;
        if (r == 0)
            rc = ETIMEDOUT;
        else if (r < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &rc, &len) != 0)
            rc = errno;
    }
    unsigned char sig[10];
    size_t got = 0;
    while (rc == 0 && greet && got < sizeof sig) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left = (int)(deadline - ps_test_now_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0) {
            rc = ETIMEDOUT;
            break;
        }
        ssize_t n = read(fd, sig + got, sizeof sig - got);
        if (n <= 0) rc = n == 0 ? ECONNRESET : errno;
        if (n > 0) got += (size_t)n;
    }
    if (rc == 0 && greet && (sig[0] != 0xff || sig[9] != 0x7f)) rc = EPROTO;
    close(fd);
    return rc;
}

/* One tcp_probe and its outcome (ps_test_wait_until's context). */
typedef struct {
    const char *addr;
    int port, greet, rc;
} probe_try;

static int probe_succeeds(void *ctx) {
    probe_try *t = ctx;
    t->rc = tcp_probe(t->addr, t->port, t->greet, 1000);
    return t->rc == 0;
}

/* From inside namespace `ns` (a forked child that setns()es into it) runs
 * tcp_probe, retrying until timeout_ms (0: once). Returns 0 or an errno value. */
static int probe_from_ns(const char *ns, const char *addr, int port, int greet, int timeout_ms) {
    pid_t pid = fork();
    if (pid < 0) return errno;
    if (pid == 0) {
        char path[512];
        if (snprintf(path, sizeof path, "%s/%s", NETNS_DIR, ns) >= (int)sizeof path) _exit(1);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) _exit(errno & 0xff);
        probe_try t = {addr, port, greet, 0};
        if (timeout_ms > 0)
            ps_test_wait_until(probe_succeeds, &t, timeout_ms, 50);
        else
            probe_succeeds(&t);
        _exit(t.rc & 0xff);
    }
    return ps_test_wait(pid, timeout_ms + 3000);
}

typedef struct {
    char ns[N_NS][32];
    char dir[512], iplog[600], summary[600];
    char psd_log[2][600], ready[2][600], worker_log[2][600];
    pid_t psd[2], worker[2];
    char fail[2048];
} netjob;

/* Records why the test fails and jumps to the cleanup. */
#define CHECK(j, cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            snprintf((j)->fail, sizeof(j)->fail, __VA_ARGS__);                                     \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

/* Builds the switch and the three hosts. Returns 0, or -1 with j->fail set. */
static int build_topology(netjob *j) {
    const char *sw = j->ns[SWITCH];
    char *e = j->fail;
    size_t el = sizeof j->fail;
    for (int k = 0; k < N_NS; k++)
        if (run_ip(j->iplog, e, el, "netns", "add", j->ns[k], NULL)) return -1;
    if (run_ip(j->iplog, e, el, "-n", sw, "link", "add", "br0", "type", "bridge", NULL) ||
        run_ip(j->iplog, e, el, "-n", sw, "link", "set", "lo", "up", NULL) ||
        run_ip(j->iplog, e, el, "-n", sw, "link", "set", "br0", "up", NULL))
        return -1;
    for (int h = HOST_A; h <= HOST_C; h++) {
        /* veth names live only inside the namespaces: no clash with the host's */
        char port[8], addr[32];
        snprintf(port, sizeof port, "p%c", ns_suffix[h]);
        snprintf(addr, sizeof addr, SUBNET "%d/24", h);
        const char *ns = j->ns[h];
        if (run_ip(j->iplog, e, el, "-n", sw, "link", "add", port, "type", "veth", "peer", "name",
                   "eth0", "netns", ns, NULL) ||
            run_ip(j->iplog, e, el, "-n", sw, "link", "set", port, "master", "br0", "up", NULL) ||
            run_ip(j->iplog, e, el, "-n", ns, "addr", "add", addr, "dev", "eth0", NULL) ||
            run_ip(j->iplog, e, el, "-n", ns, "link", "set", "eth0", "up", NULL) ||
            run_ip(j->iplog, e, el, "-n", ns, "link", "set", "lo", "up", NULL))
            return -1;
    }
    return 0;
}

/* The cluster every process is given; only the task differs. */
static void set_tf_config(const char *type, int index) {
    char tf[512];
    snprintf(tf, sizeof tf,
             "{\"cluster\": {\"ps\": [\"" SUBNET "1:%d\", \"" SUBNET "2:%d\"],"
             " \"chief\": [\"" SUBNET "2:0\"], \"worker\": [\"" SUBNET "3:0\"]},"
             " \"task\": {\"type\": \"%s\", \"index\": %d}}",
             PORT, PORT, type, index);
    setenv("TF_CONFIG", tf, 1);
}

/* Starts psd shard i in host A (i = 0) or B (i = 1), bound to that host's
 * address; waits up to 10 s for its ready file. Returns 0 or -1 (j->fail). */
static int start_psd(netjob *j, int i) {
    char bind[32];
    snprintf(bind, sizeof bind, SUBNET "%d", HOST_A + i);
    snprintf(j->psd_log[i], sizeof j->psd_log[i], "%s/psd%d.log", j->dir, i);
    snprintf(j->ready[i], sizeof j->ready[i], "%s/ready%d", j->dir, i);
    set_tf_config("ps", i);
    const char *argv[] = {
        ip_exe, "netns",  "exec", j->ns[HOST_A + i], getenv("PSD"), "--bind", bind, "--workers",
        "2",    "--mode", "sync", "--ready-file",    j->ready[i],   NULL};
    j->psd[i] = ps_test_spawn(argv, j->psd_log[i]);
    if (j->psd[i] <= 0) {
        snprintf(j->fail, sizeof j->fail, "cannot spawn psd %d", i);
        return -1;
    }
    char want[64];
    snprintf(want, sizeof want, "%s:%d", bind, PORT);
    char got[64];
    if (ps_test_wait_first_line(j->ready[i], j->psd[i], got, sizeof got, 10000)) {
        if (strcmp(got, want) == 0) return 0;
        snprintf(j->fail, sizeof j->fail, "psd %d listens on %s, not %s", i, got, want);
        return -1;
    }
    if (!ps_test_alive(j->psd[i])) {
        j->psd[i] = 0;
        snprintf(j->fail, sizeof j->fail, "psd %d exited before listening", i);
        return -1;
    }
    snprintf(j->fail, sizeof j->fail, "psd %d did not listen within 10 s", i);
    return -1;
}

/* Starts the chief (global index 0) in B or worker 1 in C. */
static int start_worker(netjob *j, int i) {
    snprintf(j->worker_log[i], sizeof j->worker_log[i], "%s/worker%d.log", j->dir, i);
    set_tf_config(i == 0 ? "chief" : "worker", 0);
    const char *argv[24] = {ip_exe,
                            "netns",
                            "exec",
                            j->ns[i ? HOST_C : HOST_B],
                            getenv("PSWORKER"),
                            "--epochs",
                            "1",
                            "--max-steps",
                            STR(STEPS),
                            "--max-test",
                            "2000",
                            "--data",
                            ps_test_data_dir(),
                            "--progress",
                            "plain",
                            "--timeout",
                            "20"};
    int n = 0;
    while (argv[n])
        n++;
    if (i == 0) { /* the chief writes the summary */
        argv[n++] = "--summary";
        argv[n++] = j->summary;
    }
    j->worker[i] = ps_test_spawn(argv, j->worker_log[i]);
    if (j->worker[i] > 0) return 0;
    snprintf(j->fail, sizeof j->fail, "cannot spawn worker %d", i);
    return -1;
}

/* Reads the chief's summary: steps and test accuracy. Returns 0 or -1. */
static int read_summary(const char *path, double *steps, double *acc) {
    static char buf[1 << 16];
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *o = cJSON_Parse(buf);
    if (!o) return -1;
    const cJSON *s = cJSON_GetObjectItem(o, "steps"), *a = cJSON_GetObjectItem(o, "test_accuracy");
    int ok = cJSON_IsNumber(s) && cJSON_IsNumber(a);
    if (ok) {
        *steps = s->valuedouble;
        *acc = a->valuedouble;
    }
    cJSON_Delete(o);
    return ok ? 0 : -1;
}

START_TEST(train_across_three_hosts) {
    static netjob job;
    netjob *j = &job;
    memset(j, 0, sizeof *j);
    for (int k = 0; k < N_NS; k++)
        snprintf(j->ns[k], sizeof j->ns[k], PREFIX "%d%c", (int)main_pid, ns_suffix[k]);
    char *d = ps_test_mkdtemp();
    ck_assert_ptr_nonnull(d);
    snprintf(j->dir, sizeof j->dir, "%s", d);
    free(d);
    if (snprintf(j->iplog, sizeof j->iplog, "%s/ip.log", j->dir) >= (int)sizeof j->iplog ||
        snprintf(j->summary, sizeof j->summary, "%s/summary.json", j->dir) >=
            (int)sizeof j->summary)
        ck_abort_msg("temp dir path too long: %s", j->dir);
    long long t0 = ps_test_now_ms(), t_setup = 0, t_train = 0;
    const char *a_addr = SUBNET "1", *b_addr = SUBNET "2";

    if (build_topology(j) != 0) goto done; /* j->fail says why */
    t_setup = ps_test_now_ms() - t0;
    for (int i = 0; i < 2; i++)
        if (start_psd(j, i) != 0) goto done;

    /* Proof that the traffic crosses the bridge: from C (nothing but lo and
     * eth0 on the bridge) both psds answer with their ZMTP greeting, and an
     * address outside 10.231.77.0/24 has no route; the host namespace gets no
     * greeting from A's address (no route, or only its default route). */
    int rc = probe_from_ns(j->ns[HOST_C], a_addr, PORT, 1, 5000);
    CHECK(j, rc == 0, "from C, psd 0 at %s:%d does not greet: %s", a_addr, PORT, strerror(rc));
    rc = probe_from_ns(j->ns[HOST_C], b_addr, PORT, 1, 5000);
    CHECK(j, rc == 0, "from C, psd 1 at %s:%d does not greet: %s", b_addr, PORT, strerror(rc));
    rc = probe_from_ns(j->ns[HOST_C], OUTSIDE, 80, 0, 0);
    CHECK(j, rc == ENETUNREACH, "from C, %s:80 is not unreachable: %s", OUTSIDE,
          rc ? strerror(rc) : "connected");
    int host_rc = tcp_probe(a_addr, PORT, 1, 1000);
    CHECK(j, host_rc != 0, "the host namespace got psd's greeting from %s:%d", a_addr, PORT);
    printf("netns: from C both psds greet and %s is unreachable; from the host, %s:%d: %s\n",
           OUTSIDE, a_addr, PORT, strerror(host_rc));

    long long t1 = ps_test_now_ms();
    for (int i = 0; i < 2; i++)
        if (start_worker(j, i) != 0) goto done;
    long long deadline = ps_test_now_ms() + 45000;
    for (int i = 0; i < 2; i++) {
        int left = (int)(deadline - ps_test_now_ms());
        int st = ps_test_wait(j->worker[i], left > 0 ? left : 1);
        j->worker[i] = 0;
        CHECK(j, st == 0, "worker %d %s", i,
              st < 0      ? "did not finish within 45 s"
              : st >= 128 ? "was killed"
                          : "failed");
    }
    t_train = ps_test_now_ms() - t1;
    double steps = 0, acc = 0;
    CHECK(j, read_summary(j->summary, &steps, &acc) == 0, "the chief wrote no readable summary");
    printf("netns: %.0f steps, test accuracy %.4f; topology %lld ms, training %lld ms\n", steps,
           acc, t_setup, t_train);
    CHECK(j, steps == STEPS, "summary steps %.0f != %d", steps, STEPS);
    CHECK(j, acc > 0.7, "test accuracy %.4f <= 0.7", acc);
    for (int i = 0; i < 2; i++) {
        kill(j->psd[i], SIGTERM);
        int st = ps_test_wait(j->psd[i], 10000);
        j->psd[i] = 0;
        CHECK(j, st == 0, "psd %d stopped with status %d", i, st);
        CHECK(j, ps_test_file_has(j->psd_log[i], "hello from worker 0"),
              "psd %d: no hello from worker 0", i);
        CHECK(j, ps_test_file_has(j->psd_log[i], "hello from worker 1"),
              "psd %d: no hello from worker 1", i);
    }

done:;
    long long t2 = ps_test_now_ms();
    for (int i = 0; i < 2; i++) {
        pid_t pids[2] = {j->worker[i], j->psd[i]};
        for (int k = 0; k < 2; k++) {
            if (pids[k] <= 0) continue;
            kill(pids[k], SIGKILL);
            ps_test_wait(pids[k], 5000);
        }
    }
    if (j->fail[0]) {
        for (int i = 0; i < 2; i++) {
            ps_test_dump(j->psd_log[i]);
            ps_test_dump(j->worker_log[i]);
        }
    }
    int left = 0;
    for (int k = 0; k < N_NS; k++)
        left += delete_ns(j->ns[k], j->iplog) != 0;
    printf("netns: teardown %lld ms, %d namespaces left\n", ps_test_now_ms() - t2, left);
    unsetenv("TF_CONFIG");
    ps_test_rmdir(j->dir);
    fflush(stdout);
    ck_assert_msg(j->fail[0] == 0, "%s", j->fail);
    ck_assert_msg(left == 0, "%d namespaces could not be deleted", left);
}
END_TEST

/* The TF_CONFIG of ring worker i: only the three workers, one per host. */
static void set_ring_tf_config(int index) {
    char tf[512];
    snprintf(tf, sizeof tf,
             "{\"cluster\": {\"worker\": [\"" SUBNET "1:%d\", \"" SUBNET "2:%d\", \"" SUBNET
             "3:%d\"]}, \"task\": {\"type\": \"worker\", \"index\": %d}}",
             RING_PORT, RING_PORT, RING_PORT, index);
    setenv("TF_CONFIG", tf, 1);
}

START_TEST(multi_worker_mirrored_across_three_hosts) {
    static netjob job;
    netjob *j = &job;
    memset(j, 0, sizeof *j);
    pid_t worker[RING_WORKERS] = {0};
    char log[RING_WORKERS][600] = {{0}};
    for (int k = 0; k < N_NS; k++)
        snprintf(j->ns[k], sizeof j->ns[k], PREFIX "%d%c", (int)main_pid, ns_suffix[k]);
    char *d = ps_test_mkdtemp();
    ck_assert_ptr_nonnull(d);
    snprintf(j->dir, sizeof j->dir, "%s", d);
    free(d);
    if (snprintf(j->iplog, sizeof j->iplog, "%s/ip.log", j->dir) >= (int)sizeof j->iplog ||
        snprintf(j->summary, sizeof j->summary, "%s/summary.json", j->dir) >=
            (int)sizeof j->summary)
        ck_abort_msg("temp dir path too long: %s", j->dir);
    long long t0 = ps_test_now_ms(), t_train = 0;

    if (build_topology(j) != 0) goto done; /* j->fail says why */
    /* worker i in host A + i at SUBNET (1 + i), all in one ring */
    for (int i = 0; i < RING_WORKERS; i++) {
        if (snprintf(log[i], sizeof log[i], "%.500s/ring%d.log", j->dir, i) >= (int)sizeof log[i])
            ck_abort_msg("temp dir path too long: %s", j->dir);
        set_ring_tf_config(i);
        const char *argv[24] = {ip_exe,
                                "netns",
                                "exec",
                                j->ns[HOST_A + i],
                                getenv("PSWORKER"),
                                "--strategy",
                                "multi_worker_mirrored",
                                "--epochs",
                                "1",
                                "--max-steps",
                                STR(STEPS),
                                "--max-test",
                                "2000",
                                "--data",
                                ps_test_data_dir(),
                                "--progress",
                                "plain",
                                "--worker-timeout",
                                "20000",
                                NULL};
        int n = 0;
        while (argv[n])
            n++;
        if (i == 0) {
            argv[n++] = "--summary";
            argv[n++] = j->summary;
        }
        worker[i] = ps_test_spawn(argv, log[i]);
        CHECK(j, worker[i] > 0, "cannot spawn ring worker %d", i);
    }
    long long deadline = ps_test_now_ms() + 90000;
    for (int i = 0; i < RING_WORKERS; i++) {
        int left = (int)(deadline - ps_test_now_ms());
        int st = ps_test_wait(worker[i], left > 0 ? left : 1);
        worker[i] = 0;
        CHECK(j, st == 0, "ring worker %d %s (status %d)", i,
              st < 0      ? "did not finish within 90 s"
              : st >= 128 ? "was killed"
                          : "failed",
              st);
    }
    t_train = ps_test_now_ms() - t0;
    double steps = 0, acc = 0;
    CHECK(j, read_summary(j->summary, &steps, &acc) == 0, "the chief wrote no readable summary");
    printf("netns ring: 3 hosts, %.0f steps, test accuracy %.4f; topology + training %lld ms\n",
           steps, acc, t_train);
    CHECK(j, steps == STEPS, "summary steps %.0f != %d", steps, STEPS);
    CHECK(j, acc > 0.7, "test accuracy %.4f <= 0.7", acc);
    /* the ring crossed the bridge: each worker connected to the next one's address
     * over TCP (a Unix socket cannot reach another namespace's), and the ring closed */
    for (int i = 0; i < RING_WORKERS; i++) {
        char want[128];
        int next = (i + 1) % RING_WORKERS;
        snprintf(want, sizeof want, "connected to rank %d (next) at " SUBNET "%d:%d over tcp", next,
                 HOST_A + next, RING_PORT);
        CHECK(j, ps_test_file_has(log[i], want), "ring worker %d: no \"%s\" in its log", i, want);
        CHECK(j, ps_test_file_has(log[i], "ring complete: 3 ranks"),
              "ring worker %d: the ring never closed", i);
    }

done:;
    for (int i = 0; i < RING_WORKERS; i++) {
        if (worker[i] <= 0) continue;
        kill(worker[i], SIGKILL);
        ps_test_wait(worker[i], 5000);
    }
    if (j->fail[0])
        for (int i = 0; i < RING_WORKERS; i++)
            ps_test_dump(log[i]);
    int left = 0;
    for (int k = 0; k < N_NS; k++)
        left += delete_ns(j->ns[k], j->iplog) != 0;
    unsetenv("TF_CONFIG");
    ps_test_rmdir(j->dir);
    fflush(stdout);
    ck_assert_msg(j->fail[0] == 0, "%s", j->fail);
    ck_assert_msg(left == 0, "%d namespaces could not be deleted", left);
}
END_TEST

/* ---- a replicated shard split by a network partition ---- */

/* Starts replica r of the one shard in host A (r = 0) or B (r = 1), its group
 * A|B; waits for its ready file (replica 0: it founded the group; replica 1:
 * it follows). Returns 0 or -1 (j->fail). */
static int start_replica(netjob *j, int r, const char *tag) {
    char bind[32], idx[4], peers[64], port[8];
    snprintf(bind, sizeof bind, SUBNET "%d", HOST_A + r);
    snprintf(idx, sizeof idx, "%d", r);
    snprintf(peers, sizeof peers, SUBNET "1:%d," SUBNET "2:%d", PORT, PORT);
    snprintf(port, sizeof port, "%d", PORT);
    snprintf(j->psd_log[r], sizeof j->psd_log[r], "%s/%s-psd%d.log", j->dir, tag, r);
    snprintf(j->ready[r], sizeof j->ready[r], "%s/%s-ready%d", j->dir, tag, r);
    unsetenv("TF_CONFIG");
    const char *argv[] = {ip_exe, "netns",      "exec", j->ns[HOST_A + r], getenv("PSD"), "--bind",
                          bind,   "--port",     port,   "--workers",       "2",           "--mode",
                          "sync", "--replicas", "2",    "--replica",       idx,           "--peers",
                          peers,  "--lease-ms", "400",  "--ready-file",    j->ready[r],   NULL};
    j->psd[r] = ps_test_spawn(argv, j->psd_log[r]);
    char got[64];
    if (j->psd[r] > 0 && ps_test_wait_first_line(j->ready[r], j->psd[r], got, sizeof got, 15000))
        return 0;
    snprintf(j->fail, sizeof j->fail, "replica %d did not become ready", r);
    return -1;
}

/* Two workers in C train the MLP on the group A|B for part_epochs() epochs; the
 * chief saves the model to DIR/TAG.pstf. With `split`, once the job runs, A and
 * B stop reaching each other (a blackhole route each way: packets dropped,
 * nothing reset) while C reaches both, and the link heals after PART_MS. */
/* 1,407 steps: the job outlasts the cut and the heal by seconds; under the
 * sanitizers a step is several times slower, and one epoch (469 steps) does */
static const char *part_epochs(void) {
    const char *san = getenv("PS_SANITIZED");
    return san && strcmp(san, "1") == 0 ? "1" : "3";
}
#define PART_MS 2000
static int partition_job(netjob *j, const char *tag, int split, float **params, size_t *n) {
    for (int r = 0; r < 2; r++)
        if (start_replica(j, r, tag) != 0) return -1;
    char ps[64], save[700];
    snprintf(ps, sizeof ps, SUBNET "1:%d|" SUBNET "2:%d", PORT, PORT);
    snprintf(save, sizeof save, "%s/%s.pstf", j->dir, tag);
    for (int i = 0; i < 2; i++) {
        char idx[4];
        snprintf(idx, sizeof idx, "%d", i);
        snprintf(j->worker_log[i], sizeof j->worker_log[i], "%s/%s-worker%d.log", j->dir, tag, i);
        const char *argv[32] = {ip_exe,
                                "netns",
                                "exec",
                                j->ns[HOST_C],
                                getenv("PSWORKER"),
                                "--ps",
                                ps,
                                "--index",
                                idx,
                                "--workers",
                                "2",
                                "--epochs",
                                part_epochs(),
                                "--max-test",
                                "500",
                                "--data",
                                ps_test_data_dir(),
                                "--progress",
                                "none",
                                "--retry-ms",
                                "500",
                                "--timeout",
                                "60",
                                NULL};
        if (i == 0) {
            int k = 0;
            while (argv[k])
                k++;
            argv[k++] = "--save";
            argv[k++] = save;
            argv[k] = NULL;
        }
        j->worker[i] = ps_test_spawn(argv, j->worker_log[i]);
    }
    if (split) {
        usleep(1500 * 1000); /* the job is training by then, for seconds more */
        char a[32], b[32];
        snprintf(a, sizeof a, SUBNET "1/32");
        snprintf(b, sizeof b, SUBNET "2/32");
        if (run_ip(j->iplog, j->fail, sizeof j->fail, "-n", j->ns[HOST_A], "route", "add",
                   "blackhole", b, NULL) ||
            run_ip(j->iplog, j->fail, sizeof j->fail, "-n", j->ns[HOST_B], "route", "add",
                   "blackhole", a, NULL))
            return -1;
        usleep(PART_MS * 1000);
        if (run_ip(j->iplog, j->fail, sizeof j->fail, "-n", j->ns[HOST_A], "route", "del",
                   "blackhole", b, NULL) ||
            run_ip(j->iplog, j->fail, sizeof j->fail, "-n", j->ns[HOST_B], "route", "del",
                   "blackhole", a, NULL))
            return -1;
    }
    for (int i = 0; i < 2; i++) {
        int st = ps_test_wait(j->worker[i], 90000);
        j->worker[i] = 0;
        if (st != 0) {
            snprintf(j->fail, sizeof j->fail, "%s: worker %d exited %d", tag, i, st);
            return -1;
        }
    }
    if (split && !ps_test_wait_file_has(j->psd_log[1], "took over as the primary", 5000, 0)) {
        snprintf(j->fail, sizeof j->fail, "%s: B did not take over", tag);
        return -1;
    }
    /* healed, the old primary hears of the new term from B and steps down */
    if (split && !ps_test_wait_file_has(j->psd_log[0], "no longer the primary", 10000, 0)) {
        snprintf(j->fail, sizeof j->fail, "%s: A did not step down after the heal", tag);
        return -1;
    }
    for (int r = 0; r < 2; r++) {
        kill(j->psd[r], SIGTERM);
        ps_test_wait(j->psd[r], 10000);
        j->psd[r] = 0;
    }
    *params = ps_test_read_saved(save, n);
    return 0;
}

/* The primary and its backup cut from each other while the workers reach both:
 * the primary acknowledges nothing once its lease lapses, the backup takes over
 * after 1.5 leases, the workers move to it, and after the heal the old primary
 * steps down. The job ends with the model of the same job without the cut, bit
 * for bit: nothing acknowledged was lost, nothing applied twice. */
START_TEST(replica_partition_between_primary_and_backup) {
    static netjob job;
    netjob *j = &job;
    memset(j, 0, sizeof *j);
    for (int k = 0; k < N_NS; k++)
        snprintf(j->ns[k], sizeof j->ns[k], PREFIX "%d%c", (int)main_pid, ns_suffix[k]);
    char *d = ps_test_mkdtemp();
    ck_assert_ptr_nonnull(d);
    snprintf(j->dir, sizeof j->dir, "%.400s", d);
    free(d);
    snprintf(j->iplog, sizeof j->iplog, "%.400s/ip.log", j->dir);
    float *whole = NULL, *cut = NULL;
    size_t n1 = 0, n2 = 0;
    if (build_topology(j) != 0) goto done;
    if (partition_job(j, "whole", 0, &whole, &n1) != 0) goto done;
    if (partition_job(j, "cut", 1, &cut, &n2) != 0) goto done;
    CHECK(j, n1 == n2 && n1 > 0, "the saved models differ in size (%zu, %zu)", n1, n2);
    size_t differ = 0;
    for (size_t i = 0; i < n1; i++)
        differ += memcmp(&whole[i], &cut[i], sizeof(float)) != 0;
    CHECK(j, differ == 0, "%zu of %zu values differ after the partition", differ, n1);
    printf("netns: partition: B took over, A stepped down after the heal, %zu values equal\n", n1);
done:
    for (int r = 0; r < 2; r++) {
        pid_t pids[2] = {j->worker[r], j->psd[r]};
        for (int k = 0; k < 2; k++)
            if (pids[k] > 0) {
                kill(pids[k], SIGKILL);
                ps_test_wait(pids[k], 5000);
            }
    }
    if (j->fail[0])
        for (int r = 0; r < 2; r++) {
            ps_test_dump(j->psd_log[r]);
            ps_test_dump(j->worker_log[r]);
        }
    free(whole);
    free(cut);
    int left = 0;
    for (int k = 0; k < N_NS; k++)
        left += delete_ns(j->ns[k], j->iplog) != 0;
    ps_test_rmdir(j->dir);
    fflush(stdout);
    ck_assert_msg(j->fail[0] == 0, "%s", j->fail);
    ck_assert_msg(left == 0, "%d namespaces could not be deleted", left);
}
END_TEST

/* Can namespaces, veth pairs and a bridge be made here? Returns 0, or -1
 * with the reason in why. */
static int probe(char *why, size_t n) {
    char *d = ps_test_mkdtemp();
    if (!d) {
        snprintf(why, n, "no temp dir");
        return -1;
    }
    char log[4200], ns[64], err[700];
    snprintf(log, sizeof log, "%s/ip.log", d);
    snprintf(ns, sizeof ns, PREFIX "%dp", (int)main_pid);
    int rc = run_ip(log, err, sizeof err, "netns", "add", ns, NULL);
    if (rc == 0)
        rc = run_ip(log, err, sizeof err, "-n", ns, "link", "add", "v0", "type", "veth", "peer",
                    "name", "v1", NULL);
    if (rc == 0)
        rc = run_ip(log, err, sizeof err, "-n", ns, "link", "add", "br0", "type", "bridge", NULL);
    if (rc != 0) {
        const char *hint = geteuid() != 0                         ? " (not root)"
                           : strstr(err, "not permitted") != NULL ? " (no CAP_SYS_ADMIN)"
                                                                  : "";
        snprintf(why, n, "%s%s", err, hint);
    }
    delete_ns(ns, log);
    ps_test_rmdir(d);
    free(d);
    return rc;
}

int main(void) {
    main_pid = getpid();
    if (!getenv("PSD") || !getenv("PSWORKER")) {
        printf("netns test skipped: PSD or PSWORKER is not set\n");
        return 77;
    }
    ip_exe = find_ip();
    if (!ip_exe) {
        printf("netns test skipped: no 'ip' (iproute2) in /usr/sbin, /sbin, /usr/bin or /bin\n");
        return 77;
    }
    delete_namespaces_of(0); /* left by a run that was killed */
    char why[1024];
    if (probe(why, sizeof why) != 0) {
        printf("netns test skipped: %s\n", why);
        return 77;
    }
    Suite *s = suite_create("netns");
    TCase *tc = tcase_create("hosts");
    tcase_set_timeout(tc, 150);
    tcase_add_unchecked_fixture(tc, NULL, remove_our_namespaces);
    tcase_add_test(tc, train_across_three_hosts);
    tcase_add_test(tc, multi_worker_mirrored_across_three_hosts);
    tcase_add_test(tc, replica_partition_between_primary_and_backup);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
