/* --export FILE.onnx (see export.h). */
#include <stdio.h>

#include "export.h"
#include "ps_error.h"

int ps_export_onnx(const ps_model *m, const char *path, char *err, size_t errlen) {
    (void)m;
    snprintf(err, errlen, "--export %s: the .onnx exporter is not built yet", path);
    return PS_EINVAL;
}
