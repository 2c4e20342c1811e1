/* The shard's variables: named dense float32 tensors, each with its optimizer,
 * slots and (sync mode) a gradient accumulator. Owned by the server; no locks:
 * only the event loop touches it. */
#ifndef PS_STORE_H
#define PS_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "optim_spec.h"
#include "var_limits.h"

typedef struct {
    char *name; /* owned */
    size_t rank;
    uint64_t shape[PS_WIRE_MAX_RANK];
    size_t numel;
    float *w; /* values: a reference-counted block (see ps_var_share), never NULL */
    float *slots[PS_OPT_MAX_SLOTS]; /* owned: optimizer state, ps_optim_num_slots used */
    ps_opt_spec opt;
    uint64_t updates;    /* optimizer applies so far (Adam's t) */
    float *gsum;         /* owned, sync mode: gradients summed for the open step */
    uint32_t gcount;     /* pushes summed into gsum */
    uint64_t cow_copies; /* updates that copied w because a reply still held it */
} ps_var;

typedef struct {
    ps_var **vars; /* owned, in creation order */
    size_t n, cap;
    size_t *index; /* open-addressing hash: slot -> var index + 1 (0 = empty) */
    size_t index_cap;
} ps_store;

void ps_store_init(ps_store *s);
void ps_store_free(ps_store *s);
/* Looks a variable up by name; NULL when absent. */
ps_var *ps_store_find(const ps_store *s, const char *name);
/* Creates a variable with initial values (copied) and its optimizer. The name is
 * copied. Returns PS_OK or PS_ENOMEM; the caller checked the name is new. */
int ps_store_create(ps_store *s, const char *name, size_t rank, const uint64_t *shape,
                    const float *init, const ps_opt_spec *opt, ps_var **out);
/* 1 when the variable has exactly this shape, else 0. */
int ps_var_same_shape(const ps_var *v, size_t rank, const uint64_t *shape);
/* The variable's current values (numel floats) with a reference taken on their
 * block, for a zero-copy reply: later updates do not change what it reads. The
 * holder drops the reference with ps_var_unshare(values, NULL), from any thread
 * (its signature is a ZeroMQ free function's). */
const float *ps_var_share(const ps_var *v);
void ps_var_unshare(void *values, void *hint);
/* Makes v->w safe to write: in place when no reply holds it, else a fresh
 * copy (copy-on-write). PS_OK or PS_ENOMEM. Every writer of v->w calls it. */
int ps_var_writable(ps_var *v);
/* Applies one optimizer update from g (numel floats). PS_OK or PS_ENOMEM. */
int ps_var_apply(ps_var *v, const float *g);
/* Sync mode: adds g to the accumulator (allocated on first use). PS_OK or PS_ENOMEM. */
int ps_var_accumulate(ps_var *v, const float *g);
/* Sync mode: applies the mean of the accumulated gradients, if any, and clears
 * them. PS_OK or PS_ENOMEM (the gradients are dropped). */
int ps_var_apply_accumulated(ps_var *v);
/* Total bytes of values held. */
size_t ps_store_bytes(const ps_store *s);

#endif
