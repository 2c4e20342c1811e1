/* psctl slurm-task: run by every task of a Slurm job step (srun); works out from Slurm's
 * environment which task it is (psd shard or worker), builds its TF_CONFIG and execs psd or
 * psworker with it. */
#ifndef PSCTL_SLURM_TASK_H
#define PSCTL_SLURM_TASK_H

/* argv[0] is "slurm-task". Returns only on error (2: bad usage or environment, 1: the exec
 * failed) or after --help / --dry-run (0). */
int psctl_slurm_task_main(int argc, char **argv);

#endif
