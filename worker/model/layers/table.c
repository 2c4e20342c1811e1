/* The layer kinds (layer.h), one per op kind: a new layer is a file in this
 * folder and a line here. */
#include <stdio.h>
#include <string.h>

#include "layer.h"

extern const ps_layer ps_layer_dense, ps_layer_conv, ps_layer_dwconv, ps_layer_bn,
    ps_layer_maxpool, ps_layer_avgpool, ps_layer_gap, ps_layer_pad, ps_layer_reshape,
    ps_layer_dropout, ps_layer_activation, ps_layer_add, ps_layer_concat, ps_layer_sepconv,
    ps_layer_mul, ps_layer_rescale, ps_layer_crop, ps_layer_ln, ps_layer_norm, ps_layer_embedding,
    ps_layer_dot;

static const ps_layer *const all[] = {
    &ps_layer_dense,   &ps_layer_conv,    &ps_layer_dwconv, &ps_layer_bn,
    &ps_layer_maxpool, &ps_layer_avgpool, &ps_layer_gap,    &ps_layer_pad,
    &ps_layer_reshape, &ps_layer_dropout, &ps_layer_activation, &ps_layer_add,
    &ps_layer_concat,  &ps_layer_sepconv, &ps_layer_mul,    &ps_layer_rescale,
    &ps_layer_crop,    &ps_layer_ln,      &ps_layer_norm,   &ps_layer_embedding,
    &ps_layer_dot,
};
#define N_LAYERS (sizeof all / sizeof all[0])

const ps_layer *ps_layer_of(ps_op_kind kind) {
    for (size_t i = 0; i < N_LAYERS; i++)
        if (all[i]->kind == kind) return all[i];
    return NULL;
}

const ps_layer *ps_layer_for_class(const char *cls, const ps_layer_class **c) {
    for (size_t i = 0; i < N_LAYERS; i++)
        for (size_t k = 0; k < all[i]->nclasses; k++)
            if (strcmp(all[i]->classes[k].name, cls) == 0) {
                if (c) *c = &all[i]->classes[k];
                return all[i];
            }
    return NULL;
}

void ps_layer_class_list(bool spec, char *out, size_t n) {
    size_t len = 0;
    if (n) out[0] = '\0';
    for (size_t i = 0; i < N_LAYERS; i++)
        for (size_t k = 0; k < all[i]->nclasses; k++) {
            const ps_layer_class *c = &all[i]->classes[k];
            if ((spec && !c->in_spec) || (!spec && c->canon)) continue;
            int w = snprintf(out + len, n - len, "%s%s", len ? ", " : "", c->name);
            if (w < 0 || (size_t)w >= n - len) return;
            len += (size_t)w;
        }
}
