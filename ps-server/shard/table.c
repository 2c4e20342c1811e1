/* An embedding table's rows on one shard (table.h). Rows live packed in
 * arrays (values and optimizer state, id, last step, LRU links), found
 * through an open-addressing index (linear probing, deletion by backward
 * shift); a removed row's place is taken by the last row, so the arrays stay
 * dense. The LRU list runs from the least recently pushed row (head) to the
 * most recent (tail), so the cap evicts from the head and the TTL expires
 * from it too, each in time proportional to what it removes. */
#include "table.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"
#include "rows.h"

#define NONE UINT32_MAX
#define SKETCH_DEPTH 4
#define SKETCH_WIDTH ((size_t)1 << 18) /* 4 x 256 Ki counters of 16 bits: 2 MiB */

/* An index slot holds the id beside its row, so a probe reads one place. */
typedef struct {
    uint64_t id;
    uint32_t row1; /* row + 1; 0: empty */
} ix_entry;

struct ps_table {
    ps_table_cfg cfg;
    size_t slot_floats, stride; /* floats per row: dim values, then the optimizer's state */
    float *data;
    uint64_t *ids, *last;
    uint32_t *prev, *next;
    size_t n, cap;
    uint32_t head, tail;
    ix_entry *index; /* the id and its row + 1 (0: an empty slot) */
    size_t index_cap;
    uint16_t *sketch; /* count-min, when min_count > 1 */
    ps_table_counts st;
    size_t limit; /* rows stored at most: cfg.max_rows and psd's memory bound (0: none) */
    uint64_t moves; /* rows removed so far (each moves the last row into its place) */
};

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int ps_table_new(const ps_table_cfg *cfg, ps_table **out) {
    *out = NULL;
    if (cfg->dim == 0 || cfg->dim > PS_TABLE_MAX_DIM) return PS_EINVAL;
    ps_table *t = calloc(1, sizeof *t);
    if (!t) return PS_ENOMEM;
    t->cfg = *cfg;
    t->limit = cfg->max_rows;
    t->slot_floats = ps_row_opt_slot_floats(cfg->opt.kind, cfg->dim);
    t->stride = cfg->dim + t->slot_floats;
    t->head = t->tail = NONE;
    t->index_cap = 64;
    t->index = calloc(t->index_cap, sizeof *t->index);
    if (cfg->min_count > 1) t->sketch = calloc(SKETCH_DEPTH * SKETCH_WIDTH, sizeof *t->sketch);
    if (!t->index || (cfg->min_count > 1 && !t->sketch)) {
        ps_table_free(t);
        return PS_ENOMEM;
    }
    *out = t;
    return PS_OK;
}

void ps_table_free(ps_table *t) {
    if (!t) return;
    free(t->data), free(t->ids), free(t->last), free(t->prev), free(t->next);
    free(t->index), free(t->sketch);
    free(t);
}

static size_t home(const ps_table *t, uint64_t id) {
    return (size_t)mix(id ^ 0x8BADF00DDEADBEEFull) & (t->index_cap - 1);
}

/* The index slot of id, or of the empty slot where it would go. */
static size_t slot_of(const ps_table *t, uint64_t id) {
    size_t mask = t->index_cap - 1, i = home(t, id);
    while (t->index[i].row1 && t->index[i].id != id) i = (i + 1) & mask;
    return i;
}

static long find(const ps_table *t, uint64_t id) {
    uint32_t e = t->index[slot_of(t, id)].row1;
    return e ? (long)e - 1 : -1;
}

/* Lookups in batches of BATCH ids, in three passes so that their memory accesses
 * overlap rather than wait one after another (a table far larger than the caches
 * makes each one a trip to memory): the ids' home slots asked for, then the slots
 * resolved to rows and the rows asked for, then the work. */
#define BATCH 32

static void find_batch(const ps_table *t, const uint64_t *ids, size_t n, long *rows) {
    for (size_t k = 0; k < n; k++)
        __builtin_prefetch(&t->index[home(t, ids[k])]);
    for (size_t k = 0; k < n; k++) {
        rows[k] = find(t, ids[k]);
        if (rows[k] >= 0) {
            __builtin_prefetch(t->data + (size_t)rows[k] * t->stride);
            __builtin_prefetch(&t->last[rows[k]]);
            __builtin_prefetch(&t->prev[rows[k]]);
            __builtin_prefetch(&t->next[rows[k]]);
        }
    }
}

static int grow_index(ps_table *t) {
    size_t cap = t->index_cap * 2;
    ix_entry *idx = calloc(cap, sizeof *idx), *old = t->index;
    if (!idx) return PS_ENOMEM;
    t->index = idx, t->index_cap = cap;
    for (size_t r = 0; r < t->n; r++)
        t->index[slot_of(t, t->ids[r])] = (ix_entry){t->ids[r], (uint32_t)r + 1};
    free(old);
    return PS_OK;
}

