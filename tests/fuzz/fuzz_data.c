/* libFuzzer target for the data readers' entry points (worker/data/): the
 * first byte of an input picks the reader, the rest is the file.
 *   0 TFRecord framing (read to the end)   1 tf.train.Example
 *   2 JPEG/PNG, channels from byte 1       3 .npy
 *   4 CSV, 5 TSV (rows of up to 64 numbers)   6 .npz (in memory)
 * The readers that open a path get /proc/self/fd/N of a memfd that holds
 * the input. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "csv.h"
#include "example.h"
#include "image.h"
#include "npy.h"
#include "npz.h"
#include "tfrecord.h"

static int memfd = -1;
static char mem_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    memfd = memfd_create("fuzz_data", MFD_CLOEXEC);
    if (memfd < 0) abort();
    snprintf(mem_path, sizeof mem_path, "/proc/self/fd/%d", memfd);
    return 0;
}

static void as_file(const uint8_t *d, size_t n) {
    if (ftruncate(memfd, 0) != 0 || (n && pwrite(memfd, d, n, 0) != (ssize_t)n)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t *d = data + 1;
    size_t n = size - 1;
    char err[512];
    switch (data[0] % 7) {
    case 0: {
        as_file(d, n);
        ps_tfrecord_reader r;
        if (ps_tfrecord_open(&r, mem_path, 1 << 16, err, sizeof err) != 0) break;
        const uint8_t *rec;
        size_t len;
        while (ps_tfrecord_next(&r, &rec, &len, err, sizeof err) == 0) {
            ps_example *e;
            if (ps_example_parse(rec, len, &e, err, sizeof err) == 0) ps_example_free(e);
        }
        ps_tfrecord_close(&r);
        break;
    }
    case 1: {
        ps_example *e;
        if (ps_example_parse(d, n, &e, err, sizeof err) == 0) {
            ps_feature f = ps_example_feature(e, "image");
            for (size_t i = 0; f.kind == PS_FEATURE_BYTES && i < f.n; i++) {
                const uint8_t *b;
                size_t bl;
                ps_feature_bytes(&f, i, &b, &bl);
            }
            ps_example_free(e);
        }
        break;
    }
    case 2: {
        if (n < 1) break;
        static const int ch[4] = {0, 1, 3, 2};
        ps_image im;
        if (ps_image_decode(d + 1, n - 1, ch[d[0] % 4], 1 << 20, d[0] & 4 ? PS_IMAGE_DCT_ACCURATE : 0,
                            &im, err, sizeof err) == 0)
            ps_image_free(&im);
        break;
    }
    case 3: {
        uint8_t *copy = malloc(n ? n : 1); /* exactly n bytes, so ASan sees overreads */
        if (!copy) break;
        for (size_t i = 0; i < n; i++)
            copy[i] = d[i];
        ps_npy a;
        if (ps_npy_parse(copy, n, &a, err, sizeof err) == 0)
            for (size_t i = 0; i < a.count && i < 64; i++)
                (void)ps_npy_get(&a, i);
        free(copy);
        break;
    }
    case 6: {
        uint8_t *copy = malloc(n ? n : 1); /* exactly n bytes, so ASan sees overreads */
        if (!copy) break;
        for (size_t i = 0; i < n; i++)
            copy[i] = d[i];
        ps_npz z;
        if (ps_npz_parse(copy, n, &z, err, sizeof err) == 0) {
            for (size_t m = 0; m < z.n; m++)
                for (size_t i = 0; i < z.members[m].arr.count && i < 64; i++)
                    (void)ps_npy_get(&z.members[m].arr, i);
            if (z.n) (void)ps_npz_get(&z, z.members[z.n - 1].name);
            ps_npz_close(&z);
        }
        free(copy);
        break;
    }
    default: {
        as_file(d, n);
        ps_csv_reader r;
        if (ps_csv_open(&r, mem_path, data[0] % 7 == 4 ? ',' : '\t', err, sizeof err) != 0) break;
        double vals[64];
        if (r.cols <= 64)
            while (ps_csv_next(&r, vals, err, sizeof err) == 0)
                ;
        ps_csv_close(&r);
        break;
    }
    }
    return 0;
}
