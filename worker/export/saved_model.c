/* Saved models read back (see saved_model.h). */
#include "saved_model.h"

#include <stdio.h>
#include <string.h>

#include "keras_file.h"
#include "ps_error.h"
#include "tensorfile.h"

int ps_saved_model_load(ps_model *m, const char *path, const char *flag, char *err,
                        size_t errlen) {
    ps_tf_file f;
    char why[600];
    if (ps_keras_kind_of(path) != PS_KERAS_NONE) {
        int krc = ps_keras_load_weights(m, path, why, sizeof why);
        if (krc != PS_OK) snprintf(err, errlen, "%s %s", flag, why);
        return krc;
    }
    int rc = ps_tf_read(path, &f, why, sizeof why);
    if (rc != PS_OK) {
        snprintf(err, errlen, "%s %s: %s", flag, path, why);
        return rc;
    }
    if (f.h.kind != PS_TF_MODEL) {
        snprintf(err, errlen, "%s %s: not a saved model (tensor file kind %u)", flag, path,
                 f.h.kind);
        ps_tf_file_free(&f);
        return PS_EFORMAT;
    }
    for (size_t i = 0; i < ps_model_num_vars(m) && rc == PS_OK; i++) {
        const ps_model_var *v = ps_model_var_at(m, i);
        const ps_tf_owned *t = NULL;
        for (size_t k = 0; k < f.n && !t; k++)
            if (strcmp(f.t[k].name, v->name) == 0) t = &f.t[k];
        if (!t || t->numel != v->numel) {
            snprintf(err, errlen, "%s %s: %s '%s' [%zu values] of the --model architecture",
                     flag, path, t ? "size differs for" : "no variable", v->name, v->numel);
            rc = PS_EFORMAT;
        } else {
            memcpy(ps_model_params(m) + v->offset, t->data, v->numel * sizeof(float));
        }
    }
    ps_tf_file_free(&f);
    return rc;
}
