/* Which task of a Slurm job step is what: the step's tasks (SLURM_STEP_NODELIST,
 * SLURM_STEP_TASKS_PER_NODE, SLURM_NTASKS, SLURM_PROCID) laid out by Slurm's default block
 * distribution (tasks 0..c0-1 on the first node, the next c1 on the second, ...), each given
 * an address "node:BASE+local id", and a role: the first num_ps tasks are psd shards 0..num_ps-1,
 * the rest workers 0.. (task num_ps is the chief, worker 0). */
#ifndef PS_SLURM_PLAN_H
#define PS_SLURM_PLAN_H

#include <stddef.h>

typedef struct {
    int ntasks;  /* tasks in the step */
    int num_ps;  /* the first num_ps are psd shards */
    int procid;  /* this task */
    char **addr; /* ntasks "host:port" (owned), in task order */
    int is_ps;   /* this task is a psd shard */
    int index;   /* its shard index, or its worker index (0: the chief) */
    int node;    /* index of its node in the node list */
    int local_id; /* its place among the tasks of its node (Slurm's SLURM_LOCALID) */
    int worker_local_rank; /* a worker's place among the workers of its node (its GPU when the
                              node's GPUs are shared by its tasks); -1 for a psd */
    int node_workers;      /* workers on its node */
    char host[256];        /* its node's name */
    int port;              /* its port */
} ps_slurm_plan;

/* Lays out the step. base_port: task with local id L listens on base_port + L (so the ports
 * of one node are base_port .. base_port + tasks on it - 1, and every node uses the same
 * range). Refuses: a bad node list or tasks-per-node list (slurm_hostlist.h), counts that do
 * not add up to ntasks, procid outside [0, ntasks), num_ps < 0 or leaving no worker, a port
 * above 65535. Returns PS_OK, PS_EINVAL (reason in err) or PS_ENOMEM; *out is always
 * initialised, free it with ps_slurm_plan_free. */
int ps_slurm_plan_make(const char *nodelist, const char *tasks_per_node, long ntasks,
                       long procid, long num_ps, long base_port, ps_slurm_plan *out, char *err,
                       size_t errlen);

/* The task's TF_CONFIG: {"cluster": {"ps": [tasks 0..num_ps-1], "worker": [the rest]},
 * "task": {"type": "ps"|"worker", "index": I}} ("ps" left out when num_ps is 0).
 * Returns a malloc'd string, or NULL when out of memory. */
char *ps_slurm_plan_tf_config(const ps_slurm_plan *p);

void ps_slurm_plan_free(ps_slurm_plan *p);

#endif
