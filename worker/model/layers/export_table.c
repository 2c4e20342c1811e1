/* The layer kinds' export parts (worker/export/layer_export.h), the same
 * kinds as table.c lists; built into the export library. */
#include "layer_export.h"

extern const ps_layer_export ps_layer_export_dense, ps_layer_export_conv, ps_layer_export_dwconv,
    ps_layer_export_bn, ps_layer_export_maxpool, ps_layer_export_avgpool, ps_layer_export_gap,
    ps_layer_export_pad, ps_layer_export_reshape, ps_layer_export_dropout,
    ps_layer_export_activation, ps_layer_export_add, ps_layer_export_concat,
    ps_layer_export_sepconv, ps_layer_export_mul, ps_layer_export_rescale, ps_layer_export_crop,
    ps_layer_export_ln, ps_layer_export_norm;

static const ps_layer_export *const all[] = {
    &ps_layer_export_dense,   &ps_layer_export_conv,       &ps_layer_export_dwconv,
    &ps_layer_export_bn,      &ps_layer_export_maxpool,    &ps_layer_export_avgpool,
    &ps_layer_export_gap,     &ps_layer_export_pad,        &ps_layer_export_reshape,
    &ps_layer_export_dropout, &ps_layer_export_activation, &ps_layer_export_add,
    &ps_layer_export_concat,  &ps_layer_export_sepconv,    &ps_layer_export_mul,
    &ps_layer_export_rescale, &ps_layer_export_crop,       &ps_layer_export_ln,
    &ps_layer_export_norm,
};

const ps_layer_export *ps_layer_export_of(ps_op_kind kind) {
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->kind == kind) return all[i];
    return NULL;
}
