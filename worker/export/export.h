/* --export FILE: the trained model in a format other programs read, chosen by
 * FILE's extension: .onnx (export_onnx.c: architecture and weights, ONNX),
 * .safetensors (export_safetensors.c: the weights, with the model JSON beside
 * them), .keras or .weights.h5 (keras_export.c: Keras 3's archive, or its
 * weights file alone). The chief writes it after training, from the values it evaluated. */
#ifndef PS_EXPORT_H
#define PS_EXPORT_H

#include <stddef.h>

#include "model.h"

/* The formats, by extension. */
typedef enum {
    PS_EXPORT_ONNX,
    PS_EXPORT_SAFETENSORS,
    PS_EXPORT_KERAS,
    PS_EXPORT_WEIGHTS_H5
} ps_export_format;

/* Picks the format from path's extension. Returns PS_OK, or PS_EINVAL with the
 * reason in err (no or another extension: the supported ones are listed). */
int ps_export_format_of(const char *path, ps_export_format *out, char *err, size_t errlen);

/* Writes m (its architecture and current parameters) to path in the format its
 * extension names; the file appears whole or not at all (written beside, then
 * renamed). Returns PS_OK, or an error with a one-line reason in err (a layer
 * the format cannot express is named). */
int ps_export_model(const ps_model *m, const char *path, char *err, size_t errlen);
/* The same, with the file the model came from (psworker --model; NULL: none):
 * a Keras 3 .keras archive there gives a .keras / .weights.h5 export its own
 * config.json (and layer order) rather than one made from the graph. */
int ps_export_model_from(const ps_model *m, const char *source, const char *path, char *err,
                         size_t errlen);

/* PS_OK when every layer of m has an export; else PS_EINVAL naming the first
 * that has none (an Embedding: its table is not the model's). */
int ps_export_check_layers(const ps_model *m, const char *path, char *err, size_t errlen);

/* One per format (export_onnx.c, export_safetensors.c, keras_export.c); same
 * contract. The Keras files hold no optimizer state. */
int ps_export_onnx(const ps_model *m, const char *path, char *err, size_t errlen);
int ps_export_safetensors(const ps_model *m, const char *path, char *err, size_t errlen);
int ps_export_keras(const ps_model *m, const char *source, const char *path, char *err,
                    size_t errlen);
int ps_export_weights_h5(const ps_model *m, const char *source, const char *path, char *err,
                         size_t errlen);

#endif
