/* psctl keygen: makes a CurveZMQ key pair for psd, a worker or psctl itself. */
#ifndef PSCTL_KEYGEN_H
#define PSCTL_KEYGEN_H

/* `psctl keygen NAME [--dir DIR]` (argv[0] == "keygen"): writes DIR/NAME.key (key pair,
 * 0600) and DIR/NAME.pub (public key, 0644), never overwriting. Returns the exit code:
 * 0 written, 1 a file exists or cannot be written, 2 bad usage. */
int psctl_keygen_main(int argc, char **argv);

#endif
