/* The all-reduce chief's checkpoints (see model_ckpt.h). */
#include "model_ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_file.h"
#include "optim.h"
#include "ps_error.h"

int ps_model_ckpt_save(const char *dir, unsigned keep, ps_model *m, ps_local_opt *o,
                       uint64_t clock, const char *job_id, char *path_out, size_t path_len,
                       char *err, size_t errlen) {
    return ps_model_ckpt_save_scaled(dir, keep, m, o, NULL, NULL, clock, job_id, path_out,
                                     path_len, err, errlen);
}

int ps_model_ckpt_save_scaled(const char *dir, unsigned keep, ps_model *m, ps_local_opt *o,
                              const ps_loss_scale *ls, const ps_model_ckpt_extra *extra,
                              uint64_t clock, const char *job_id, char *path_out,
                              size_t path_len, char *err, size_t errlen) {
    size_t n = ps_model_num_vars(m), n_extra = extra ? extra->n : 0;
    ps_ckpt_var *v = calloc(n + 1 + n_extra, sizeof *v);
    const float **slots = calloc(n * PS_OPT_MAX_SLOTS + 1, sizeof *slots);
    uint64_t *shapes = calloc(n * PS_WIRE_MAX_RANK + 1, sizeof *shapes);
    if (!v || !slots || !shapes) {
        free(v), free(slots), free(shapes);
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    uint64_t t = ps_local_opt_updates(o);
    for (size_t i = 0; i < n; i++) {
        const ps_model_var *mv = ps_model_var_at(m, i);
        const ps_opt_spec *spec = ps_model_var_optimizer(m, i);
        for (int d = 0; d < mv->rank; d++)
            shapes[i * PS_WIRE_MAX_RANK + (size_t)d] = mv->shape[d];
        for (int k = 0; k < ps_optim_num_slots(spec->kind); k++)
            slots[i * PS_OPT_MAX_SLOTS + (size_t)k] = ps_local_opt_slot(o, i, k);
        v[i] = (ps_ckpt_var){.name = mv->name,
                             .rank = (size_t)mv->rank,
                             .shape = &shapes[i * PS_WIRE_MAX_RANK],
                             .numel = mv->numel,
                             .w = ps_model_params(m) + mv->offset,
                             .slots = &slots[i * PS_OPT_MAX_SLOTS],
                             .opt = *spec,
                             .updates = t};
    }
    float ls_state[2];
    uint64_t ls_shape[PS_WIRE_MAX_RANK] = {2};
    const float *no_slots[PS_OPT_MAX_SLOTS] = {0};
    if (ls) { /* one more entry, after the model's: the loss scaler */
        ls_state[0] = ls->scale;
        ls_state[1] = (float)ls->good_steps; /* < 2^24: exact */
        v[n++] = (ps_ckpt_var){.name = PS_MODEL_CKPT_LOSS_SCALE,
                               .rank = 1,
                               .shape = ls_shape,
                               .numel = 2,
                               .w = ls_state,
                               .slots = no_slots,
                               .opt = ps_opt_spec_default(PS_OPT_SGD),
                               .updates = t};
    }
    for (size_t i = 0; i < n_extra; i++) v[n++] = extra->vars[i];
    /* one "shard" holding the whole model; mode 0: every step is synchronous */
    ps_ckpt_meta meta = {.version = clock,
                         .updates_applied = t,
                         .shard = 0,
                         .num_shards = 1,
                         .mode = 0,
                         .incarnation = (uint64_t)getpid()};
    snprintf(meta.job_id, sizeof meta.job_id, "%s", job_id ? job_id : "");
    int rc = ps_ckpt_write(dir, keep ? (int)keep : 1, v, n, NULL, 0, &meta, path_out, path_len,
                           NULL, err, errlen);
    free(v), free(slots), free(shapes);
    return rc;
}

typedef struct {
    ps_model *m;
    ps_local_opt *o;
    ps_loss_scale *ls;
    const ps_model_ckpt_extra *extra;
    const char *job_id;
    uint64_t updates;
} load_ctx;

/* Checks the file's variables against the model (all of them, in order, the
 * same sizes and optimizer kind), then copies values and slots in. */
static int accept_model(void *user, ps_tf_file *f, const ps_ckpt_loaded_var *vars, size_t n,
                        const ps_ckpt_meta *meta, char *why, size_t whylen) {
    load_ctx *c = user;
    const char *mine = c->job_id ? c->job_id : "";
    if (strcmp(meta->job_id, mine) != 0) {
        snprintf(why, whylen, "it holds job '%s', this is job '%s' (--job-id); give another "
                 "--checkpoint-dir or remove it", meta->job_id, mine);
        return PS_EEXIST;
    }
    size_t nv = ps_model_num_vars(c->m);
    const ps_ckpt_loaded_var *lsv = NULL; /* the loss scaler's entry, after the model's */
    if (n > nv && strcmp(vars[nv].name, PS_MODEL_CKPT_LOSS_SCALE) == 0 && vars[nv].numel == 2)
        lsv = &vars[nv];
    size_t first_extra = nv + (lsv != NULL), n_extra = n > first_extra ? n - first_extra : 0;
    if (n < nv || (n_extra && !(c->extra && c->extra->load))) {
        snprintf(why, whylen, "%zu variables, the model has %zu", n - (lsv != NULL), nv);
        return PS_EFORMAT;
    }
    n = nv;
    for (size_t i = 0; i < n; i++) {
        const ps_model_var *mv = ps_model_var_at(c->m, i);
        const ps_opt_spec *spec = ps_model_var_optimizer(c->m, i);
        if (strcmp(vars[i].name, mv->name) != 0 || vars[i].numel != mv->numel) {
            snprintf(why, whylen, "variable %zu is '%s' [%zu values], the model's '%s' [%zu]", i,
                     vars[i].name, vars[i].numel, mv->name, mv->numel);
            return PS_EFORMAT;
        }
        if (vars[i].opt.kind != spec->kind) {
            snprintf(why, whylen, "variable '%s' was trained with %s, the model uses %s",
                     mv->name, ps_opt_kind_name(vars[i].opt.kind), ps_opt_kind_name(spec->kind));
            return PS_EFORMAT;
        }
    }
    if (c->extra && c->extra->load) { /* checked (and taken) before anything is copied */
        int rc = c->extra->load(c->extra->user, f, vars + first_extra, n_extra, why, whylen);
        if (rc != PS_OK) return rc;
    }
    for (size_t i = 0; i < n; i++) {
        const ps_model_var *mv = ps_model_var_at(c->m, i);
        memcpy(ps_model_params(c->m) + mv->offset, f->t[vars[i].tensor].data,
               mv->numel * sizeof(float));
        for (uint32_t k = 0; k < vars[i].nslots; k++)
            memcpy(ps_local_opt_slot(c->o, i, (int)k), f->t[vars[i].tensor + 1 + k].data,
                   mv->numel * sizeof(float));
    }
    if (lsv && c->ls) {
        const float *st = f->t[lsv->tensor].data;
        if (st[0] > 0.0f && st[1] >= 0.0f && st[1] < (float)c->ls->period) {
            c->ls->scale = st[0];
            c->ls->good_steps = (uint32_t)st[1];
        }
    }
    c->updates = n ? vars[0].updates : meta->updates_applied;
    return PS_OK;
}

int ps_model_ckpt_load(const char *dir, ps_model *m, ps_local_opt *o, const char *job_id,
                       uint64_t *clock, char *path_out, size_t path_len, char *err,
                       size_t errlen) {
    return ps_model_ckpt_load_scaled(dir, m, o, NULL, NULL, job_id, clock, path_out, path_len,
                                     err, errlen);
}

int ps_model_ckpt_load_scaled(const char *dir, ps_model *m, ps_local_opt *o, ps_loss_scale *ls,
                              const ps_model_ckpt_extra *extra, const char *job_id,
                              uint64_t *clock, char *path_out, size_t path_len, char *err,
                              size_t errlen) {
    load_ctx c = {.m = m, .o = o, .ls = ls, .extra = extra, .job_id = job_id};
    ps_ckpt_meta meta;
    int rc = ps_ckpt_read_newest(dir, accept_model, &c, &meta, path_out, path_len, err, errlen);
    if (rc != PS_OK) return rc;
    ps_local_opt_set_updates(o, c.updates);
    *clock = meta.version;
    return PS_OK;
}
