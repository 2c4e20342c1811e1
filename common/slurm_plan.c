/* A Slurm job step's tasks as psd shards and workers (see slurm_plan.h). */
#include "slurm_plan.h"

#include "ps_error.h"
#include "slurm_hostlist.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ps_slurm_plan_free(ps_slurm_plan *p) {
    if (!p) return;
    if (p->addr)
        for (int i = 0; i < p->ntasks; i++)
            free(p->addr[i]);
    free(p->addr);
    memset(p, 0, sizeof *p);
    p->index = p->node = p->local_id = p->worker_local_rank = -1;
}

int ps_slurm_plan_make(const char *nodelist, const char *tasks_per_node, long ntasks,
                       long procid, long num_ps, long base_port, ps_slurm_plan *out, char *err,
                       size_t errlen) {
    char dummy[1];
    if (!err || !errlen) err = dummy, errlen = sizeof dummy;
    err[0] = '\0';
    memset(out, 0, sizeof *out);
    ps_slurm_plan_free(out);
    if (ntasks < 1 || ntasks > PS_SLURM_MAX_HOSTS) {
        snprintf(err, errlen, "bad task count %ld", ntasks);
        return PS_EINVAL;
    }
    if (procid < 0 || procid >= ntasks) {
        snprintf(err, errlen, "task %ld is outside 0..%ld", procid, ntasks - 1);
        return PS_EINVAL;
    }
    if (num_ps < 0 || num_ps >= ntasks) {
        snprintf(err, errlen, "%ld psd shards leave no worker among %ld tasks", num_ps, ntasks);
        return PS_EINVAL;
    }
    if (base_port < 1 || base_port > 65535) {
        snprintf(err, errlen, "base port %ld is outside 1..65535", base_port);
        return PS_EINVAL;
    }
    char **hosts;
    size_t n_nodes;
    char why[200];
    int rc = ps_slurm_hostlist_expand(nodelist, &hosts, &n_nodes, why, sizeof why);
    if (rc != PS_OK) {
        snprintf(err, errlen, "node list: %s", why);
        return rc;
    }
    int *counts = calloc(n_nodes, sizeof *counts);
    out->addr = calloc((size_t)ntasks, sizeof *out->addr);
    out->ntasks = (int)ntasks;
    if (!counts || !out->addr) {
        rc = PS_ENOMEM;
        goto done;
    }
    if ((rc = ps_slurm_tasks_per_node(tasks_per_node, n_nodes, counts, why, sizeof why)) != PS_OK) {
        snprintf(err, errlen, "tasks per node: %s", why);
        goto done;
    }
    long sum = 0;
    for (size_t i = 0; i < n_nodes; i++)
        sum += counts[i];
    if (sum != ntasks) {
        snprintf(err, errlen, "tasks per node '%s' add up to %ld, not the %ld tasks",
                 tasks_per_node, sum, ntasks);
        rc = PS_EINVAL;
        goto done;
    }
    out->num_ps = (int)num_ps;
    out->procid = (int)procid;
    out->is_ps = procid < num_ps;
    out->index = out->is_ps ? (int)procid : (int)(procid - num_ps);
    int task = 0;
    for (size_t node = 0; node < n_nodes; node++) {
        if (base_port + counts[node] - 1 > 65535) {
            snprintf(err, errlen, "base port %ld + %d tasks on %s goes past 65535", base_port,
                     counts[node], hosts[node]);
            rc = PS_EINVAL;
            goto done;
        }
        int workers_here = 0;
        for (int l = 0; l < counts[node]; l++, task++) {
            if (asprintf(&out->addr[task], "%s:%ld", hosts[node], base_port + l) < 0) {
                out->addr[task] = NULL;
                rc = PS_ENOMEM;
                goto done;
            }
            if (task == procid) {
                out->node = (int)node;
                out->local_id = l;
                out->port = (int)(base_port + l);
                out->worker_local_rank = out->is_ps ? -1 : workers_here;
                snprintf(out->host, sizeof out->host, "%s", hosts[node]);
            }
            if (task >= num_ps) workers_here++;
        }
        if ((int)node == out->node) out->node_workers = workers_here;
    }
done:
    if (rc == PS_ENOMEM) snprintf(err, errlen, "out of memory");
    free(counts);
    ps_slurm_hosts_free(hosts, n_nodes);
    if (rc != PS_OK) ps_slurm_plan_free(out);
    return rc;
}

char *ps_slurm_plan_tf_config(const ps_slurm_plan *p) {
    cJSON *root = cJSON_CreateObject();
    cJSON *cluster = cJSON_AddObjectToObject(root, "cluster");
    cJSON *ps = p->num_ps ? cJSON_AddArrayToObject(cluster, "ps") : NULL;
    cJSON *worker = cJSON_AddArrayToObject(cluster, "worker");
    cJSON *task = cJSON_AddObjectToObject(root, "task");
    char *s = NULL;
    if (!cluster || (p->num_ps && !ps) || !worker || !task) goto done;
    for (int i = 0; i < p->ntasks; i++)
        if (!cJSON_AddItemToArray(i < p->num_ps ? ps : worker, cJSON_CreateString(p->addr[i])))
            goto done;
    if (!cJSON_AddStringToObject(task, "type", p->is_ps ? "ps" : "worker") ||
        !cJSON_AddNumberToObject(task, "index", p->index))
        goto done;
    s = cJSON_PrintUnformatted(root);
done:
    cJSON_Delete(root);
    return s;
}