static int grow_rows(ps_table *t) {
    size_t cap = t->cap ? 2 * t->cap : 64;
    if (t->limit && cap > t->limit) cap = t->limit;
    float *d = realloc(t->data, cap * t->stride * sizeof *d);
    if (d) t->data = d;
    uint64_t *ids = d ? realloc(t->ids, cap * sizeof *ids) : NULL;
    if (ids) t->ids = ids;
    uint64_t *last = ids ? realloc(t->last, cap * sizeof *last) : NULL;
    if (last) t->last = last;
    uint32_t *prev = last ? realloc(t->prev, cap * sizeof *prev) : NULL;
    if (prev) t->prev = prev;
    uint32_t *next = prev ? realloc(t->next, cap * sizeof *next) : NULL;
    if (next) t->next = next;
    if (!next) return PS_ENOMEM;
    t->cap = cap;
    return PS_OK;
}

static void lru_unlink(ps_table *t, uint32_t r) {
    if (t->prev[r] != NONE) t->next[t->prev[r]] = t->next[r];
    else t->head = t->next[r];
    if (t->next[r] != NONE) t->prev[t->next[r]] = t->prev[r];
    else t->tail = t->prev[r];
}

static void lru_append(ps_table *t, uint32_t r) {
    t->prev[r] = t->tail, t->next[r] = NONE;
    if (t->tail != NONE) t->next[t->tail] = r;
    else t->head = r;
    t->tail = r;
}

/* Takes id out of the index (backward shift: the probe sequences stay whole). */
static void index_delete(ps_table *t, uint64_t id) {
    size_t mask = t->index_cap - 1, i = slot_of(t, id), j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!t->index[j].row1) break;
        size_t k = home(t, t->index[j].id);
        /* the entry at j may move to i unless its home lies cyclically in (i, j] */
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) t->index[i] = t->index[j], i = j;
    }
    t->index[i] = (ix_entry){0, 0};
}

/* Removes row r; the last row takes its place. */
static void remove_row(ps_table *t, uint32_t r) {
    t->moves++;
    index_delete(t, t->ids[r]);
    lru_unlink(t, r);
    uint32_t l = (uint32_t)t->n - 1;
    if (r != l) {
        memcpy(t->data + (size_t)r * t->stride, t->data + (size_t)l * t->stride,
               t->stride * sizeof *t->data);
        t->ids[r] = t->ids[l], t->last[r] = t->last[l];
        t->prev[r] = t->prev[l], t->next[r] = t->next[l];
        if (t->prev[r] != NONE) t->next[t->prev[r]] = r;
        else t->head = r;
        if (t->next[r] != NONE) t->prev[t->next[r]] = r;
        else t->tail = r;
        t->index[slot_of(t, t->ids[r])].row1 = r + 1;
    }
    t->n--;
    t->st.rows = t->n;
}

/* A new row for id (initial values, fresh state); -1 when refused at the cap,
 * -2 when out of memory. */
static long insert(ps_table *t, uint64_t id, uint64_t step) {
    if (t->limit && t->n >= t->limit) {
        if (t->cfg.full == PS_TABLE_REFUSE || t->head == NONE) {
            t->st.refused++;
            return -1;
        }
        remove_row(t, t->head);
        t->st.evicted++;
    }
    if (t->n == t->cap && grow_rows(t) != PS_OK) return -2;
    if (2 * (t->n + 1) > t->index_cap && grow_index(t) != PS_OK) return -2;
    uint32_t r = (uint32_t)t->n++;
    float *row = t->data + (size_t)r * t->stride;
    ps_rows_initial(t->cfg.seed, t->cfg.key, id, t->cfg.init_lo, t->cfg.init_hi, row, t->cfg.dim);
    ps_row_opt_init(&t->cfg.opt, row + t->cfg.dim, t->cfg.dim);
    t->ids[r] = id, t->last[r] = step;
    t->index[slot_of(t, id)] = (ix_entry){id, r + 1};
    lru_append(t, r);
    t->st.admitted++;
    t->st.rows = t->n;
    return r;
}

/* Counts one more push of id; returns the estimate (never below the truth). */
static uint32_t sketch_add(ps_table *t, uint64_t id) {
    uint32_t least = UINT16_MAX;
    for (size_t d = 0; d < SKETCH_DEPTH; d++) {
        uint16_t *c = &t->sketch[d * SKETCH_WIDTH + (mix(id + 0x9E3779B97F4A7C15ull * (d + 1)) &
                                                     (SKETCH_WIDTH - 1))];
        if (*c < UINT16_MAX) (*c)++;
        if (*c < least) least = *c;
    }
    return least;
}

