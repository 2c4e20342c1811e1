/* The Keras 3 config.json of a model and the layers its weights file lists
 * (keras_config.c). Internal to export/ (keras_export.c). */
#ifndef PS_KERAS_CONFIG_H
#define PS_KERAS_CONFIG_H

#include <stddef.h>

#include "keras_h5.h"
#include "model.h"

/* config.json (*config, malloc'd text) and the weights file's layers (*ls, n;
 * malloc'd), in model.layers order: the config.json of the .keras archive
 * source (psworker --model; may be NULL) as written when it names every layer
 * with variables (its empty compile_config replaced by psworker's), else m as
 * a Keras 3 Functional model with psworker's compile_config (the loss as a
 * Keras loss object with from_logits, the optimizer's class and settings; no
 * optimizer state). Returns PS_OK, or PS_ENOMEM / PS_EINVAL with the reason in
 * err. */
int ps__keras_config(const ps_model *m, const char *source, char **config, ps_keras_layer **ls,
                     size_t *n, char *err, size_t errlen);

#endif
