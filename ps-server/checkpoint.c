/* psd's checkpoints (see checkpoint.h): the store as checkpoint variables and
 * back; the file itself (layout, naming, newest valid, pruning) is
 * common/ckpt_file.c, shared with the all-reduce chief. */
#include "checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"
#include "ps_error.h"

int ps_ckpt_save(const char *dir, int keep, const ps_store *st, const ps_ckpt_meta *m,
                 char *path_out, size_t path_len, uint64_t *bytes, char *err, size_t errlen) {
    if (!st) {
        snprintf(err, errlen, "checkpoint: no store");
        return PS_EINVAL;
    }
    ps_ckpt_var *v = calloc(st->n ? st->n : 1, sizeof *v);
    if (!v) {
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    for (size_t i = 0; i < st->n; i++) {
        const ps_var *s = st->vars[i];
        v[i] = (ps_ckpt_var){.name = s->name,
                             .rank = s->rank,
                             .shape = s->shape,
                             .numel = s->numel,
                             .w = s->w,
                             .slots = (const float *const *)s->slots,
                             .opt = s->opt,
                             .updates = s->updates};
    }
    int rc = ps_ckpt_write(dir, keep, v, st->n, NULL, 0, m, path_out, path_len, bytes, err, errlen);
    free(v);
    return rc;
}

/* Builds the store from a checked file (no duplicate names). Frees each
 * tensor's data once copied (lower peak memory). */
static int load_store(void *user, ps_tf_file *f, const ps_ckpt_loaded_var *vars, size_t n,
                      const ps_ckpt_meta *m, char *why, size_t whylen) {
    (void)m;
    ps_store *st = user;
    for (size_t i = 0; i < n; i++) {
        const ps_ckpt_loaded_var *lv = &vars[i];
        if (ps_store_find(st, lv->name)) {
            snprintf(why, whylen, "variable '%s' appears twice", lv->name);
            return PS_EFORMAT;
        }
        Ps__TensorMeta meta = PS__TENSOR_META__INIT;
        meta.name = (char *)lv->name;
        meta.dtype = PS__DTYPE__DT_F32;
        meta.n_shape = lv->rank;
        meta.shape = (uint64_t *)lv->shape;
        ps_var *v;
        ps_tf_owned *t = &f->t[lv->tensor];
        if (ps_store_create(st, &meta, t->data, &lv->opt, &v) != PS_OK) {
            snprintf(why, whylen, "out of memory");
            return PS_ENOMEM;
        }
        v->updates = lv->updates;
        free(t->data);
        t->data = NULL;
        for (uint32_t s = 0; s < lv->nslots; s++) {
            ps_tf_owned *sl = &f->t[lv->tensor + 1 + s];
            memcpy(v->slots[s], sl->data, v->numel * sizeof(float));
            free(sl->data);
            sl->data = NULL;
        }
    }
    return PS_OK;
}

/* The file's store goes into a fresh one first, kept only when complete. */
typedef struct {
    ps_store fresh;
} restore_ctx;

static int accept_store(void *user, ps_tf_file *f, const ps_ckpt_loaded_var *vars, size_t n,
                        const ps_ckpt_meta *m, char *why, size_t whylen) {
    restore_ctx *c = user;
    ps_store_free(&c->fresh);
    ps_store_init(&c->fresh);
    return load_store(&c->fresh, f, vars, n, m, why, whylen);
}

int ps_ckpt_restore(const char *dir, ps_store *st, ps_ckpt_meta *m, char *path_out, size_t path_len,
                    char *err, size_t errlen) {
    if (!dir || !st || st->n != 0) {
        snprintf(err, errlen, "checkpoint restore: needs a directory and an empty store");
        return PS_EINVAL;
    }
    restore_ctx c;
    ps_store_init(&c.fresh);
    int rc = ps_ckpt_read_newest(dir, accept_store, &c, m, path_out, path_len, err, errlen);
    if (rc == PS_OK) {
        ps_store_free(st);
        *st = c.fresh;
    } else {
        ps_store_free(&c.fresh);
    }
    return rc;
}
