/* Slurm's node lists and task counts, as Slurm puts them in a job step's environment:
 * SLURM_STEP_NODELIST ("gpu[01-04,07],login2") and SLURM_STEP_TASKS_PER_NODE ("2(x3),1"). */
#ifndef PS_SLURM_HOSTLIST_H
#define PS_SLURM_HOSTLIST_H

#include <stddef.h>

/* Most hosts one list may expand to (a guard against "n[0-99999999]"). */
#define PS_SLURM_MAX_HOSTS 65536

/* Expands a Slurm hostlist into host names, in order. The list is comma-separated items; an
 * item is a name with zero or more bracket groups, "prefix[RANGES]middle[RANGES]suffix", each
 * group a comma-separated list of N or LO-HI (LO <= HI, decimal). Several groups expand as a
 * product, the last one varying fastest ("r[1-2]n[1-2]" = r1n1 r1n2 r2n1 r2n2, as Slurm does).
 * Zero padding: a range whose LO is written with leading zeros pads every number to LO's width
 * ("n[08-11]" = n08 n09 n10 n11; "n[8-11]" = n8 ... n11). A trailing text after a group
 * ("a-[1-2]b") is accepted (newer Slurm releases write such names; 22.05 refuses them).
 * Errors: empty list or item, unbalanced or nested brackets, empty group or range, a range that
 * is not digits, LO > HI, a number above 10^9, more than PS_SLURM_MAX_HOSTS hosts.
 * On success *hosts (n_hosts strings, each malloc'd, in a malloc'd array) is the caller's; free it
 * with ps_slurm_hosts_free. Returns PS_OK, PS_EINVAL (reason in err) or PS_ENOMEM. */
int ps_slurm_hostlist_expand(const char *list, char ***hosts, size_t *n_hosts, char *err,
                             size_t errlen);
void ps_slurm_hosts_free(char **hosts, size_t n_hosts);

/* Parses SLURM_*TASKS_PER_NODE ("2(x3),1": 2 tasks on each of 3 nodes, then 1) into counts[],
 * one per node; n_nodes is the number of nodes in the step's node list and must match the
 * expansion. Each count is >= 1. Returns PS_OK or PS_EINVAL with a reason in err. */
int ps_slurm_tasks_per_node(const char *spec, size_t n_nodes, int *counts, char *err,
                            size_t errlen);

#endif
