/* Row placement, initial values, dedupe and split (rows.h). */
#include "rows.h"

#include <stdlib.h>
#include <string.h>

#include "ps_error.h"

/* splitmix64's finalizer: a bijection of 64 bits with full avalanche. */
static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t ps_rows_table_key(const char *table) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)table; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    return mix(h);
}

uint32_t ps_rows_shard(uint64_t table_key, uint64_t id, uint32_t n_shards) {
    uint64_t h = mix(id ^ table_key);
    return (uint32_t)(((unsigned __int128)h * n_shards) >> 64);
}

void ps_rows_initial(uint64_t seed, uint64_t table_key, uint64_t id, float lo, float hi,
                     float *out, size_t dim) {
    uint64_t base = mix(mix(seed ^ 0x6A09E667F3BCC908ull) ^ table_key) ^ mix(id);
    for (size_t k = 0; k < dim; k++) {
        uint64_t r = mix(base + 0x9E3779B97F4A7C15ull * (k + 1));
        float u = (float)(r >> 40) * (1.0f / 16777216.0f); /* 24 bits: [0, 1) */
        out[k] = lo + (hi - lo) * u;
    }
}

int ps_rows_dedupe(const uint64_t *ids, size_t n, uint64_t *uniq, size_t *n_uniq,
                   uint32_t *where) {
    *n_uniq = 0;
    if (n == 0) return PS_OK;
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    uint32_t *slots = malloc(cap * sizeof *slots); /* index into uniq + 1; 0: empty */
    if (!slots) return PS_ENOMEM;
    memset(slots, 0, cap * sizeof *slots);
    size_t mask = cap - 1, u = 0;
    for (size_t i = 0; i < n; i++) {
        size_t h = (size_t)mix(ids[i]) & mask;
        while (slots[h] && uniq[slots[h] - 1] != ids[i]) h = (h + 1) & mask;
        if (!slots[h]) {
            uniq[u] = ids[i];
            slots[h] = (uint32_t)++u;
        }
        where[i] = slots[h] - 1;
    }
    free(slots);
    *n_uniq = u;
    return PS_OK;
}

void ps_rows_split(uint64_t table_key, const uint64_t *ids, size_t n, uint32_t n_shards,
                   uint32_t *counts, uint32_t *order, uint32_t *shard_of) {
    memset(counts, 0, n_shards * sizeof *counts);
    for (size_t i = 0; i < n; i++) {
        uint32_t s = ps_rows_shard(table_key, ids[i], n_shards);
        if (shard_of) shard_of[i] = s;
        counts[s]++;
    }
    /* each shard's group starts after the ones before it; fill in the ids' order */
    uint32_t at[256], *pos = n_shards <= 256 ? at : malloc(n_shards * sizeof *pos);
    if (!pos) { /* no memory for the offsets: place them in n_shards passes */
        size_t k = 0;
        for (uint32_t s = 0; s < n_shards; s++)
            for (size_t i = 0; i < n; i++)
                if (ps_rows_shard(table_key, ids[i], n_shards) == s) order[k++] = (uint32_t)i;
        return;
    }
    uint32_t sum = 0;
    for (uint32_t s = 0; s < n_shards; s++) pos[s] = sum, sum += counts[s];
    for (size_t i = 0; i < n; i++) {
        uint32_t s = shard_of ? shard_of[i] : ps_rows_shard(table_key, ids[i], n_shards);
        order[pos[s]++] = (uint32_t)i;
    }
    if (pos != at) free(pos);
}
