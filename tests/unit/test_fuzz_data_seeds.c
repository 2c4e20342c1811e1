/* The data readers' fuzz target (tests/fuzz/fuzz_data.c) run over its seed
 * corpus in the normal and ASan suites, without libFuzzer: every seed goes
 * through its reader's entry point once, so a reader that crashes or (under
 * ASan) touches memory it must not on a seed fails here too; the
 * regressions_data directory, once the fuzzer has found something, is
 * replayed the same way. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t run_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        FILE *f = fopen(p, "rb");
        ck_assert_msg(f != NULL, "%s", p);
        uint8_t *buf = malloc(1 << 20);
        size_t len = fread(buf, 1, 1 << 20, f);
        fclose(f);
        uint8_t *exact = malloc(len ? len : 1); /* exactly len bytes, for ASan */
        memcpy(exact, buf, len);
        LLVMFuzzerTestOneInput(exact, len);
        free(exact);
        free(buf);
        n++;
    }
    closedir(d);
    return n;
}

START_TEST(seeds) {
    int argc = 0;
    char **argv = NULL;
    LLVMFuzzerInitialize(&argc, &argv);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus_data", getenv("PS_SOURCE_ROOT"));
    ck_assert_uint_ge(run_dir(dir), 10);
    snprintf(dir, sizeof dir, "%s/tests/fuzz/regressions_data", getenv("PS_SOURCE_ROOT"));
    run_dir(dir);
}
END_TEST

static Suite *seeds_suite(void) {
    Suite *s = suite_create("fuzz_data_seeds");
    TCase *tc = tcase_create("seeds");
    tcase_add_test(tc, seeds);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(seeds_suite());
}
