/* libps: an optimizer spec from JSON text, for callers without cJSON (the Python
 * package): the model spec's "optimizer" value, read by common/optim_spec.c. */
#include <cjson/cJSON.h>
#include <stdio.h>

#include "ps.h"

int ps_opt_spec_from_json_text(const char *json, ps_opt_spec *out, char *err, size_t errlen) {
    if (!json || !out) {
        snprintf(err, errlen, "ps_opt_spec_from_json_text: NULL argument");
        return PS_EINVAL;
    }
    cJSON *o = cJSON_Parse(json);
    if (!o) {
        snprintf(err, errlen, "optimizer: not JSON: %.80s", json);
        return PS_EFORMAT;
    }
    int rc = ps_opt_spec_from_json(o, out, err, errlen);
    cJSON_Delete(o);
    return rc;
}
