/* The one test kit every Check test includes: clock, naps and wait-until with a
 * deadline, file text, seeded random data, tolerant comparison, temp directories,
 * and the location of the source tree and dataset. */
#ifndef PS_TESTUTIL_H
#define PS_TESTUTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Deterministic xorshift generator: same seed, same numbers, on every machine. */
typedef struct {
    uint64_t s;
} ps_test_rng;
void ps_test_rng_seed(ps_test_rng *r, uint64_t seed);
/* Uniform float in [lo, hi). */
float ps_test_rng_uniform(ps_test_rng *r, float lo, float hi);
/* Fills x[0..n) with uniform floats in [lo, hi). */
void ps_test_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi);
/* Returns the index of the first i with |a-b| > atol + rtol*|b|, or -1 if all are close. */
long ps_test_first_mismatch(const float *a, const float *b, size_t n, float atol, float rtol);
/* Makes a fresh directory under $TMPDIR (or /tmp); returns a malloc'd path. */
char *ps_test_mkdtemp(void);
/* Removes a directory made by ps_test_mkdtemp and everything in it. */
void ps_test_rmdir(const char *dir);
/* Makes a fresh directory and points $TMPDIR into it, so that what the tests make
 * (ps_test_mkdtemp, psd's and psctl's dirs) lands there; returns it (the kit owns it).
 * ps_test_pop_tmpdir removes it and restores $TMPDIR. One at a time. */
const char *ps_test_push_tmpdir(void);
void ps_test_pop_tmpdir(void);
/* A TCP port on 127.0.0.1 that was free a moment ago (bound, then released). */
int ps_test_free_port(void);
/* $PS_SOURCE_ROOT, or "." when unset. */
const char *ps_test_source_root(void);
/* Directory of the Fashion-MNIST IDX files ($PS_DATA_DIR or the Debian package path). */
const char *ps_test_data_dir(void);
/* Writes n bytes to path; returns 0 on success. */
int ps_test_write_file(const char *path, const void *data, size_t n);
/* Writes text as the executable file dir/name and puts its path in path[0..n). */
void ps_test_write_script(char *path, size_t n, const char *dir, const char *name,
                          const char *text);

/* Milliseconds on the monotonic clock. */
long long ps_test_now_ms(void);
/* Sleeps ms milliseconds. Only for pacing a poll loop or for a pause that is the
 * scenario itself; to wait for something, use ps_test_wait_until. */
void ps_test_nap_ms(int ms);
/* Calls cond(ctx) every pace_ms until it returns non-zero (returns 1) or timeout_ms
 * passes (returns 0; cond is called once more at the deadline). */
int ps_test_wait_until(int (*cond)(void *ctx), void *ctx, int timeout_ms, int pace_ms);

/* The whole file at path, NUL-terminated (malloc'd, caller frees; *n its length when n
 * is non-NULL), or NULL when it cannot be read. */
char *ps_test_slurp(const char *path, size_t *n);
/* The text of the file at path ("" when it cannot be read). The result stays valid
 * until 8 more calls (a ring of buffers the kit owns), so several may be compared. */
const char *ps_test_text(const char *path);
/* 1 when the file at path contains text, else 0. */
int ps_test_file_has(const char *path, const char *text);
/* Polls path until it contains text (1), timeout_ms passes or pid (when > 0) is no
 * longer alive (0). */
int ps_test_wait_file_has(const char *path, const char *text, int timeout_ms, pid_t pid);

/* Runs a Check suite (and frees it); returns the process exit status: 0 when
 * every test passed, 1 otherwise. */
int ps_test_run_suite(Suite *s);
/* The main of a test that needs programs named by environment variables: 77 (skipped)
 * when one of vars (names separated by spaces, e.g. "PSD PSWORKER") is unset, else runs
 * the suite make_suite makes as ps_test_run_suite does. */
int ps_test_main_needing(const char *vars, Suite *(*make_suite)(void));

#endif
