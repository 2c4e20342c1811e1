/* A model saved with psworker --save (a tensor file of kind 2, docs/FORMATS.md),
 * or Keras 3's .keras / .weights.h5 (keras_file.h), read back into a model of
 * the same architecture: --init-from and --evaluate. */
#ifndef PS_SAVED_MODEL_H
#define PS_SAVED_MODEL_H

#include <stddef.h>

#include "model.h"

/* Replaces m's parameters with the saved values at path (a path ending in .keras
 * or .weights.h5: ps_keras_load_weights, its message after flag): every variable of m by
 * name, with its size (extra tensors in the file are ignored). flag names the
 * option in the messages ("--init-from"). Returns PS_OK; the tensor file's error
 * (PS_EIO, PS_EFORMAT...) or PS_EFORMAT for another kind of file, a missing
 * variable or a size that differs, with the reason in err (m may then hold some
 * of the values). */
int ps_saved_model_load(ps_model *m, const char *path, const char *flag, char *err,
                        size_t errlen);

#endif
