/* Saved models for tests (see saved.h). */
#include "saved.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"
#include "tensorfile.h"

float *ps_test_read_saved(const char *path, size_t *n) {
    ps_tf_file f;
    char why[300];
    ck_assert_msg(ps_tf_read(path, &f, why, sizeof why) == PS_OK, "%s: %s", path, why);
    size_t total = 0;
    for (size_t i = 0; i < f.n; i++)
        total += f.t[i].numel;
    float *p = malloc((total ? total : 1) * sizeof *p);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0, at = 0; i < f.n; at += f.t[i].numel, i++)
        memcpy(p + at, f.t[i].data, f.t[i].numel * sizeof *p);
    ps_tf_file_free(&f);
    *n = total;
    return p;
}
