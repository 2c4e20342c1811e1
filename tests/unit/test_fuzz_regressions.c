/* The fuzz harness (tests/fuzz/harness.c) in the normal suite: every seed of
 * tests/fuzz/corpus/ and every reproducer in tests/fuzz/regressions/ goes
 * through psd's dispatch against real in-memory shards, which must keep
 * serving; ok-* seeds get no Error reply, bad-* seeds at least one. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../fuzz/harness.h"
#include "ps_error.h"
#include "testutil.h"

typedef struct {
    char name[256];
    uint8_t *data;
    size_t len;
} input_file;

static int by_name(const void *a, const void *b) {
    return strcmp(((const input_file *)a)->name, ((const input_file *)b)->name);
}

/* Reads every file of $PS_SOURCE_ROOT/tests/fuzz/<sub>, sorted by name.
 * Returns how many (0 when the directory is missing); *out is malloc'd. */
static size_t read_dir(const char *sub, input_file **out) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/%s", ps_test_source_root(), sub);
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return 0;
    size_t n = 0, cap = 0;
    input_file *files = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, "README.md") == 0) continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            files = realloc(files, cap * sizeof *files);
            ck_assert_ptr_nonnull(files);
        }
        input_file *in = &files[n++];
        snprintf(in->name, sizeof in->name, "%s", e->d_name);
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        in->len = len > 0 ? (size_t)len : 0;
        in->data = malloc(in->len ? in->len : 1);
        ck_assert_ptr_nonnull(in->data);
        ck_assert_uint_eq(fread(in->data, 1, in->len, f), in->len);
        fclose(f);
    }
    closedir(d);
    if (n) qsort(files, n, sizeof *files, by_name);
    *out = files;
    return n;
}

static void free_files(input_file *files, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(files[i].data);
    free(files);
}

static ps_fuzz *open_harness(void) {
    ps_fuzz *fz = calloc(1, sizeof *fz);
    ck_assert_ptr_nonnull(fz);
    char err[512] = "";
    int rc = ps_fuzz_open(fz, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "harness: %s", err);
    return fz;
}

static void assert_all_serving(ps_fuzz *fz, const char *after) {
    for (unsigned i = 0; i < PS_FUZZ_SHARDS; i++)
        ck_assert_msg(ps_fuzz_ping(fz, i) == PS_OK, "shard %u stopped answering after %s", i,
                      after);
}

static void close_harness(ps_fuzz *fz) {
    ps_fuzz_close(fz);
    free(fz);
}

/* Each seed from a fresh shard: ok-* gets no Error reply, bad-* at least one. */
START_TEST(seed_corpus_from_fresh_shards) {
    input_file *files;
    size_t n = read_dir("corpus", &files);
    ck_assert_msg(n >= 20, "only %zu seeds in tests/fuzz/corpus", n);
    ps_fuzz *fz = open_harness();
    for (size_t i = 0; i < n; i++) {
        const input_file *in = &files[i];
        ck_assert_uint_gt(in->len, 0);
        char err[512] = "";
        unsigned shard = in->data[0] & 3u;
        ck_assert_msg(ps_fuzz_reset(fz, shard, err, sizeof err) == PS_OK, "reset: %s", err);
        fz->replies = fz->error_replies = 0;
        ps_fuzz_input(fz, in->data, in->len);
        if (strncmp(in->name, "ok-", 3) == 0)
            ck_assert_msg(fz->error_replies == 0, "%s: %llu Error replies", in->name,
                          (unsigned long long)fz->error_replies);
        else if (strncmp(in->name, "bad-", 4) == 0)
            ck_assert_msg(fz->error_replies > 0, "%s: no Error reply", in->name);
        assert_all_serving(fz, in->name);
    }
    close_harness(fz);
    free_files(files, n);
}
END_TEST

/* The whole corpus twice over without resets, as the fuzzer runs it: state
 * (variables, versions, deferred pulls, a Shutdown) carries over. */
START_TEST(seed_corpus_stateful) {
    input_file *files;
    size_t n = read_dir("corpus", &files);
    ps_fuzz *fz = open_harness();
    for (int round = 0; round < 2; round++)
        for (size_t i = 0; i < n; i++)
            ps_fuzz_input(fz, files[i].data, files[i].len);
    assert_all_serving(fz, "the corpus twice");
    close_harness(fz);
    free_files(files, n);
}
END_TEST

/* Crashes, leaks and timeouts the fuzzer found, each from a fresh shard and
 * then once more on the shard it left. */
START_TEST(fuzzer_reproducers) {
    input_file *files;
    size_t n = read_dir("regressions", &files);
    ps_fuzz *fz = open_harness();
    for (size_t i = 0; i < n; i++) {
        char err[512] = "";
        if (files[i].len == 0) continue;
        unsigned shard = files[i].data[0] & 3u;
        ck_assert_msg(ps_fuzz_reset(fz, shard, err, sizeof err) == PS_OK, "reset: %s", err);
        ps_fuzz_input(fz, files[i].data, files[i].len);
        ps_fuzz_input(fz, files[i].data, files[i].len);
        assert_all_serving(fz, files[i].name);
    }
    close_harness(fz);
    free_files(files, n);
}
END_TEST

/* The harness's own framing at its edges: empty input, a length past the
 * end, more records than a message holds, more messages than an input holds. */
START_TEST(harness_framing_edges) {
    ps_fuzz *fz = open_harness();
    static const uint8_t lone_flag[] = {0};
    static const uint8_t odd_byte[] = {1, 0x7f};
    static const uint8_t past_end[] = {2, 0xff, 0x7f, 0x08, 0x01};
    uint8_t many[1 + 40 * 2];
    many[0] = 3;
    for (size_t i = 1; i < sizeof many; i += 2) { /* 40 empty records: 5 messages of 8 */
        many[i] = 0;
        many[i + 1] = 0;
    }
    uint8_t msgs[1 + 20 * 3];
    msgs[0] = 0;
    for (size_t i = 1; i < sizeof msgs; i += 3) { /* 20 one-byte headers, each its own message */
        msgs[i] = 1;
        msgs[i + 1] = 0x80;
        msgs[i + 2] = 0x08;
    }
    ps_fuzz_input(fz, NULL, 0);
    ps_fuzz_input(fz, lone_flag, sizeof lone_flag);
    ps_fuzz_input(fz, odd_byte, sizeof odd_byte);
    ps_fuzz_input(fz, past_end, sizeof past_end);
    fz->error_replies = 0;
    ps_fuzz_input(fz, many, sizeof many);
    ck_assert_uint_eq(fz->error_replies, 5);
    fz->error_replies = 0;
    ps_fuzz_input(fz, msgs, sizeof msgs);
    ck_assert_uint_eq(fz->error_replies, PS_FUZZ_MAX_MESSAGES);
    assert_all_serving(fz, "framing edge cases");
    close_harness(fz);
}
END_TEST

static Suite *fuzz_regressions_suite(void) {
    Suite *s = suite_create("fuzz_regressions");
    TCase *tc = tcase_create("dispatch");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, seed_corpus_from_fresh_shards);
    tcase_add_test(tc, seed_corpus_stateful);
    tcase_add_test(tc, fuzzer_reproducers);
    tcase_add_test(tc, harness_framing_edges);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(fuzz_regressions_suite());
}
