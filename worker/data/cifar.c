/* CIFAR-10 binary files: strict record parsing, planar RGB to NHWC conversion and
 * loading the training batches (1..k, no gaps) or the test batch from a directory. */
#include "cifar.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps_error.h"

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Writes one record's planar bytes (R plane, G plane, B plane) to x[32][32][3] / 255. */
static void record_to_nhwc(float *x, const uint8_t *planes) {
    for (size_t p = 0; p < PS_CIFAR_PIXELS; p++)
        for (size_t c = 0; c < PS_CIFAR_CHANNELS; c++)
            x[p * PS_CIFAR_CHANNELS + c] = (float)planes[c * PS_CIFAR_PIXELS + p] / 255.0f;
}

/* Returns PS_OK, PS_EFORMAT, PS_EINVAL or PS_ENOMEM; on success out owns the grown
 * x and y, on error it is as it was. */
int ps_cifar_parse(const uint8_t *buf, size_t len, const char *name, size_t max_add,
                   ps_dataset *out, char *err, size_t errlen) {
    if (!name) name = "CIFAR-10 data";
    if (out->n > 0 && (out->dim != PS_CIFAR_DIM || !out->x || !out->y)) {
        set_err(err, errlen, "%s: cannot append CIFAR-10 records to a dataset of dim %zu", name,
                out->dim);
        return PS_EINVAL;
    }
    if (len == 0) {
        set_err(err, errlen, "%s: empty file (CIFAR-10 records are %d bytes)", name,
                PS_CIFAR_RECORD);
        return PS_EFORMAT;
    }
    size_t n = len / PS_CIFAR_RECORD, rest = len % PS_CIFAR_RECORD;
    if (rest != 0) {
        set_err(err, errlen,
                "%s: truncated: %zu bytes is not a multiple of the %d-byte record "
                "(record %zu has only %zu bytes)",
                name, len, PS_CIFAR_RECORD, n, rest);
        return PS_EFORMAT;
    }
    for (size_t r = 0; r < n; r++) {
        uint8_t label = buf[r * PS_CIFAR_RECORD];
        if (label >= PS_CIFAR_CLASSES) {
            set_err(err, errlen, "%s: record %zu (byte offset %zu): label %u is not in 0..%d", name,
                    r, r * PS_CIFAR_RECORD, label, PS_CIFAR_CLASSES - 1);
            return PS_EFORMAT;
        }
    }
    size_t add = max_add > 0 && max_add < n ? max_add : n;
    size_t total, floats, bytes;
    if (__builtin_add_overflow(out->n, add, &total) ||
        __builtin_mul_overflow(total, (size_t)PS_CIFAR_DIM, &floats) ||
        __builtin_mul_overflow(floats, sizeof *out->x, &bytes)) {
        set_err(err, errlen, "%s: too many samples (%zu + %zu)", name, out->n, add);
        return PS_ENOMEM;
    }
    float *x = realloc(out->x, bytes);
    if (!x) {
        set_err(err, errlen, "%s: out of memory for %zu samples", name, total);
        return PS_ENOMEM;
    }
    out->x = x; /* the old block is gone: keep the new one even if y fails */
    int32_t *y = realloc(out->y, total * sizeof *y);
    if (!y) {
        set_err(err, errlen, "%s: out of memory for %zu samples", name, total);
        return PS_ENOMEM;
    }
    out->y = y;
    for (size_t r = 0; r < add; r++) {
        const uint8_t *rec = buf + r * PS_CIFAR_RECORD;
        out->y[out->n + r] = rec[0];
        record_to_nhwc(out->x + (out->n + r) * PS_CIFAR_DIM, rec + 1);
    }
    out->n = total;
    out->dim = PS_CIFAR_DIM;
    out->h = out->w = PS_CIFAR_SIDE;
    out->c = PS_CIFAR_CHANNELS;
    out->num_classes = PS_CIFAR_CLASSES;
    return PS_OK;
}