void ps_table_pull(const ps_table *t, const uint64_t *ids, size_t n, float *out) {
    size_t dim = t->cfg.dim;
    long rows[BATCH];
    for (size_t i0 = 0; i0 < n; i0 += BATCH) {
        size_t m = n - i0 < BATCH ? n - i0 : BATCH;
        find_batch(t, ids + i0, m, rows);
        for (size_t k = 0; k < m; k++) {
            size_t i = i0 + k;
            if (rows[k] >= 0)
                memcpy(out + i * dim, t->data + (size_t)rows[k] * t->stride, dim * sizeof *out);
            else
                ps_rows_initial(t->cfg.seed, t->cfg.key, ids[i], t->cfg.init_lo, t->cfg.init_hi,
                                out + i * dim, dim);
        }
    }
}

int ps_table_push(ps_table *t, const uint64_t *ids, size_t n, const float *grads, uint64_t step) {
    size_t dim = t->cfg.dim;
    long rows[BATCH];
    for (size_t i0 = 0; i0 < n; i0 += BATCH) {
        size_t m = n - i0 < BATCH ? n - i0 : BATCH;
        uint64_t moves = t->moves;
        find_batch(t, ids + i0, m, rows);
        for (size_t k = 0; k < m; k++) {
            size_t i = i0 + k;
            /* a row found above may have moved since (an insert evicted: the last row
             * took the evicted one's place), one not found been stored since (an id
             * twice): look again (the slot is in the cache by now) */
            long r = rows[k];
            if (r < 0 || t->moves != moves) r = find(t, ids[i]);
            if (r < 0) {
                if (t->sketch && sketch_add(t, ids[i]) < t->cfg.min_count) {
                    t->st.dropped++;
                    continue;
                }
                r = insert(t, ids[i], step);
                if (r == -2) return PS_ENOMEM;
                if (r < 0) {
                    t->st.dropped++;
                    continue;
                }
            }
            float *row = t->data + (size_t)r * t->stride;
            ps_row_opt_apply(&t->cfg.opt, row, row + dim, grads + i * dim, dim, step);
            t->last[r] = step;
            lru_unlink(t, (uint32_t)r);
            lru_append(t, (uint32_t)r);
        }
    }
    return PS_OK;
}

size_t ps_table_expire(ps_table *t, uint64_t step) {
    size_t n = 0;
    if (!t->cfg.ttl_steps) return 0;
    while (t->head != NONE && t->last[t->head] + t->cfg.ttl_steps <= step) {
        remove_row(t, t->head);
        n++;
    }
    t->st.expired += n;
    return n;
}

void ps_table_stats_get(const ps_table *t, ps_table_counts *s) {
    *s = t->st;
    s->rows = t->n;
    s->bytes = (uint64_t)t->cap * (t->stride * sizeof(float) + 2 * sizeof(uint64_t) +
                                   2 * sizeof(uint32_t)) +
               (uint64_t)t->index_cap * sizeof(ix_entry) +
               (t->sketch ? SKETCH_DEPTH * SKETCH_WIDTH * sizeof(uint16_t) : 0);
}

void ps_table_visit(const ps_table *t, ps_table_visit_fn fn, void *ctx) {
    for (uint32_t r = t->head; r != NONE; r = t->next[r]) {
        const float *row = t->data + (size_t)r * t->stride;
        fn(ctx, t->ids[r], row, row + t->cfg.dim, t->last[r]);
    }
}

int ps_table_restore_row(ps_table *t, uint64_t id, const float *row, const float *slots,
                         uint64_t last_step) {
    if (find(t, id) >= 0) return PS_EEXIST;
    long r = insert(t, id, last_step);
    if (r == -2) return PS_ENOMEM;
    if (r < 0) return PS_EINVAL; /* over a refusing cap */
    float *dst = t->data + (size_t)r * t->stride;
    memcpy(dst, row, t->cfg.dim * sizeof *dst);
    memcpy(dst + t->cfg.dim, slots, t->slot_floats * sizeof *dst);
    return PS_OK;
}

void ps_table_restore_counts(ps_table *t, const ps_table_counts *c) {
    t->st.admitted = c->admitted;
    t->st.evicted = c->evicted;
    t->st.expired = c->expired;
    t->st.refused = c->refused;
    t->st.dropped = c->dropped;
}

size_t ps_table_row_bytes(const ps_table_cfg *cfg) {
    size_t stride = cfg->dim + ps_row_opt_slot_floats(cfg->opt.kind, cfg->dim);
    /* values and state, id and last step, LRU links, and the index at <= 1/2 load (two
     * slots a row, as much again while it doubles) */
    return stride * sizeof(float) + 2 * sizeof(uint64_t) + 2 * sizeof(uint32_t) +
           4 * sizeof(ix_entry);
}

void ps_table_bound(ps_table *t, size_t rows) {
    t->limit = t->cfg.max_rows;
    if (rows && (!t->limit || rows < t->limit)) t->limit = rows;
}

size_t ps_table_limit(const ps_table *t) {
    return t->limit;
}
