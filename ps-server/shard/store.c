/* The shard's variable store (see store.h). */
#include "store.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"
#include "ps_error.h"

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* A variable's values live in a reference-counted block: the variable holds
 * one reference, and every pull reply still being sent by ZeroMQ's I/O thread
 * holds another. An update writes in place when the variable's reference is
 * the only one, else into a fresh copy (copy-on-write), so a reply in flight
 * never sees values change under it. The header is padded to 64 bytes so the
 * values stay cache-line aligned. */
typedef struct {
    atomic_uint refs;
    size_t numel;
} wbuf;
#define WBUF_HDR 64

static wbuf *wbuf_of(const float *w) {
    return (wbuf *)(void *)((char *)(uintptr_t)w - WBUF_HDR);
}

static float *wbuf_alloc(size_t numel) {
    wbuf *b = aligned_alloc(64, WBUF_HDR + ((numel * sizeof(float) + 63) & ~(size_t)63));
    if (!b) return NULL;
    atomic_init(&b->refs, 1);
    b->numel = numel;
    return (float *)(void *)((char *)b + WBUF_HDR);
}

static void wbuf_release(float *w) {
    if (!w) return;
    wbuf *b = wbuf_of(w);
    if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1) free(b);
}

void ps_var_unshare(void *values, void *hint) {
    (void)hint;
    wbuf_release(values);
}

const float *ps_var_share(const ps_var *v) {
    atomic_fetch_add_explicit(&wbuf_of(v->w)->refs, 1, memory_order_relaxed);
    return v->w;
}

int ps_var_writable(ps_var *v) {
    if (atomic_load_explicit(&wbuf_of(v->w)->refs, memory_order_acquire) == 1) return PS_OK;
    /* a reply still reads the current block: update a copy */
    float *w = wbuf_alloc(v->numel);
    if (!w) return PS_ENOMEM;
    memcpy(w, v->w, v->numel * sizeof(float));
    wbuf_release(v->w);
    v->w = w;
    v->cow_copies++;
    return PS_OK;
}

void ps_store_init(ps_store *s) {
    memset(s, 0, sizeof *s);
}

static void var_free(ps_var *v) {
    free(v->name);
    wbuf_release(v->w);
    for (int k = 0; k < PS_OPT_MAX_SLOTS; k++)
        free(v->slots[k]);
    free(v->gsum);
    free(v);
}

void ps_store_free(ps_store *s) {
    for (size_t i = 0; i < s->n; i++)
        var_free(s->vars[i]);
    free(s->vars);
    free(s->index);
    memset(s, 0, sizeof *s);
}

ps_var *ps_store_find(const ps_store *s, const char *name) {
    if (s->index_cap == 0) return NULL;
    size_t mask = s->index_cap - 1;
    for (size_t i = hash_name(name) & mask;; i = (i + 1) & mask) {
        size_t slot = s->index[i];
        if (slot == 0) return NULL;
        if (strcmp(s->vars[slot - 1]->name, name) == 0) return s->vars[slot - 1];
    }
}

static int index_insert(size_t *index, size_t cap, const char *name, size_t value) {
    size_t mask = cap - 1;
    size_t i = hash_name(name) & mask;
    while (index[i] != 0)
        i = (i + 1) & mask;
    index[i] = value;
    return PS_OK;
}

static int index_grow(ps_store *s) {
    size_t cap = s->index_cap ? s->index_cap * 2 : 64;
    size_t *idx = calloc(cap, sizeof *idx);
    if (!idx) return PS_ENOMEM;
    for (size_t v = 0; v < s->n; v++)
        index_insert(idx, cap, s->vars[v]->name, v + 1);
    free(s->index);
    s->index = idx;
    s->index_cap = cap;
    return PS_OK;
}

int ps_store_create(ps_store *s, const char *name, size_t rank, const uint64_t *shape,
                    const float *init, const ps_opt_spec *opt, ps_var **out) {
    if ((s->n + 1) * 2 > s->index_cap && index_grow(s) != PS_OK) return PS_ENOMEM;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        ps_var **nv = realloc(s->vars, cap * sizeof *nv);
        if (!nv) return PS_ENOMEM;
        s->vars = nv;
        s->cap = cap;
    }
    ps_var *v = calloc(1, sizeof *v);
    if (!v) return PS_ENOMEM;
    v->name = strdup(name);
    v->rank = rank;
    memcpy(v->shape, shape, rank * sizeof(uint64_t));
    v->numel = 1;
    for (size_t d = 0; d < rank; d++)
        v->numel *= (size_t)shape[d];
    v->opt = *opt;
    v->w = wbuf_alloc(v->numel);
    int ok = v->name && v->w;
    for (int k = 0; ok && k < ps_optim_num_slots(opt->kind); k++) {
        v->slots[k] = malloc(v->numel * sizeof(float));
        if (!v->slots[k])
            ok = 0;
        else {
            float init_val = ps_optim_slot_init(opt, k);
            for (size_t i = 0; i < v->numel; i++)
                v->slots[k][i] = init_val;
        }
    }
    if (!ok) {
        var_free(v);
        return PS_ENOMEM;
    }
    memcpy(v->w, init, v->numel * sizeof(float));
    s->vars[s->n++] = v;
    index_insert(s->index, s->index_cap, v->name, s->n);
    *out = v;
    return PS_OK;
}

int ps_var_same_shape(const ps_var *v, size_t rank, const uint64_t *shape) {
    if (rank != v->rank) return 0;
    return memcmp(shape, v->shape, v->rank * sizeof(uint64_t)) == 0;
}

int ps_var_apply(ps_var *v, const float *g) {
    int rc = ps_var_writable(v);
    if (rc != PS_OK) return rc;
    v->updates++;
    ps_optim_apply(&v->opt, v->w, g, v->slots, v->numel, v->updates);
    return PS_OK;
}

int ps_var_accumulate(ps_var *v, const float *g) {
    if (!v->gsum) {
        v->gsum = malloc(v->numel * sizeof(float));
        if (!v->gsum) return PS_ENOMEM;
    }
    float *restrict acc = v->gsum;
    if (v->gcount == 0) {
        memcpy(acc, g, v->numel * sizeof(float)); /* the step's first push: 0 + g */
    } else {
        for (size_t i = 0; i < v->numel; i++)
            acc[i] += g[i];
    }
    v->gcount++;
    return PS_OK;
}

int ps_var_apply_accumulated(ps_var *v) {
    if (v->gcount == 0) return PS_OK;
    if (v->gcount > 1) {
        float scale = 1.0f / (float)v->gcount;
        for (size_t i = 0; i < v->numel; i++)
            v->gsum[i] *= scale;
    }
    v->gcount = 0;
    return ps_var_apply(v, v->gsum);
}

size_t ps_store_bytes(const ps_store *s) {
    size_t b = 0;
    for (size_t i = 0; i < s->n; i++)
        b += s->vars[i]->numel * sizeof(float);
    return b;
}
