/* libps: a worker's view of TensorFlow's TF_CONFIG (the shards, its index, the job's
 * size), for callers without a JSON parser of their own (the Python package); the
 * rules are common/tfconfig.c's, as psworker applies them. */
#include <stdio.h>
#include <string.h>

#include "ps.h"
#include "replicas.h"
#include "tfconfig.h"

int ps_tf_config_worker(const char *json, char *ps_list, size_t ps_len, unsigned *index,
                        unsigned *num_workers, char *err, size_t errlen) {
    if (!json || !ps_list || !ps_len || !index || !num_workers) {
        snprintf(err, errlen, "ps_tf_config_worker: NULL argument");
        return PS_EINVAL;
    }
    ps_list[0] = '\0';
    ps_cluster cl;
    int rc = ps_cluster_from_tfconfig(json, &cl, err, errlen);
    if (rc != PS_OK) return rc;
    if (!cl.task_type[0]) {
        /* guessing "chief" would make every such worker the chief */
        snprintf(err, errlen,
                 "TF_CONFIG has no task: say which worker this is with \"task\": {\"type\": "
                 "\"worker\"|\"chief\", \"index\": N}");
        rc = PS_EINVAL;
    } else if (ps_cluster_worker_index(&cl, index) != PS_OK) {
        snprintf(err, errlen, "TF_CONFIG: task type '%s' is not a worker or chief", cl.task_type);
        rc = PS_EINVAL;
    } else if (cl.n_ps == 0) {
        snprintf(err, errlen, "TF_CONFIG names no parameter servers (cluster.ps)");
        rc = PS_EINVAL;
    }
    size_t used = 0;
    for (size_t i = 0; i < cl.n_ps && rc == PS_OK; i++) {
        char why[320];
        if (ps_check_shard_entry(cl.ps[i], why, sizeof why) != PS_OK) {
            snprintf(err, errlen, "TF_CONFIG: cluster.ps[%zu]: %s", i, why);
            rc = PS_EINVAL;
            break;
        }
        int n = snprintf(ps_list + used, ps_len - used, "%s%s", i ? "," : "", cl.ps[i]);
        if (n < 0 || (size_t)n >= ps_len - used) {
            snprintf(err, errlen, "TF_CONFIG: the ps list does not fit in %zu bytes", ps_len);
            rc = PS_EINVAL;
            break;
        }
        used += (size_t)n;
    }
    if (rc == PS_OK) {
        *num_workers = ps_cluster_num_workers(&cl);
        if (err && errlen) err[0] = '\0';
    } else {
        ps_list[0] = '\0';
    }
    ps_cluster_free(&cl);
    return rc;
}
