/* An embedding table as checkpoint tensors and back (ckpt_tables.h). Every
 * 64-bit number (an id, a step, a count) travels bit-copied into two float32
 * words, low word first, never converted by value. */
#include "ckpt_tables.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errf.h"
#include "ps_error.h"
#include "rows.h"
#include "utf8.h"

static const char *const suffix[PS_CKPT_TABLE_TENSORS] = {"@table", "@ids", "@steps", "@rows",
                                                          "@slots"};

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v) {
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static void putf(uint8_t *p, float f) {
    uint32_t v;
    memcpy(&v, &f, sizeof v);
    put32(p, v);
}

static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p) {
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static float getf(const uint8_t *p) {
    uint32_t v = get32(p);
    float f;
    memcpy(&f, &v, sizeof f);
    return f;
}

/* docs/FORMATS.md: the table attribute, version 1 (92 bytes). The key is not
 * saved: it is the name's (ps_rows_table_key). */
void ps_ckpt_table_attr_encode(uint8_t a[PS_CKPT_TABLE_ATTR_BYTES], uint64_t num_rows,
                               const ps_table_cfg *c) {
    put32(a, PS_CKPT_TABLE_ATTR_VERSION);
    put32(a + 4, (uint32_t)c->dim);
    put64(a + 8, num_rows);
    put64(a + 16, c->seed);
    putf(a + 24, c->init_lo);
    putf(a + 28, c->init_hi);
    put32(a + 32, c->min_count);
    put32(a + 36, (uint32_t)c->full);
    put64(a + 40, c->ttl_steps);
    put64(a + 48, (uint64_t)c->max_rows);
    put32(a + 56, (uint32_t)c->opt.kind);
    putf(a + 60, c->opt.lr);
    putf(a + 64, c->opt.eps);
    putf(a + 68, c->opt.initial_accumulator);
    putf(a + 72, c->opt.beta_1);
    putf(a + 76, c->opt.beta_2);
    putf(a + 80, c->opt.l1);
    putf(a + 84, c->opt.l2);
    putf(a + 88, c->opt.lr_power);
}

void ps_ckpt_table_attr_decode(const uint8_t *a, const char *name, uint64_t *num_rows,
                               ps_table_cfg *c) {
    memset(c, 0, sizeof *c);
    c->dim = get32(a + 4);
    *num_rows = get64(a + 8);
    c->seed = get64(a + 16);
    c->init_lo = getf(a + 24);
    c->init_hi = getf(a + 28);
    c->min_count = get32(a + 32);
    c->full = (ps_table_full)get32(a + 36);
    c->ttl_steps = get64(a + 40);
    uint64_t max_rows = get64(a + 48);
    c->max_rows = max_rows > SIZE_MAX ? SIZE_MAX : (size_t)max_rows;
    c->opt.kind = (ps_row_opt_kind)get32(a + 56);
    c->opt.lr = getf(a + 60);
    c->opt.eps = getf(a + 64);
    c->opt.initial_accumulator = getf(a + 68);
    c->opt.beta_1 = getf(a + 72);
    c->opt.beta_2 = getf(a + 76);
    c->opt.l1 = getf(a + 80);
    c->opt.l2 = getf(a + 84);
    c->opt.lr_power = getf(a + 88);
    c->key = ps_rows_table_key(name);
}

/* ---- write ---- */

typedef struct {
    ps_ckpt_table_copy *c;
    size_t i;
} gather;

static void gather_row(void *ctx, uint64_t id, const float *row, const float *slots,
                       uint64_t last) {
    gather *g = ctx;
    ps_ckpt_table_copy *c = g->c;
    size_t i = g->i++;
    memcpy(c->ids + 2 * i, &id, sizeof id);
    memcpy(c->steps + 2 * i, &last, sizeof last);
    memcpy(c->rows + i * c->dim, row, c->dim * sizeof *row);
    memcpy(c->slots + i * c->slot_floats, slots, c->slot_floats * sizeof *slots);
}

int ps_ckpt_table_copy_take(const ps_table_entry *e, ps_ckpt_table_copy *c) {
    memset(c, 0, sizeof *c);
    ps_table_counts st;
    ps_table_stats_get(e->t, &st);
    c->n = (size_t)st.rows;
    c->dim = e->cfg.dim;
    c->slot_floats = ps_row_opt_slot_floats(e->cfg.opt.kind, e->cfg.dim);
    for (unsigned k = 0; k < PS_CKPT_TABLE_TENSORS; k++)
        snprintf(c->names[k], sizeof c->names[k], "%s%s", e->name, suffix[k]);
    ps_ckpt_table_attr_encode(c->attr, e->num_rows, &e->cfg);
    const uint64_t numbers[PS_CKPT_TABLE_NUMBERS] = {
        st.rows, e->updates, st.admitted, st.evicted, st.expired, st.refused, st.dropped};
    memcpy(c->numbers, numbers, sizeof numbers);
    size_t n = c->n ? c->n : 1;
    c->ids = malloc(2 * n * sizeof *c->ids);
    c->steps = malloc(2 * n * sizeof *c->steps);
    c->rows = malloc(n * c->dim * sizeof *c->rows);
    c->slots = malloc((c->slot_floats ? n * c->slot_floats : 1) * sizeof *c->slots);
    if (!c->ids || !c->steps || !c->rows || !c->slots) {
        ps_ckpt_table_copy_free(c);
        return PS_ENOMEM;
    }
    gather g = {c, 0};
    ps_table_visit(e->t, gather_row, &g);
    return PS_OK;
}

void ps_ckpt_table_copy_tensors(const ps_ckpt_table_copy *c,
                                ps_tf_tensor t[PS_CKPT_TABLE_TENSORS]) {
    const uint64_t n = c->n;
    t[0] = (ps_tf_tensor){.name = c->names[0],
                          .rank = 1,
                          .shape = {2 * PS_CKPT_TABLE_NUMBERS},
                          .data = c->numbers,
                          .numel = 2 * PS_CKPT_TABLE_NUMBERS,
                          .attr = c->attr,
                          .attr_len = PS_CKPT_TABLE_ATTR_BYTES};
    t[1] = (ps_tf_tensor){
        .name = c->names[1], .rank = 2, .shape = {n, 2}, .data = c->ids, .numel = 2 * c->n};
    t[2] = (ps_tf_tensor){
        .name = c->names[2], .rank = 2, .shape = {n, 2}, .data = c->steps, .numel = 2 * c->n};
    t[3] = (ps_tf_tensor){.name = c->names[3],
                          .rank = 2,
                          .shape = {n, c->dim},
                          .data = c->rows,
                          .numel = c->n * c->dim};
    t[4] = (ps_tf_tensor){.name = c->names[4],
                          .rank = 2,
                          .shape = {n, c->slot_floats},
                          .data = c->slots,
                          .numel = c->n * c->slot_floats};
}

void ps_ckpt_table_copy_free(ps_ckpt_table_copy *c) {
    free(c->ids), free(c->steps), free(c->rows), free(c->slots);
    c->ids = c->steps = c->rows = c->slots = NULL;
}

/* ---- read ---- */

static uint64_t word_pair(const float *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static int is_matrix(const ps_tf_owned *t, uint64_t rows, uint64_t cols) {
    return t->rank == 2 && t->shape[0] == rows && t->shape[1] == cols && t->attr_len == 0;
}

/* The table's name from its first tensor "<name>@table" (name[PS_WIRE_MAX_NAME + 1]),
 * and the others named after it. */
static int check_names(const ps_tf_owned *t, char *name, char *why, size_t whylen) {
    size_t len = strlen(t[0].name), sl = strlen(suffix[0]);
    if (len <= sl || strcmp(t[0].name + len - sl, suffix[0]) != 0 || len - sl > PS_WIRE_MAX_NAME)
        return ps_errf(PS_EFORMAT, why, whylen, "tensor '%s' is not a table's first ('<name>%s')",
                       t[0].name, suffix[0]);
    memcpy(name, t[0].name, len - sl);
    name[len - sl] = '\0';
    /* as a name from the wire: Stats replies carry it */
    if (ps_utf8_check(name, len - sl, NULL) != len - sl)
        return ps_errf(PS_EFORMAT, why, whylen, "table name is not UTF-8 text");
    for (unsigned k = 1; k < PS_CKPT_TABLE_TENSORS; k++) {
        size_t nl = strlen(t[k].name), kl = strlen(suffix[k]);
        if (nl != len - sl + kl || memcmp(t[k].name, name, len - sl) != 0 ||
            strcmp(t[k].name + len - sl, suffix[k]) != 0)
            return ps_errf(PS_EFORMAT, why, whylen, "table '%s': tensor '%s' where '%s%s' belongs",
                           name, t[k].name, name, suffix[k]);
    }
    return PS_OK;
}

int ps_ckpt_table_load(ps_tf_owned *t, uint64_t version, ps_tables *ts, char *why, size_t whylen) {
    char name[PS_WIRE_MAX_NAME + 1];
    int rc = check_names(t, name, why, whylen);
    if (rc != PS_OK) return rc;
    if (ps_tables_find(ts, name))
        return ps_errf(PS_EFORMAT, why, whylen, "table '%s' appears twice", name);
    const ps_tf_owned *head = &t[0];
    uint32_t av = head->attr_len >= 4 ? get32(head->attr) : 0;
    if (av != PS_CKPT_TABLE_ATTR_VERSION || head->attr_len != PS_CKPT_TABLE_ATTR_BYTES)
        return ps_errf(PS_EFORMAT, why, whylen,
                       "table '%s': attribute version %u of %u bytes (this build reads version "
                       "%u, %u bytes)",
                       name, av, head->attr_len, PS_CKPT_TABLE_ATTR_VERSION,
                       PS_CKPT_TABLE_ATTR_BYTES);
    if (head->rank != 1 || head->shape[0] != 2 * PS_CKPT_TABLE_NUMBERS)
        return ps_errf(PS_EFORMAT, why, whylen, "table '%s': '%s' is not of shape [%u]", name,
                       head->name, 2 * PS_CKPT_TABLE_NUMBERS);
    uint64_t num_rows;
    ps_table_cfg cfg;
    ps_ckpt_table_attr_decode(head->attr, name, &num_rows, &cfg);
    char bad[160];
    if (ps_table_entry_cfg_check(num_rows, &cfg, bad, sizeof bad) != PS_OK)
        return ps_errf(PS_EFORMAT, why, whylen, "table '%s': %s", name, bad);
    uint64_t num[PS_CKPT_TABLE_NUMBERS];
    for (unsigned k = 0; k < PS_CKPT_TABLE_NUMBERS; k++)
        num[k] = word_pair(head->data + 2 * k);
    const uint64_t n = num[0], updates = num[1], admitted = num[2], evicted = num[3],
                   expired = num[4];
    size_t slot_floats = ps_row_opt_slot_floats(cfg.opt.kind, cfg.dim);
    /* a shard's rows are indexed by 32 bits (table.c) */
    if (n >= UINT32_MAX || (cfg.max_rows && n > cfg.max_rows) || (num_rows && n > num_rows))
        return ps_errf(PS_EFORMAT, why, whylen,
                       "table '%s': %" PRIu64 " rows (at most %zu stored, %" PRIu64 " ids)", name,
                       n, cfg.max_rows, num_rows);
    if (evicted > admitted || expired > admitted - evicted || admitted - evicted - expired != n)
        return ps_errf(PS_EFORMAT, why, whylen,
                       "table '%s': %" PRIu64 " rows, but %" PRIu64 " admitted - %" PRIu64
                       " evicted - %" PRIu64 " expired",
                       name, n, admitted, evicted, expired);
    if (!is_matrix(&t[1], n, 2) || !is_matrix(&t[2], n, 2) || !is_matrix(&t[3], n, cfg.dim) ||
        !is_matrix(&t[4], n, slot_floats))
        return ps_errf(PS_EFORMAT, why, whylen,
                       "table '%s': want [%" PRIu64 ", 2] ids and steps, [%" PRIu64
                       ", %zu] values and [%" PRIu64 ", %zu] slots, without attributes",
                       name, n, n, cfg.dim, n, slot_floats);
    ps_table_entry *e;
    rc = ps_tables_create(ts, name, num_rows, &cfg, &e);
    if (rc == PS_ENOMEM) return ps_errf(rc, why, whylen, "out of memory");
    if (rc != PS_OK) return ps_errf(PS_EFORMAT, why, whylen, "table '%s': bad config", name);
    e->updates = updates;
    uint64_t bound = version > updates ? version : updates;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t id = word_pair(t[1].data + 2 * i), last = word_pair(t[2].data + 2 * i);
        if (num_rows && id >= num_rows)
            return ps_errf(PS_EFORMAT, why, whylen,
                           "table '%s': id %" PRIu64 " out of range (%" PRIu64 " rows)", name, id,
                           num_rows);
        if (last < 1 || last > bound)
            return ps_errf(PS_EFORMAT, why, whylen,
                           "table '%s': row %" PRIu64 " last pushed at step %" PRIu64
                           ", not in 1..%" PRIu64,
                           name, id, last, bound);
        static const float no_slots[1];
        const float *slots = slot_floats ? t[4].data + i * slot_floats : no_slots;
        rc = ps_table_restore_row(e->t, id, t[3].data + i * cfg.dim, slots, last);
        if (rc == PS_EEXIST)
            return ps_errf(PS_EFORMAT, why, whylen, "table '%s': id %" PRIu64 " appears twice",
                           name, id);
        if (rc != PS_OK) return ps_errf(PS_ENOMEM, why, whylen, "out of memory");
    }
    ps_table_counts counts = {.admitted = admitted,
                              .evicted = evicted,
                              .expired = expired,
                              .refused = num[5],
                              .dropped = num[6]};
    ps_table_restore_counts(e->t, &counts);
    for (unsigned k = 1; k < PS_CKPT_TABLE_TENSORS; k++) {
        free(t[k].data);
        t[k].data = NULL;
    }
    return PS_OK;
}
