/* The model's optimizer as the embedding tables' row optimizer (emb_tables.h). */
#include "emb_tables.h"

#include <stdio.h>

#include "ps_error.h"

int ps_emb_row_opt(const ps_model *m, ps_row_opt *out, char *err, size_t errlen) {
    const ps_opt_spec *o = ps_model_optimizer(m);
    const char *why = NULL;
    if (o->schedule.kind != PS_LR_CONSTANT)
        why = "a learning-rate schedule";
    else if (o->weight_decay != 0)
        why = "weight decay";
    else if (o->kind == PS_OPT_SGD && o->momentum != 0)
        why = "SGD with momentum";
    if (!why && o->kind == PS_OPT_SGD) {
        *out = ps_row_opt_default(PS_ROW_SGD, o->lr);
    } else if (!why && o->kind == PS_OPT_ADAGRAD) {
        *out = ps_row_opt_default(PS_ROW_ADAGRAD, o->lr);
        out->eps = o->epsilon;
        out->initial_accumulator = o->initial_accumulator;
    } else if (!why && o->kind == PS_OPT_ADAM) {
        *out = ps_row_opt_default(PS_ROW_LAZY_ADAM, o->lr);
        out->eps = o->epsilon;
        out->beta_1 = o->beta1, out->beta_2 = o->beta2;
    } else {
        snprintf(err, errlen,
                 "the embedding tables' rows are updated by a sparse optimizer: the model's "
                 "optimizer must be SGD without momentum, Adagrad or Adam (lazy Adam for the "
                 "rows), constant rate, no weight decay; it is %s%s%s",
                 ps_opt_kind_name(o->kind), why ? " with " : "", why ? why : "");
        return PS_EINVAL;
    }
    return PS_OK;
}
