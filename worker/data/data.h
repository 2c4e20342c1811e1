/* Datasets: the IDX format (MNIST, Fashion-MNIST; gzip or raw) and a batcher
 * that gives worker i of n its shard, reshuffled every epoch from a seed. */
#ifndef PS_DATA_H
#define PS_DATA_H

#include <stddef.h>
#include <stdint.h>

/* Images as floats in [0,1], row-major [n][dim]; labels as int32. */
typedef struct {
    float *x;        /* owned */
    int32_t *y;      /* owned */
    size_t n;        /* samples */
    size_t dim;      /* features per sample (28*28 = 784) */
    size_t h, w, c;  /* the samples as images, channels last (28, 28, 1); flat data: 1, 1, dim.
                        All 0 when unknown (taken as flat) */
    int num_classes; /* max label + 1 */
} ps_dataset;

/* A parsed IDX file held in memory. */
typedef struct {
    uint8_t dtype;      /* 0x08 unsigned byte is the only one accepted */
    int ndim;           /* 1..4 */
    uint32_t dims[4];
    const uint8_t *data; /* points into the buffer given to ps_idx_parse */
    size_t count;        /* product of dims */
} ps_idx;

/* Parses an IDX buffer (already decompressed). Checks the magic (0x00 0x00 type ndim),
 * dims, overflow and that the buffer holds exactly the data. Returns PS_OK or
 * PS_EFORMAT with a reason in err. */
int ps_idx_parse(const uint8_t *buf, size_t len, ps_idx *out, char *err, size_t errlen);

/* Reads a whole file, gunzipping when it is gzip (raw files pass through).
 * On success *buf is malloc'd (caller frees). Returns PS_OK, PS_EIO, PS_EFORMAT. */
int ps_read_maybe_gz(const char *path, uint8_t **buf, size_t *len, char *err, size_t errlen);

/* Loads an images + labels pair; checks counts agree. Returns PS_OK or an error. */
int ps_dataset_load_idx(const char *images_path, const char *labels_path, ps_dataset *out,
                        char *err, size_t errlen);
/* Loads dir/train-images-idx3-ubyte(.gz) + labels (train=1) or the t10k pair (train=0).
 * max_n > 0 keeps only the first max_n samples. */
int ps_dataset_load_dir(const char *dir, int train, size_t max_n, ps_dataset *out, char *err,
                        size_t errlen);
void ps_dataset_free(ps_dataset *d);

/* Worker `index` of `count` gets samples index, index+count, index+2*count, ...
 * limited to floor(n / count) samples so every worker has the same number of
 * steps per epoch (a sync barrier needs that). Batches are copied out. */
typedef struct {
    const ps_dataset *data; /* borrowed */
    size_t *order;          /* owned: shard's sample indices, shuffled per epoch */
    size_t shard_n;
    size_t batch;
    size_t pos;
    uint64_t seed;
    unsigned index, count;
} ps_batcher;

/* Sets up *b over d (borrowed: must outlive b) and shuffles it for epoch 0.
 * Returns PS_OK, PS_EINVAL (count 0, index >= count, batch 0, or fewer samples
 * than workers) or PS_ENOMEM. Free with ps_batcher_free. */
int ps_batcher_init(ps_batcher *b, const ps_dataset *d, unsigned index, unsigned count,
                    size_t batch, uint64_t seed);
void ps_batcher_free(ps_batcher *b);
/* Samples this worker sees per epoch: floor(n / count). */
size_t ps_batcher_shard_size(const ps_batcher *b);
/* ceil(shard_n / batch): the last batch may be smaller. */
size_t ps_batcher_steps_per_epoch(const ps_batcher *b);
/* Reshuffles the shard with a generator seeded from (seed, epoch, index); rewinds. */
void ps_batcher_start_epoch(ps_batcher *b, unsigned epoch);
/* Copies the next batch into x[batch*dim], y[batch]; returns its size (0 at epoch end). */
size_t ps_batcher_next(ps_batcher *b, float *x, int32_t *y);

#endif
