/* --export FILE.safetensors (see export.h). */
#include <stdio.h>

#include "export.h"
#include "ps_error.h"

int ps_export_safetensors(const ps_model *m, const char *path, char *err, size_t errlen) {
    (void)m;
    snprintf(err, errlen, "--export %s: the .safetensors exporter is not built yet", path);
    return PS_EINVAL;
}
