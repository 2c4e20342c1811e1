/* The test kit shared by every Check test (see testutil.h). */
#include "testutil.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void ps_test_rng_seed(ps_test_rng *r, uint64_t seed) {
    r->s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    if (r->s == 0) r->s = 1;
}

static uint64_t next_u64(ps_test_rng *r) {
    uint64_t x = r->s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    r->s = x;
    return x;
}

float ps_test_rng_uniform(ps_test_rng *r, float lo, float hi) {
    float u = (float)(next_u64(r) >> 40) / (float)(1u << 24);
    return lo + (hi - lo) * u;
}

void ps_test_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi) {
    ps_test_rng r;
    ps_test_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++)
        x[i] = ps_test_rng_uniform(&r, lo, hi);
}

long ps_test_first_mismatch(const float *a, const float *b, size_t n, float atol, float rtol) {
    for (size_t i = 0; i < n; i++) {
        if (!(fabsf(a[i] - b[i]) <= atol + rtol * fabsf(b[i]))) return (long)i;
    }
    return -1;
}

char *ps_test_mkdtemp(void) {
    const char *base = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/pstest.XXXXXX", base && *base ? base : "/tmp");
    char *d = mkdtemp(tmpl);
    return d ? strdup(d) : NULL;
}

void ps_test_rmdir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char path[4096];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (unlink(path) != 0 && errno == EISDIR) ps_test_rmdir(path); /* Linux: EISDIR */
        }
        closedir(d);
    }
    rmdir(dir);
}

static char *pushed_dir, *saved_tmpdir;

const char *ps_test_push_tmpdir(void) {
    const char *t = getenv("TMPDIR");
    saved_tmpdir = t ? strdup(t) : NULL;
    pushed_dir = ps_test_mkdtemp();
    ck_assert_ptr_nonnull(pushed_dir);
    setenv("TMPDIR", pushed_dir, 1);
    return pushed_dir;
}

void ps_test_pop_tmpdir(void) {
    if (pushed_dir) ps_test_rmdir(pushed_dir);
    free(pushed_dir);
    pushed_dir = NULL;
    if (saved_tmpdir)
        setenv("TMPDIR", saved_tmpdir, 1);
    else
        unsetenv("TMPDIR");
    free(saved_tmpdir);
    saved_tmpdir = NULL;
}

int ps_test_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

const char *ps_test_source_root(void) {
    const char *r = getenv("PS_SOURCE_ROOT");
    return r && *r ? r : ".";
}

const char *ps_test_data_dir(void) {
    const char *d = getenv("PS_DATA_DIR");
    return d && *d ? d : "/usr/share/datasets/fashion-mnist";
}

int ps_test_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    int rc = fclose(f);
    return (w == n && rc == 0) ? 0 : -1;
}

long long ps_test_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void ps_test_nap_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int ps_test_wait_until(int (*cond)(void *ctx), void *ctx, int timeout_ms, int pace_ms) {
    long long deadline = ps_test_now_ms() + timeout_ms;
    for (;;) {
        if (cond(ctx)) return 1;
        if (ps_test_now_ms() > deadline) return 0;
        ps_test_nap_ms(pace_ms); /* pacing between polls */
    }
}

char *ps_test_slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0, r;
    char *buf = malloc(cap);
    while (buf && (r = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += r;
        if (cap - len - 1 == 0) {
            char *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf) return NULL;
    buf[len] = 0;
    if (n) *n = len;
    return buf;
}

const char *ps_test_text(const char *path) {
    static char *ring[8];
    static unsigned next;
    unsigned k = next++ % 8;
    free(ring[k]);
    ring[k] = ps_test_slurp(path, NULL);
    return ring[k] ? ring[k] : "";
}

/* 1 while pid (our child) has not exited; as ps_test_alive in proc.h. */
static int pid_running(pid_t pid) {
    int st;
    return waitpid(pid, &st, WNOHANG) == 0;
}

int ps_test_file_has(const char *path, const char *text) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, text) != NULL;
    fclose(f);
    return found;
}

int ps_test_wait_file_has(const char *path, const char *text, int timeout_ms, pid_t pid) {
    long long deadline = ps_test_now_ms() + timeout_ms;
    for (;;) {
        if (ps_test_file_has(path, text)) return 1;
        if (ps_test_now_ms() > deadline || (pid > 0 && !pid_running(pid))) return 0;
        ps_test_nap_ms(20);
    }
}

void ps_test_write_script(char *path, size_t n, const char *dir, const char *name,
                          const char *text) {
    snprintf(path, n, "%s/%s", dir, name);
    ck_assert_int_eq(ps_test_write_file(path, text, strlen(text)), 0);
    ck_assert_int_eq(chmod(path, 0755), 0);
}

int ps_test_run_suite(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}

int ps_test_main_needing(const char *vars, Suite *(*make_suite)(void)) {
    char name[64];
    for (const char *p = vars; *p;) {
        size_t n = strcspn(p, " ");
        snprintf(name, sizeof name, "%.*s", (int)n, p);
        if (n && !getenv(name)) {
            fprintf(stderr, "%s is not set\n", name);
            return 77;
        }
        p += n + (p[n] == ' ');
    }
    return ps_test_run_suite(make_suite());
}
