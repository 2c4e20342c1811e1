/* The model's variables in PyTorch's names and layouts (see export_torch.h and
 * docs/FORMATS.md, "safetensors export"). */
#include "export_torch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layer_export.h"
#include "model_impl.h"
#include "ps_error.h"

/* The variable naming op j (kernel, else bias, else moving mean), or PS_NO_VAR. */
static size_t first_var(const ps_op *o) {
    if (o->kernel_var != PS_NO_VAR) return o->kernel_var;
    if (o->bias_var != PS_NO_VAR) return o->bias_var;
    return o->mean_var;
}

void ps_torch_module_name(const ps_model *m, size_t j, char *out, size_t outlen) {
    size_t v = first_var(&m->ops[j]);
    if (outlen) out[0] = '\0';
    if (v == PS_NO_VAR || !outlen) return;
    /* the layer's part of "<layer>/<variable>" */
    const char *name = m->vars[v].name, *slash = strrchr(name, '/');
    size_t n = slash ? (size_t)(slash - name) : strlen(name);
    if (n >= outlen) n = outlen - 1;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        out[i] = ok ? c : '_';
    }
    out[n] = '\0';
}

/* perm[p] = the model's flat index of torch's flat position p in tensor t:
 * torch holds an image larger than 1x1 as NCHW (flattened C, H, W), the model
 * as NHWC; a flat tensor keeps the order of what it was flattened from. */
static int torch_order(const ps_model *m, size_t t, size_t *perm, char *err, size_t errlen) {
    ps_shape s = ps_tensor_shape(m, t);
    size_t n = ps_shape_numel(s);
    if (s.h * s.w > 1) {
        for (size_t c = 0, p = 0; c < s.c; c++)
            for (size_t y = 0; y < s.h; y++)
                for (size_t x = 0; x < s.w; x++)
                    perm[p++] = (y * s.w + x) * s.c + c;
        return PS_OK;
    }
    const ps_op *o = t ? &m->ops[t - 1] : NULL;
    if (o && ps_layer_export_of(o->kind)->torch_keeps_order)
        return torch_order(m, o->in_t[0], perm, err, errlen);
    if (o && o->kind == OP_CONCAT) {
        for (size_t i = 0, off = 0; i < o->nin; i++) {
            size_t k = ps_shape_numel(ps_tensor_shape(m, o->in_t[i]));
            int rc = torch_order(m, o->in_t[i], perm + off, err, errlen);
            if (rc != PS_OK) return rc;
            for (size_t p = 0; p < k; p++)
                perm[off + p] += off;
            off += k;
        }
        return PS_OK;
    }
    if (o && o->kind == OP_ADD) {
        int rc = torch_order(m, o->in_t[0], perm, err, errlen);
        size_t *other = rc == PS_OK ? malloc(n * sizeof *other) : NULL;
        if (rc == PS_OK && !other) rc = PS_ENOMEM;
        for (size_t i = 1; rc == PS_OK && i < o->nin; i++) {
            rc = torch_order(m, o->in_t[i], other, err, errlen);
            if (rc == PS_OK && memcmp(other, perm, n * sizeof *perm) != 0) {
                snprintf(err, errlen,
                         "an Add (of layer '%s') sums vectors flattened in different orders: "
                         "torch's NCHW layout cannot express it",
                         o->prefix);
                rc = PS_EFORMAT;
            }
        }
        free(other);
        return rc;
    }
    for (size_t p = 0; p < n; p++) /* the input, Dense, GlobalAveragePooling2D, a 1x1 image */
        perm[p] = p;
    return PS_OK;
}

bool ps_torch_is_identity(const size_t *perm, size_t n) {
    for (size_t p = 0; p < n; p++)
        if (perm[p] != p) return false;
    return true;
}

bool ps_torch_dense_permuted(const ps_model *m, size_t j) {
    const ps_op *o = &m->ops[j];
    size_t n = ps_shape_numel(o->in);
    size_t *perm = malloc(n * sizeof *perm);
    char why[8];
    bool permuted = perm && torch_order(m, o->in_t[0], perm, why, sizeof why) == PS_OK &&
                    !ps_torch_is_identity(perm, n);
    free(perm);
    return permuted;
}

