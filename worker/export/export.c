/* --export: the format by the file's extension (see export.h). */
#include "export.h"

#include <stdio.h>
#include <string.h>

#include "layer.h"
#include "layer_export.h"
#include "ps_error.h"

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && strcmp(s + n - k, suffix) == 0;
}

int ps_export_format_of(const char *path, ps_export_format *out, char *err, size_t errlen) {
    if (ends_with(path, ".onnx")) {
        *out = PS_EXPORT_ONNX;
    } else if (ends_with(path, ".safetensors")) {
        *out = PS_EXPORT_SAFETENSORS;
    } else if (ends_with(path, ".keras")) {
        *out = PS_EXPORT_KERAS;
    } else if (ends_with(path, ".weights.h5")) {
        *out = PS_EXPORT_WEIGHTS_H5;
    } else {
        snprintf(err, errlen, "--export %s: the format comes from the extension: .onnx, "
                              ".safetensors, .keras or .weights.h5", path);
        return PS_EINVAL;
    }
    return PS_OK;
}

int ps_export_check_layers(const ps_model *m, const char *path, char *err, size_t errlen) {
    for (size_t j = 0; j < m->nops; j++) {
        if (ps_layer_export_of(m->ops[j].kind)) continue;
        const ps_layer_class *c = ps_layer_of(m->ops[j].kind)->classes;
        snprintf(err, errlen,
                 "--export %s: layer '%s' (%s) cannot be exported%s", path,
                 m->ops[j].prefix[0] ? m->ops[j].prefix : "unnamed", c->name,
                 m->ops[j].kind == OP_EMBEDDING
                     ? ": its table lives outside the model (on psd or in the caller)"
                     : "");
        return PS_EINVAL;
    }
    return PS_OK;
}

int ps_export_model(const ps_model *m, const char *path, char *err, size_t errlen) {
    return ps_export_model_from(m, NULL, path, err, errlen);
}

int ps_export_model_from(const ps_model *m, const char *source, const char *path, char *err,
                         size_t errlen) {
    ps_export_format f;
    int rc = ps_export_format_of(path, &f, err, errlen);
    if (rc != PS_OK) return rc;
    switch (f) {
    case PS_EXPORT_ONNX: return ps_export_onnx(m, path, err, errlen);
    case PS_EXPORT_SAFETENSORS: return ps_export_safetensors(m, path, err, errlen);
    case PS_EXPORT_KERAS: return ps_export_keras(m, source, path, err, errlen);
    default: return ps_export_weights_h5(m, source, path, err, errlen);
    }
}