/* Writes dir/base.gz to path if it exists, else dir/base if it exists. Returns 1
 * when found, 0 when neither exists, -1 when the path does not fit. */
static int find_file(char *path, size_t size, const char *dir, const char *base) {
    int k = snprintf(path, size, "%s/%s.gz", dir, base);
    if (k < 0 || (size_t)k >= size) return -1;
    if (access(path, F_OK) == 0) return 1;
    snprintf(path, size, "%s/%s", dir, base);
    return access(path, F_OK) == 0;
}

/* Reads path and appends its records (at most max_add, 0: all) to out. */
static int load_file(const char *path, size_t max_add, ps_dataset *out, char *err, size_t errlen) {
    uint8_t *buf;
    size_t len;
    int rc = ps_read_maybe_gz(path, &buf, &len, err, errlen);
    if (rc != PS_OK) return rc;
    rc = ps_cifar_parse(buf, len, path, max_add, out, err, errlen);
    free(buf);
    return rc;
}

/* Returns PS_OK (out owns x and y) or an error with *out zeroed. */
int ps_dataset_load_cifar10_dir(const char *dir, int train, size_t max_n, ps_dataset *out,
                                char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    char paths[PS_CIFAR_TRAIN_BATCHES][PATH_MAX];
    int nfiles = 0;
    if (train) {
        /* Find every batch first: a gap is an error even when max_n would stop early. */
        int first_missing = 0;
        for (int b = 1; b <= PS_CIFAR_TRAIN_BATCHES; b++) {
            char base[32];
            snprintf(base, sizeof base, "data_batch_%d.bin", b);
            int found = find_file(paths[nfiles], sizeof paths[nfiles], dir, base);
            if (found < 0) {
                set_err(err, errlen, "dataset path too long: %s/%s.gz", dir, base);
                return PS_EINVAL;
            }
            if (!found) {
                if (!first_missing) first_missing = b;
                continue;
            }
            if (first_missing == 1) {
                set_err(err, errlen,
                        "no data_batch_1.bin(.gz) in %s (but %s exists): CIFAR-10 training "
                        "needs data_batch_1..k",
                        dir, paths[nfiles]);
                return PS_EIO;
            }
            if (first_missing) {
                set_err(err, errlen,
                        "%s: CIFAR-10 training batches must be data_batch_1..k with no gap, "
                        "but data_batch_%d.bin(.gz) is missing",
                        paths[nfiles], first_missing);
                return PS_EFORMAT;
            }
            nfiles++;
        }
        if (nfiles == 0) {
            set_err(err, errlen,
                    "no data_batch_1.bin(.gz) in %s: CIFAR-10 training needs at least "
                    "data_batch_1",
                    dir);
            return PS_EIO;
        }
    } else {
        int found = find_file(paths[0], sizeof paths[0], dir, "test_batch.bin");
        if (found < 0) {
            set_err(err, errlen, "dataset path too long: %s/test_batch.bin.gz", dir);
            return PS_EINVAL;
        }
        if (!found) {
            set_err(err, errlen, "no test_batch.bin(.gz) in %s", dir);
            return PS_EIO;
        }
        nfiles = 1;
    }
    for (int i = 0; i < nfiles; i++) {
        if (max_n > 0 && out->n >= max_n) break;
        int rc = load_file(paths[i], max_n > 0 ? max_n - out->n : 0, out, err, errlen);
        if (rc != PS_OK) {
            ps_dataset_free(out);
            return rc;
        }
    }
    return PS_OK;
}

/* Returns true when dir holds a first training batch or a test batch, raw or gzip. */
bool ps_cifar10_dir_detect(const char *dir) {
    static const char *const bases[] = {"data_batch_1.bin", "test_batch.bin"};
    char path[PATH_MAX];
    for (size_t i = 0; i < sizeof bases / sizeof bases[0]; i++)
        if (find_file(path, sizeof path, dir, bases[i]) == 1) return true;
    return false;
}
