/* The worker's input side: what --data, --test-data and the data spec name,
 * opened as record sources and fed through pipelines (worker/data/pipeline.h)
 * for training, validation and the test set. IDX and CIFAR-10 still load
 * whole (they are small), adapted to the model and relabelled once; every
 * other format streams from disk, prepared (augment.h) on the input threads.
 * The chief alone opens the validation and test sets. */
#ifndef PS_INPUT_H
#define PS_INPUT_H

#include <stdbool.h>
#include <stddef.h>

#include "data.h"
#include "labels.h"
#include "dataspec.h"
#include "model.h"
#include "pipeline.h"
#include "prepare.h"
#include "source.h"
#include "train.h"


typedef struct {
    ps_data_spec spec;     /* --data resolved */
    bool in_memory;        /* IDX or CIFAR-10 */
    ps_dataset train, test; /* in memory */
    ps_source *train_src, *val_src, *test_src; /* val_src may be train_src (a split) */
    size_t *train_recs, *val_recs, *test_recs; /* subsets (NULL: all) */
    size_t n_train_recs, n_val_recs, n_test_recs;
    ps_pipeline *train_pl, *val_pl, *test_pl;
    ps_prep *prep;      /* training's */
    ps_prep *eval_prep; /* validation's and test's */
    ps_data_spec test_spec;
    bool have_test_spec;
    int32_t label_map[PS_LABELS_MAX]; /* streamed data relabelled: class -> label */
    size_t label_map_n;               /* 0: labels as they are */
    unsigned train_threads;           /* the training pipeline's input threads */
} ps_input;

/* Opens everything for worker cfg->index of cfg->workers over model m (its
 * input shape and classes) with batches of `batch`. Logs what it opened.
 * Returns PS_OK or an error with a one-line reason in err. */
int ps_input_open(ps_input *in, const ps_train_config *cfg, const ps_model *m, size_t batch,
                  char *err, size_t errlen);
void ps_input_close(ps_input *in);

/* An elastic job's epoch (elastic.h): the training pipeline opened again for share
 * `rank` of `count` of the same records, in batches of `batch` (steps 0), or spread over
 * exactly `steps` batches (ps_pipeline_cfg.steps). The old pipeline is closed first; on
 * an error there is none (in->train_pl NULL) and err says why. */
int ps_input_reshard(ps_input *in, const ps_train_config *cfg, const ps_model *m,
                     unsigned rank, unsigned count, size_t batch, size_t steps, char *err,
                     size_t errlen);

/* PS_OK for a source model m can train on: as many id columns as the model
 * has id inputs, float targets only for a loss that takes them; PS_EINVAL,
 * err saying why, otherwise. */
int ps_input_source_check(const ps_source *src, const ps_model *m, char *err, size_t errlen);

typedef enum { PS_INPUT_VALIDATION, PS_INPUT_TEST } ps_input_set;

/* Whether the set is there (on the chief). */
bool ps_input_has(const ps_input *in, ps_input_set set);
/* For data with ids: gives the model's embedding layers the rows of a batch's
 * nb records (ids[nb * n_ids]) before it is evaluated. */
typedef int (*ps_input_rows_fn)(void *ctx, const uint64_t *ids, size_t nb, char *err,
                                size_t errlen);
/* What an evaluation gives: the mean loss, the accuracy (float targets: the
 * root mean squared error), the samples seen, and the ROC AUC when the model's
 * metrics ask for it (ps_model_wants_auc; else -1, and -1 when a class is absent). */
typedef struct {
    float loss;
    double acc;
    size_t n;
    double auc;
} ps_eval_result;

/* Evaluates m on the whole set into *r; rows (may be NULL) feeds the embedding
 * rows of each batch. Returns PS_OK or an error with err set. */
int ps_input_evaluate(ps_input *in, ps_model *m, ps_input_set set, ps_input_rows_fn rows,
                      void *ctx, ps_eval_result *r, char *err, size_t errlen);

#endif
