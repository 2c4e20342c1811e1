/* PATH.lock for psd --transport ipc (see ipc_lock.h): the probe of a stale socket
 * and the bind are one step only for the holder of this lock. */
#include "ipc_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_error.h"

int ps__ipc_lock(const char *ipc_path, int *fd, char *err, size_t errlen) {
    char path[4096];
    *fd = -1;
    if ((size_t)snprintf(path, sizeof path, "%s.lock", ipc_path) >= sizeof path) {
        snprintf(err, errlen, "--ipc-path %s is too long", ipc_path);
        return PS_EINVAL;
    }
    for (int attempt = 0; attempt < 100; attempt++) {
        int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (f < 0) {
            snprintf(err, errlen, "cannot open the lock file %s: %s", path, strerror(errno));
            return PS_EIO;
        }
        if (flock(f, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            close(f);
            if (e == EWOULDBLOCK) {
                snprintf(err, errlen,
                         "cannot listen on ipc://%s: another process is listening there (it "
                         "holds the lock file %s)",
                         ipc_path, path);
                return PS_EADDRINUSE;
            }
            snprintf(err, errlen, "cannot lock %s: %s", path, strerror(e));
            return PS_EIO;
        }
        /* The holder before us removes the file while it holds the lock (at its
         * exit): if we locked a removed file, another psd may lock the new one. */
        struct stat mine, there;
        if (fstat(f, &mine) == 0 && stat(path, &there) == 0 && mine.st_dev == there.st_dev &&
            mine.st_ino == there.st_ino) {
            *fd = f;
            return PS_OK;
        }
        close(f);
    }
    snprintf(err, errlen, "cannot lock %s: it keeps being replaced", path);
    return PS_EIO;
}

void ps__ipc_unlock(const char *ipc_path, int fd) {
    if (fd < 0) return;
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s.lock", ipc_path) < sizeof path) unlink(path);
    close(fd);
}
