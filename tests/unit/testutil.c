/* Helpers shared by the Check tests (see testutil.h). */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int ps_test_run_suite(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
