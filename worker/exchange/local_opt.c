/* The in-worker optimizer (see local_opt.h). */
#include "local_opt.h"

#include <stdio.h>
#include <stdlib.h>

#include "optim.h"
#include "ps_error.h"

struct ps_local_opt {
    ps_model *m;
    float **slots;         /* [var * PS_OPT_MAX_SLOTS + k] */
    uint64_t t;            /* updates applied (the same for every variable) */
    ps_clip_range *ranges; /* the trainable variables' gradients: clipped when the */
    size_t n_ranges;       /* model's optimizer asks for it (else NULL / 0) */
};

int ps_trainable_ranges(const ps_model *m, ps_clip_range **out, size_t *n) {
    size_t nv = ps_model_num_vars(m), k = 0;
    *n = 0;
    *out = malloc((nv ? nv : 1) * sizeof **out);
    if (!*out) return PS_ENOMEM;
    for (size_t i = 0; i < nv; i++) {
        const ps_model_var *v = ps_model_var_at(m, i);
        if (v->trainable) (*out)[k++] = (ps_clip_range){v->offset, v->numel};
    }
    *n = k;
    return PS_OK;
}

int ps_local_opt_new(ps_model *m, ps_local_opt **out) {
    *out = NULL;
    ps_local_opt *o = calloc(1, sizeof *o);
    size_t n = ps_model_num_vars(m);
    if (!o || !(o->slots = calloc(PS_OPT_MAX_SLOTS * n + 1, sizeof *o->slots))) {
        free(o);
        return PS_ENOMEM;
    }
    o->m = m;
    if (ps_clip_needed(ps_model_optimizer(m)) &&
        ps_trainable_ranges(m, &o->ranges, &o->n_ranges) != PS_OK) {
        ps_local_opt_free(o);
        return PS_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        const ps_opt_spec *spec = ps_model_var_optimizer(m, i);
        int k = ps_optim_num_slots(spec->kind); /* frozen: SGD's, none */
        size_t numel = ps_model_var_at(m, i)->numel;
        for (int s = 0; s < k; s++) {
            float *p = malloc((numel ? numel : 1) * sizeof *p);
            if (!p) {
                ps_local_opt_free(o);
                return PS_ENOMEM;
            }
            float init = ps_optim_slot_init(spec, s);
            for (size_t j = 0; j < numel; j++)
                p[j] = init;
            o->slots[PS_OPT_MAX_SLOTS * i + (size_t)s] = p;
        }
    }
    *out = o;
    return PS_OK;
}

void ps_local_opt_free(ps_local_opt *o) {
    if (!o) return;
    size_t n = ps_model_num_vars(o->m);
    for (size_t i = 0; i < PS_OPT_MAX_SLOTS * n; i++)
        free(o->slots[i]);
    free(o->slots);
    free(o->ranges);
    free(o);
}

void ps_local_opt_step(ps_local_opt *o) {
    float *params = ps_model_params(o->m);
    float *grads = ps_model_grads(o->m);
    if (o->ranges) ps_clip_apply(ps_model_optimizer(o->m), grads, o->ranges, o->n_ranges);
    o->t++;
    for (size_t i = 0; i < ps_model_num_vars(o->m); i++) {
        const ps_model_var *v = ps_model_var_at(o->m, i);
        if (v->frozen) continue;
        /* the moving statistics have their own optimizer (SGD, rate 1) */
        ps_optim_apply(ps_model_var_optimizer(o->m, i), params + v->offset, grads + v->offset, &o->slots[PS_OPT_MAX_SLOTS * i],
                       v->numel, o->t);
    }
}

float *ps_local_opt_slot(ps_local_opt *o, size_t var, int k) {
    if (var >= ps_model_num_vars(o->m) || k < 0 || k >= PS_OPT_MAX_SLOTS) return NULL;
    return o->slots[PS_OPT_MAX_SLOTS * var + (size_t)k];
}

uint64_t ps_local_opt_updates(const ps_local_opt *o) {
    return o->t;
}

void ps_local_opt_set_updates(ps_local_opt *o, uint64_t t) {
    o->t = t;
}

int ps_local_opt_state(ps_local_opt *o, const char *prefix, ps_wstate *s) {
    char name[600];
    snprintf(name, sizeof name, "%s/updates", prefix);
    int rc = ps_wstate_add(s, name, NULL, 0, &o->t);
    for (size_t i = 0; rc == PS_OK && i < ps_model_num_vars(o->m); i++) {
        const ps_model_var *v = ps_model_var_at(o->m, i);
        for (int k = 0; rc == PS_OK && k < PS_OPT_MAX_SLOTS; k++) {
            float *slot = o->slots[PS_OPT_MAX_SLOTS * i + (size_t)k];
            if (!slot) continue;
            snprintf(name, sizeof name, "%s/%s/slot%d", prefix, v->name, k);
            rc = ps_wstate_add(s, name, slot, v->numel, NULL);
        }
    }
    return rc;
}
