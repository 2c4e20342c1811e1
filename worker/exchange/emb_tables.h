/* The model's embedding tables as a strategy keeps them: each Embedding
 * layer (ps_model_embedding_at) becomes a table of the same name whose rows
 * are updated by a sparse optimizer (common/optim_rows.h) mapped from the
 * model's optimizer: SGD (no momentum) -> sgd, Adagrad -> adagrad, Adam ->
 * lazy_adam (a row's moments move only in the steps it is pushed); others are
 * refused, naming these. The rate is the optimizer's initial one (schedules
 * and weight decay are not applied to rows: refused, not ignored). */
#ifndef PS_EMB_TABLES_H
#define PS_EMB_TABLES_H

#include <stddef.h>

#include "model.h"
#include "optim_rows.h"

/* The row optimizer for the model's tables. PS_OK, or PS_EINVAL with the reason. */
int ps_emb_row_opt(const ps_model *m, ps_row_opt *out, char *err, size_t errlen);

#endif
