/* Dropout in the exports: the identity (inference). */
#include <cjson/cJSON.h>

#include "layer_export.h"
#include "ps_error.h"

static int onnx(ps_onnx *b, size_t j, const ps_op *o, const char *in, const char **out) {
    (void)b;
    (void)j;
    (void)o;
    *out = in;
    return PS_OK;
}

static void describe(cJSON *e, const ps_model *m, size_t j, const ps_op *o) {
    (void)m;
    (void)j;
    cJSON_AddNumberToObject(e, "rate", o->rate);
    if (o->per_sample) cJSON_AddBoolToObject(e, "per_sample", true);
}

static const char *keras(cJSON *c, const ps_op *o) {
    cJSON_AddNumberToObject(c, "rate", o->rate);
    cJSON_AddNullToObject(c, "seed");
    if (!o->per_sample) {
        cJSON_AddNullToObject(c, "noise_shape");
        return "Dropout";
    }
    cJSON *ns = cJSON_AddArrayToObject(c, "noise_shape"); /* whole samples */
    cJSON_AddItemToArray(ns, cJSON_CreateNull());
    for (int k = 0; k < (o->image ? 3 : 1); k++)
        cJSON_AddItemToArray(ns, cJSON_CreateNumber(1));
    return "Dropout";
}

const ps_layer_export ps_layer_export_dropout = {
    .kind = OP_DROPOUT,
    .onnx_name = "dropout",
    .onnx = onnx,
    .class_name = "Dropout",
    .describe = describe,
    .torch_keeps_order = true,
    .keras = keras,
};
