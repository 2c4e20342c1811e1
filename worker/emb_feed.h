/* A batch's embedding rows (the training loop's side of the row path): for
 * each Embedding layer of the model, the batch's ids of its id input (id
 * input k reads the data's next id columns, one per id of its shape, in the data spec's order),
 * deduplicated, their rows fetched through the exchange (psd, or a whole
 * table here with --no-ps) and given to the model; after the step the rows'
 * gradients handed back to the exchange. */
#ifndef PS_EMB_FEED_H
#define PS_EMB_FEED_H

#include <stddef.h>
#include <stdint.h>

#include "exchange.h"
#include "model.h"

typedef struct ps_emb_feed ps_emb_feed;

/* For model m, whose data gives n_ids ids per record. PS_EINVAL (err says
 * why: the counts disagree) or PS_ENOMEM. *out NULL for a model with no
 * embedding layers (nothing to do: every call below accepts NULL). */
int ps_emb_feed_new(const ps_model *m, size_t n_ids, ps_emb_feed **out, char *err, size_t errlen);
void ps_emb_feed_free(ps_emb_feed *f);

/* Gives every embedding layer its rows for the nb records whose ids are
 * ids[nb * n_ids] (record after record). PS_OK or the exchange's error. */
int ps_emb_feed_rows(ps_emb_feed *f, ps_model *m, ps_exchange *ex, const uint64_t *ids, size_t nb,
                     char *err, size_t errlen);
/* After a train step: the trainable layers' row gradients to the exchange. */
int ps_emb_feed_push(ps_emb_feed *f, ps_model *m, ps_exchange *ex, char *err, size_t errlen);

#endif
