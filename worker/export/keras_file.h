/* Keras 3's files: a .keras archive (a zip of config.json, metadata.json and
 * model.weights.h5) and a bare .weights.h5, read into a model (psworker --model
 * FILE.keras, --init-from, --evaluate) and written from one (--export,
 * keras_export.c). The optimizer's state is neither read nor written.
 * docs/FORMATS.md, "Keras 3 files", is the contract. */
#ifndef PS_KERAS_FILE_H
#define PS_KERAS_FILE_H

#include <stdbool.h>
#include <stddef.h>

#include "model.h"

/* What an archive may hold, uncompressed: checked before anything is read. */
#define PS_KERAS_MAX_CONFIG ((size_t)16 << 20)    /* config.json, metadata.json */
#define PS_KERAS_MAX_WEIGHTS ((size_t)1024 << 20) /* model.weights.h5 (read into memory) */

typedef enum {
    PS_KERAS_NONE = 0, /* another extension */
    PS_KERAS_ARCHIVE,  /* FILE.keras */
    PS_KERAS_WEIGHTS   /* FILE.weights.h5 */
} ps_keras_kind;

/* The kind of file path names, by its extension. */
ps_keras_kind ps_keras_kind_of(const char *path);

/* Replaces m's parameters with the weights of a .keras archive or a
 * .weights.h5 file: every variable of m, by Keras layer name and order, each
 * shape checked (docs/FORMATS.md). Returns PS_OK, or PS_EIO (cannot read) /
 * PS_EFORMAT (a bad archive, a member outside the limits or escaping it, a
 * missing, extra or misshapen weight) with "FILE: what: why" in err (m may then
 * hold some of the values). */
int ps_keras_load_weights(ps_model *m, const char *path, char *err, size_t errlen);

/* The model whose architecture is the archive's config.json, its loss and
 * optimizer from config.json's compile_config, else the loss from ov (a bare
 * to_json() file's rule). The weights are not loaded: call
 * ps_keras_load_weights after ps_model_init_params. *out owns the new model on
 * PS_OK; else an error with "FILE: why" in err. */
int ps_keras_load_model(const char *path, const ps_model_overrides *ov, ps_model **out, char *err,
                        size_t errlen);

/* --model FILE: a .keras archive (ps_keras_load_model) or anything
 * ps_model_load_with reads. Same contract. */
int ps_model_open(const char *path, const ps_model_overrides *ov, ps_model **out, char *err,
                  size_t errlen);

/* Whether the spec file at spec_path is a wrapper naming a .keras archive
 * ({"keras": "base.keras", "loss": ..., "trainable": ..., "head": ...}); its
 * path (relative to the spec's directory) into archive. ps_model_open builds
 * such a model from the archive's config.json. */
bool ps_keras_wrapped_archive(const char *spec_path, char *archive, size_t n);

/* Copies into m, by variable name, every variable the archive's model has too
 * (shapes must agree): a base's weights under a new head. *copied counts
 * them; the others keep their values. PS_EFORMAT when none matches. */
int ps_keras_load_weights_by_name(ps_model *m, const char *archive, size_t *copied, char *err,
                                  size_t errlen);

/* Internal to export/ (keras_export.c): the archive's config.json parsed (*out
 * owned by the caller; the same checks as ps_keras_load_model), and its text
 * as written (*text malloc'd, when text is not NULL). */
struct cJSON;
int ps__keras_read_config(const char *path, struct cJSON **out, char **text, char *err,
                          size_t errlen);

#endif