struct ps_torch_b {
    const ps_model *m;
    ps_torch_tensor *t;
    size_t n, cap;
    char *err;
    size_t errlen;
};

const ps_model *ps_torch_b_model(const ps_torch_b *b) {
    return b->m;
}

int ps_torch_b_order(ps_torch_b *b, size_t t, size_t *perm) {
    return torch_order(b->m, t, perm, b->err, b->errlen);
}

/* Appends an F32 entry <module>.<param> of the given shape (values left to fill). */
ps_torch_tensor *ps_torch_b_add(ps_torch_b *b, size_t j, const char *module, const char *param,
                            size_t var, const char *layout, int rank, const size_t *shape) {
    if (b->n == b->cap) {
        size_t nc = b->cap ? 2 * b->cap : 16;
        ps_torch_tensor *p = realloc(b->t, nc * sizeof *p);
        if (!p) return NULL;
        b->t = p;
        b->cap = nc;
    }
    ps_torch_tensor *e = &b->t[b->n];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s.%s", module, param);
    e->project = var == PS_NO_VAR ? NULL : b->m->vars[var].name;
    e->layout = layout;
    e->op = j;
    e->rank = rank;
    e->numel = 1;
    for (int d = 0; d < rank; d++) {
        e->shape[d] = shape[d];
        e->numel *= shape[d];
    }
    e->f32 = malloc((e->numel ? e->numel : 1) * sizeof *e->f32);
    if (!e->f32) return NULL;
    b->n++;
    return e;
}

const float *ps_torch_b_values(const ps_torch_b *b, size_t var) {
    return b->m->params + b->m->vars[var].offset;
}

/* A vector: the variable's values gathered by perm (NULL: as they are), or
 * fill when the variable is absent. */
int ps_torch_b_add_vector(ps_torch_b *b, size_t j, const char *module, const char *param, size_t var,
                      size_t n, const size_t *perm, float fill) {
    const char *layout = var == PS_NO_VAR ? (fill ? "absent in the model: ones" : "absent in "
                                                                                  "the model: zeros")
                         : perm      ? "in torch's flatten order"
                                     : "as is";
    ps_torch_tensor *e = ps_torch_b_add(b, j, module, param, var, layout, 1, &n);
    if (!e) return PS_ENOMEM;
    for (size_t i = 0; i < n; i++)
        e->f32[i] = var == PS_NO_VAR ? fill : ps_torch_b_values(b, var)[perm ? perm[i] : i];
    return PS_OK;
}

int ps_torch_tensors(const ps_model *m, ps_torch_tensor **out, size_t *n, char *err,
                     size_t errlen) {
    ps_torch_b b = {.m = m, .err = err, .errlen = errlen};
    int rc = PS_OK;
    *out = NULL;
    *n = 0;
    for (size_t j = 0; j < m->nops && rc == PS_OK; j++) {
        const ps_op *o = &m->ops[j];
        char module[64];
        ps_torch_module_name(m, j, module, sizeof module);
        if (!module[0]) continue;
        for (size_t k = 0; k < j; k++) {
            char other[64];
            ps_torch_module_name(m, k, other, sizeof other);
            if (strcmp(module, other) == 0) {
                snprintf(err, errlen,
                         "layers '%s' and '%s' both become torch module '%s' (characters "
                         "other than letters, digits and '_' become '_'): rename one",
                         m->ops[k].prefix, o->prefix, module);
                rc = PS_EFORMAT;
                break;
            }
        }
        if (rc != PS_OK) break;
        const ps_layer_export *le = ps_layer_export_of(o->kind);
        if (le->torch) rc = le->torch(&b, j, module);
    }
    if (rc == PS_ENOMEM) snprintf(err, errlen, "out of memory");
    if (rc != PS_OK) {
        ps_torch_tensors_free(b.t, b.n);
        return rc;
    }
    *out = b.t;
    *n = b.n;
    return PS_OK;
}

void ps_torch_tensors_free(ps_torch_tensor *t, size_t n) {
    for (size_t i = 0; t && i < n; i++)
        free(t[i].f32);
    free(t);
}
