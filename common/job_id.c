/* The job id rule (see job_id.h). */
#include "job_id.h"

#include <stddef.h>

int ps_job_id_valid(const char *id) {
    size_t n = 0;
    for (; id && id[n]; n++) {
        char c = id[n];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return n >= 1 && n <= PS_WIRE_MAX_JOB_ID;
}
