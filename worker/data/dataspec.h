/* What psworker --data (and --test-data) name: a directory, a file, a glob or
 * a data spec file (JSON), resolved to a format and its files, and the
 * spec's settings for reading, preprocessing and validation.
 *
 * Detection, where it is unambiguous:
 *   directory  IDX files (train-images-idx3-ubyte[.gz]) -> IDX; CIFAR-10
 *              batches -> CIFAR-10; *.tfrecord / *.tfrec files -> TFRecord;
 *              subdirectories of images -> image folder
 *   file       .json -> a data spec; .npz -> NumPy (x, y); .tfrecord,
 *              .tfrec, .tfrecords or TFRecord framing -> TFRecord; .csv,
 *              .tsv -> CSV (label column "label"), any name with "format":
 *              "csv"; a lone .npy is refused
 *              (x and y go in a spec)
 *   glob       its files, all of one kind (TFRecord or CSV), sorted
 *
 * A data spec:
 *   {"format": "image_folder" | "tfrecord" | "npy" | "npz" | "csv" | "idx" | "cifar10",
 *    "path": DIR | FILE | GLOB | [FILE, ...],   relative to the spec's directory
 *    "x": "x.npy", "y": "y.npy",                npy (files); npz (member names, default x, y)
 *    "image_key": "image", "label_key": "label", "shape": [H, W, C],   TFRecord
 *    "columns": [NAME, ...], "label": "label",  CSV: numeric features (every other
 *                                               column; [] with id columns), label
 *    "id_columns": [NAME, ...], "hash_ids": B,  CSV: 64-bit ids (ids.h), decimal or hashed
 *    "label_type": "class" | "float",           CSV: a class number or a float target
 *    "delimiter": "," | "\t",                   CSV: else by the name (.tsv: tab)
 *    "channels": 0 | 1 | 3,                     decoded images (0: the file's own)
 *    "preprocess": [...],                       augment.h
 *    "on_error": "fail" | "skip",               a record that cannot be read
 *    "validation_split": F,                     0 <= F < 1: held out, seeded
 *    "validation": DIR | FILE | GLOB | {spec},  a separate validation set
 *    "shuffle_buffer": N,                       order.h (absent: full shuffle)
 *    "max_pixels": N, "max_record_bytes": N,    limits
 *    "jpeg_dct": "fast" | "accurate"}           JPEG decoding (tf.io.decode_jpeg's
 *                                               dct_method; fast, its default) */
#ifndef PS_DATASPEC_H
#define PS_DATASPEC_H

#include <stdbool.h>
#include <stddef.h>

#include "source.h"

typedef enum {
    PS_DATA_IDX = 0,
    PS_DATA_CIFAR10,
    PS_DATA_FOLDER,
    PS_DATA_TFRECORD,
    PS_DATA_NPY,
    PS_DATA_NPZ,
    PS_DATA_CSV
} ps_data_format;

typedef struct cJSON cJSON;

typedef struct ps_data_spec ps_data_spec;
struct ps_data_spec {
    ps_data_format format;
    char **paths; /* owned: the directory (IDX, CIFAR-10, folder), the .npz, or the files */
    size_t n_paths;
    char *x, *y;  /* owned: NumPy's x and y (files for npy, members for npz) */
    ps_source_opts opts;   /* its strings owned (image_key, label_key, columns, label_column) */
    cJSON *preprocess;     /* owned: the spec's "preprocess" array, or NULL */
    bool skip_bad;
    double validation_split;
    ps_data_spec *validation; /* owned: a separate validation set, or NULL */
    bool has_shuffle_buffer;
    size_t shuffle_buffer;
    bool from_spec;     /* a spec file (else detected) */
    char origin[1024];  /* the argument, for messages */
};

/* Resolves arg (what --data names). Returns PS_OK, PS_EIO (it cannot be
 * read), PS_EFORMAT (a bad spec, or nothing recognisable: err says what was
 * looked for) or PS_ENOMEM. */
int ps_data_spec_resolve(const char *arg, ps_data_spec *out, char *err, size_t errlen);
void ps_data_spec_free(ps_data_spec *s);

/* The format's name as a spec gives it ("tfrecord"). */
const char *ps_data_format_name(ps_data_format f);

/* Opens a streaming source for a spec of the formats read from disk (not IDX
 * or CIFAR-10, which load whole). */
int ps_data_spec_open(const ps_data_spec *s, ps_source **out, char *err, size_t errlen);

#endif
