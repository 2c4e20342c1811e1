/* Shares and per-epoch orders of record numbers (order.h). */
#include "order.h"

#include <stdlib.h>
#include <string.h>

#include "ps_error.h"

uint64_t ps_order_rand(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t ps_order_below(uint64_t *s, uint64_t bound) {
    uint64_t threshold = -bound % bound; /* 2^64 mod bound */
    for (;;) {
        uint64_t r = ps_order_rand(s);
        if (r >= threshold) return r % bound;
    }
}

uint64_t ps_order_seed(uint64_t seed, unsigned epoch, unsigned index) {
    uint64_t s = seed;
    s = ps_order_rand(&s) ^ ((uint64_t)epoch * 0xD1B54A32D192ED03ull);
    s = ps_order_rand(&s) ^ ((uint64_t)index * 0xA0761D6478BD642Full);
    return s;
}

static size_t record_at(const size_t *records, size_t i) {
    return records ? records[i] : i;
}

size_t ps_order_file_of(const size_t *file_start, size_t n_files, size_t r) {
    size_t lo = 0, hi = n_files; /* file_start[lo] <= r < file_start[hi] */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (file_start[mid] <= r)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* By file: this worker's files are index, index + count, ...; its share their
 * records (among `records`), file by file. Counts every worker's share to find
 * the smallest. */
static int share_by_file(ps_order *o, const size_t *records, size_t n, const size_t *file_start,
                         size_t n_files) {
    size_t *per_worker = calloc(o->count, sizeof *per_worker);
    size_t *per_file = calloc(n_files, sizeof *per_file);
    if (!per_worker || !per_file) {
        free(per_worker), free(per_file);
        return PS_ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        per_file[ps_order_file_of(file_start, n_files, record_at(records, i))]++;
    for (size_t f = 0; f < n_files; f++) per_worker[f % o->count] += per_file[f];
    o->epoch_n = per_worker[0];
    for (unsigned w = 1; w < o->count; w++)
        if (per_worker[w] < o->epoch_n) o->epoch_n = per_worker[w];
    o->share_n = per_worker[o->index];
    o->share_files = 0;
    for (size_t f = o->index; f < n_files; f += o->count)
        if (per_file[f]) o->share_files++;
    o->share = malloc((o->share_n ? o->share_n : 1) * sizeof *o->share);
    o->file_start = malloc((o->share_files + 1) * sizeof *o->file_start);
    int rc = o->share && o->file_start ? PS_OK : PS_ENOMEM;
    /* one pass: the records are in ascending order, so files come in order */
    size_t k = 0, fi = 0, last = (size_t)-1;
    for (size_t i = 0; rc == PS_OK && i < n; i++) {
        size_t r = record_at(records, i), f = ps_order_file_of(file_start, n_files, r);
        if (f % o->count != o->index) continue;
        if (f != last) o->file_start[fi++] = k, last = f;
        o->share[k++] = r;
    }
    if (rc == PS_OK) o->file_start[fi] = k;
    free(per_worker), free(per_file);
    return rc;
}

/* By record: records index, index + count, ... up to floor(n / count) of them
 * (the same number for every worker). One "file". */
static int share_by_record(ps_order *o, const size_t *records, size_t n) {
    o->share_n = o->epoch_n = n / o->count;
    o->share = malloc(o->share_n * sizeof *o->share);
    o->file_start = malloc(2 * sizeof *o->file_start);
    if (!o->share || !o->file_start) return PS_ENOMEM;
    for (size_t k = 0; k < o->share_n; k++) o->share[k] = record_at(records, o->index + k * o->count);
    o->share_files = 1;
    o->file_start[0] = 0, o->file_start[1] = o->share_n;
    return PS_OK;
}

int ps_order_init(ps_order *o, const size_t *records, size_t n, const size_t *file_start,
                  size_t n_files, unsigned index, unsigned count, size_t shuffle_buffer,
                  uint64_t seed) {
    memset(o, 0, sizeof *o);
    if (count == 0 || index >= count || n < count) return PS_EINVAL;
    o->index = index, o->count = count, o->seed = seed, o->shuffle_buffer = shuffle_buffer;
    int rc = file_start && n_files >= count && n_files > 1
                 ? share_by_file(o, records, n, file_start, n_files)
                 : share_by_record(o, records, n);
    if (rc == PS_OK && o->epoch_n == 0) rc = PS_EINVAL; /* a worker's files hold nothing */
    if (rc != PS_OK) ps_order_free(o);
    return rc;
}

void ps_order_free(ps_order *o) {
    if (!o) return;
    free(o->share);
    free(o->file_start);
    memset(o, 0, sizeof *o);
}

int ps_order_by_file(const ps_order *o) {
    return o->share_files > 1 || (o->share_files == 1 && o->count > 1 && o->share_n != o->epoch_n);
}

/* Full: Fisher-Yates over the whole share (as the in-memory batcher always
 * did: the same draws give the same order), the first epoch_n kept. */
static int full_shuffle(const ps_order *o, uint64_t s, size_t *out) {
    size_t *perm = o->share_n == o->epoch_n ? out : malloc(o->share_n * sizeof *perm);
    if (!perm) return PS_ENOMEM;
    memcpy(perm, o->share, o->share_n * sizeof *perm);
    for (size_t i = o->share_n; i > 1; i--) {
        size_t j = (size_t)ps_order_below(&s, i), t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
    if (perm != out) {
        memcpy(out, perm, o->epoch_n * sizeof *out);
        free(perm);
    }
    return PS_OK;
}

/* Buffered: the files in a shuffled order, then tf.data's ShuffleDataset: a
 * buffer of N filled from the stream; each output is a uniform pick from it,
 * whose place the next record of the stream takes (at the end, the last
 * element of the buffer). */
static int buffer_shuffle(const ps_order *o, uint64_t s, size_t *out) {
    size_t nf = o->share_files, cap = o->shuffle_buffer < o->share_n ? o->shuffle_buffer : o->share_n;
    size_t *files = malloc((nf ? nf : 1) * sizeof *files), *buf = malloc((cap ? cap : 1) * sizeof *buf);
    if (!files || !buf) {
        free(files), free(buf);
        return PS_ENOMEM;
    }
    for (size_t f = 0; f < nf; f++) files[f] = f;
    for (size_t i = nf; i > 1; i--) {
        size_t j = (size_t)ps_order_below(&s, i), t = files[i - 1];
        files[i - 1] = files[j];
        files[j] = t;
    }
    size_t fi = 0, pos = nf ? o->file_start[files[0]] : 0, len = 0, done = 0;
    /* the stream: files[fi]'s records from pos */
#define STREAM_NEXT(dst)                                                        \
    do {                                                                        \
        while (fi < nf && pos >= o->file_start[files[fi] + 1])                  \
            if (++fi < nf) pos = o->file_start[files[fi]];                       \
        if (fi < nf) (dst) = o->share[pos++], more = 1; else more = 0;          \
    } while (0)
    int more = 1;
    while (len < cap) {
        size_t r = 0;
        STREAM_NEXT(r);
        if (!more) break;
        buf[len++] = r;
    }
    while (done < o->epoch_n && len > 0) {
        size_t j = len > 1 ? (size_t)ps_order_below(&s, len) : 0;
        out[done++] = buf[j];
        size_t r = 0;
        STREAM_NEXT(r);
        if (more)
            buf[j] = r;
        else
            buf[j] = buf[--len];
    }
#undef STREAM_NEXT
    free(files), free(buf);
    return PS_OK;
}

int ps_order_epoch(const ps_order *o, unsigned epoch, size_t *out) {
    uint64_t s = ps_order_seed(o->seed, epoch, o->index);
    if (o->shuffle_buffer == PS_ORDER_IN_ORDER) {
        memcpy(out, o->share, o->epoch_n * sizeof *out);
        return PS_OK;
    }
    return o->shuffle_buffer == 0 ? full_shuffle(o, s, out) : buffer_shuffle(o, s, out);
}
