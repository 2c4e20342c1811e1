/* Record sources: a dataset as numbered records that any thread may read, in
 * any order, each decoded on its own (source.c, source_*.c). What a source
 * holds in memory is an index (record -> file and offset), never the data:
 * records are read from disk (or from a mapping) when asked for.
 *
 *   image folder   DIR/<class>/..., one file a record, labels by class
 *   TFRecord       files of tf.train.Example: an image (JPEG/PNG bytes) or a
 *                  raw tensor (floats, or uint8 bytes of a given shape) and an
 *                  int64 label, under keys the data spec names
 *   NumPy          x and y arrays (.npy pair, or .npz members), mapped
 *   CSV / TSV      the named feature columns, 64-bit id columns and a label
 *                  column (a class, or a float target)
 *   in memory      an IDX or CIFAR-10 dataset already loaded (ps_dataset) */
#ifndef PS_SOURCE_H
#define PS_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data.h"
#include "image.h"

/* One decoded record, channels last. A sample belongs to one thread; the
 * buffers grow as needed and are reused. */
typedef struct {
    float *x; /* h * w * c values */
    size_t cap;
    size_t h, w, c;
    int32_t label;  /* the class (0 when the source's labels are float targets) */
    float target;   /* a float target (source.float_target); else unset */
    uint64_t *ids;  /* n_ids 64-bit ids (CSV id columns), in the spec's order */
    size_t n_ids, ids_cap;
    uint8_t *bytes; /* the record's raw bytes (a file, a TFRecord record) */
    size_t bytes_cap;
    ps_image img; /* decoded pixels, the buffer reused from record to record */
} ps_sample;

void ps_sample_free(ps_sample *s);
/* Makes room for n floats in s->x. Returns PS_OK or PS_ENOMEM. */
int ps_sample_reserve(ps_sample *s, size_t n);
/* Makes room for n raw bytes in s->bytes. Returns PS_OK or PS_ENOMEM. */
int ps_sample_reserve_bytes(ps_sample *s, size_t n);
/* Makes room for n ids in s->ids. Returns PS_OK or PS_ENOMEM. */
int ps_sample_reserve_ids(ps_sample *s, size_t n);

typedef struct ps_source ps_source;

typedef struct {
    /* Decodes record i (< n) into s; called from any thread, concurrently with
     * other samples. Returns PS_OK or an error, err naming the file and record. */
    int (*read)(ps_source *src, size_t i, ps_sample *s, char *err, size_t errlen);
    void (*close)(ps_source *src);
} ps_source_ops;

struct ps_source {
    const ps_source_ops *ops;
    void *self;          /* the format's own state */
    const char *format;  /* "image folder", "TFRecord", "NumPy", "CSV", "IDX", "CIFAR-10" */
    size_t n;            /* records */
    size_t *file_start;  /* owned: n_files + 1 record numbers (each file's first; then n) */
    size_t n_files;
    size_t h, w, c;      /* every record's shape, when known without reading (else 0) */
    int num_classes;     /* max label + 1 when known without reading every record, else 0 */
    size_t n_ids;        /* 64-bit ids per record (CSV id columns), 0: none */
    bool float_target;   /* labels are float targets (sample.target), not classes */
    double target_min, target_max; /* float targets: their range, seen at open */
    char **classes;      /* image folders: the class names (borrowed from self), else NULL */
    size_t n_classes;
    char desc[256];      /* the files, for the log: "data/train (2 classes, 1000 images)" */
};

/* What the formats take from the data spec. */
typedef struct {
    int channels;           /* decoded images: 1, 3 or 0 (the file's own) */
    size_t max_pixels;      /* per image; 0: PS_IMAGE_MAX_PIXELS_DEFAULT */
    unsigned image_flags;   /* ps_image_decode's (PS_IMAGE_DCT_ACCURATE) */
    size_t max_record;      /* TFRecord: largest record; 0: PS_TFRECORD_MAX_LEN_DEFAULT */
    const char *image_key;  /* TFRecord: the image's feature ("image") */
    const char *label_key;  /* TFRecord: the label's feature ("label") */
    size_t shape[3];        /* TFRecord raw tensors, NumPy without a shape: h, w, c (0: none) */
    const char *const *columns; /* CSV: the feature columns (NULL: every other one; may be
                                   empty, n_columns 0, when there are id columns) */
    size_t n_columns;
    const char *label_column; /* CSV: "label" */
    const char *const *id_columns; /* CSV: columns of 64-bit ids (ids.h), n_id_columns */
    size_t n_id_columns;
    bool hash_ids;          /* CSV: ids are any text, hashed (else unsigned decimal) */
    bool float_label;       /* CSV: the label is a float target (finite), not a class */
    char delimiter;         /* CSV: ',' or '\t' (0: '\t' for a .tsv name, else ',') */
} ps_source_opts;

/* Reads record i (ps_source_ops.read). */
int ps_source_read(ps_source *src, size_t i, ps_sample *s, char *err, size_t errlen);
/* Closes the format's state and frees src. NULL is a no-op. */
void ps_source_close(ps_source *src);

/* Allocates a source with n_files + 1 file_start entries (the formats' own
 * constructors use this). Returns NULL when out of memory. */
ps_source *ps_source_new(const ps_source_ops *ops, size_t n_files);

/* For the formats: reads the whole of path (a regular file of at most 256
 * MiB) into s->bytes, *len its size; decodes a JPEG or PNG held in buf into
 * s as floats 0..255, `what` naming the record in err. */
int ps_source_read_file(const char *path, ps_sample *s, size_t *len, char *err, size_t errlen);
int ps_source_decode_image(const uint8_t *buf, size_t len, int channels, size_t max_pixels,
                           unsigned flags, ps_sample *s, const char *what, char *err,
                           size_t errlen);

/* A dataset already in memory (borrowed: it must outlive the source); one file. */
int ps_source_memory(const ps_dataset *d, const char *format, ps_source **out, char *err,
                     size_t errlen);
/* An image folder (folder.h). */
int ps_source_folder(const char *dir, const ps_source_opts *o, ps_source **out, char *err,
                     size_t errlen);
/* TFRecord files, in the order given; each file is indexed at open (a read of
 * every record's 12-byte header, its length's checksum verified). */
int ps_source_tfrecord(const char *const *paths, size_t n_paths, const ps_source_opts *o,
                       ps_source **out, char *err, size_t errlen);
/* x and y as .npy files: x [n, ...] of any numeric dtype, y [n] (or [n, 1])
 * of integers. */
int ps_source_npy(const char *x_path, const char *y_path, const ps_source_opts *o,
                  ps_source **out, char *err, size_t errlen);
/* x and y as members of an .npz archive (stored, not compressed: np.savez). */
int ps_source_npz(const char *path, const char *x_name, const char *y_name,
                  const ps_source_opts *o, ps_source **out, char *err, size_t errlen);
/* CSV / TSV files with a header (csv.h); every row is checked at open and its
 * place in the file kept. Columns that are neither a feature, an id nor the
 * label are not parsed. */
int ps_source_csv(const char *const *paths, size_t n_paths, const ps_source_opts *o,
                  ps_source **out, char *err, size_t errlen);

#endif
