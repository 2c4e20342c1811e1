/* What psctl local needs for an all-reduce job besides supervision: free ports on
 * 127.0.0.1 for the workers' ring, and the step of the chief's newest checkpoint. */
#ifndef PSCTL_RING_JOB_H
#define PSCTL_RING_JOB_H

#include <stddef.h>

/* Finds n distinct TCP ports on 127.0.0.1 that are free now: binds n sockets to port 0
 * at once (so the kernel hands out n different ports, none with a listener or a
 * connection on it), notes the ports, closes them. Returns 0, or -1 with the reason in
 * err. A port may still be taken before a worker binds it; the worker then fails and the
 * restart gets fresh ports. */
int psctl_free_ports(int *ports, int n, char *err, size_t errlen);

/* The step of the newest checkpoint in dir: the largest <version> of the files named
 * ckpt-<version, 20 digits>-<unix_ms>.pstf (psd's checkpoint names, docs/FORMATS.md,
 * which the chief writes too). Returns it, or -1 when there is none (or no dir). */
long psctl_latest_checkpoint_step(const char *dir);

#endif
