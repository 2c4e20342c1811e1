/* The lock file beside psd's Unix socket (PATH.lock): whoever holds it owns
 * PATH, so two psd started at once on one --ipc-path cannot both bind it. */
#ifndef PS_IPC_LOCK_H
#define PS_IPC_LOCK_H

#include <stddef.h>

/* Creates (or opens) ipc_path + ".lock" and takes flock(LOCK_EX | LOCK_NB) on it,
 * retrying when the file it locked was removed or replaced meanwhile, so the lock
 * is always on the file that is at that path. Returns PS_OK with *fd >= 0 (owned:
 * keep it open as long as the socket is in use, then ps__ipc_unlock), or
 * PS_EADDRINUSE (another process holds it) / PS_EIO, with a reason in err. */
int ps__ipc_lock(const char *ipc_path, int *fd, char *err, size_t errlen);

/* Removes the lock file (while still holding it) and closes fd; fd < 0 is a no-op. */
void ps__ipc_unlock(const char *ipc_path, int fd);

#endif
