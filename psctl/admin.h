/* psctl checkpoint / shutdown / status: one request to every psd shard of a running job
 * (from --ps or TF_CONFIG's cluster.ps), a report per shard of how it went. */
#ifndef PSCTL_ADMIN_H
#define PSCTL_ADMIN_H

/* `psctl checkpoint` (argv[0] == "checkpoint"): asks every shard to write a checkpoint
 * now. Returns the exit code: 0 every shard wrote one, 1 one or more failed, gave an
 * error reply or no answer within --timeout, 2 bad usage. */
int psctl_checkpoint_main(int argc, char **argv);

/* `psctl shutdown` (argv[0] == "shutdown"): asks every shard to stop (psd answers, then
 * stops its loop gracefully). Exit codes as psctl_checkpoint_main. */
int psctl_shutdown_main(int argc, char **argv);

/* `psctl status` (argv[0] == "status"): asks every shard for its stats and prints a
 * table, one row per shard (with --json a JSON array). Exit codes as
 * psctl_checkpoint_main (1: a shard did not answer or answered an error). */
int psctl_status_main(int argc, char **argv);

#endif
