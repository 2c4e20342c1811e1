/* CIFAR-10 in its binary distribution (data_batch_1..5.bin, test_batch.bin, raw
 * or gzip): records of 1 label byte + 3072 planar RGB bytes, loaded as NHWC floats. */
#ifndef PS_CIFAR_H
#define PS_CIFAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data.h"

#define PS_CIFAR_SIDE 32
#define PS_CIFAR_CHANNELS 3
#define PS_CIFAR_PIXELS (PS_CIFAR_SIDE * PS_CIFAR_SIDE)    /* 1024 per channel */
#define PS_CIFAR_DIM (PS_CIFAR_PIXELS * PS_CIFAR_CHANNELS) /* 3072 floats a sample */
#define PS_CIFAR_RECORD (1 + PS_CIFAR_DIM)                 /* 3073 bytes a record */
#define PS_CIFAR_CLASSES 10
#define PS_CIFAR_TRAIN_BATCHES 5 /* data_batch_1 .. data_batch_5 */

/* Parses one CIFAR-10 file held in buf (already decompressed) and appends its
 * records to *out: out is zeroed or holds earlier CIFAR-10 records (dim 3072).
 * Pixels go from the file's planar layout (1024 R, 1024 G, 1024 B, each 32x32
 * row-major) to channels-last x[n][32][32][3] = byte / 255; labels to y.
 * Every record is checked, but at most max_add (0: all) are appended. name is
 * the file named in messages. Returns PS_OK; PS_EFORMAT (empty, length not a
 * multiple of 3073, a label > 9) with the file and record in err; PS_EINVAL
 * (out holds something else) or PS_ENOMEM. On error *out is unchanged. */
int ps_cifar_parse(const uint8_t *buf, size_t len, const char *name, size_t max_add,
                   ps_dataset *out, char *err, size_t errlen);

/* Loads dir/data_batch_1..5.bin (train != 0) or dir/test_batch.bin (train == 0),
 * each file raw or .bin.gz (the .gz wins when both exist, as for IDX), in order.
 * Training needs data_batch_1, and the batches present must be 1..k with no gap.
 * max_n > 0 keeps the first max_n samples (later files are then not read).
 * out gets dim 3072, num_classes 10 and owns x and y (ps_dataset_free).
 * Returns PS_OK, PS_EIO (a file is missing or unreadable), PS_EFORMAT (a gap,
 * a malformed file), PS_EINVAL (path too long) or PS_ENOMEM, with a one-line
 * reason naming the file in err; on error *out is zeroed. */
int ps_dataset_load_cifar10_dir(const char *dir, int train, size_t max_n, ps_dataset *out,
                                char *err, size_t errlen);

/* True when dir holds data_batch_1.bin or test_batch.bin (raw or .gz). */
bool ps_cifar10_dir_detect(const char *dir);

#endif
