/* Free ports for the ring and the newest checkpoint's step (see ring_job.h). */
#include "ring_job.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int psctl_free_ports(int *ports, int n, char *err, size_t errlen) {
    int *fds = malloc((size_t)n * sizeof *fds);
    if (!fds) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = 0, made = 0;
    for (; made < n; made++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof sa;
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
            getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
            snprintf(err, errlen, "binding 127.0.0.1:0: %s", strerror(errno));
            if (fd >= 0) close(fd);
            rc = -1;
            break;
        }
        fds[made] = fd;
        ports[made] = ntohs(sa.sin_port);
    }
    for (int i = 0; i < made; i++)
        close(fds[i]);
    free(fds);
    return rc;
}

/* 1 when name is "ckpt-<20 digits>-<1..20 digits>.pstf" (then *version), else 0. */
static int checkpoint_name(const char *name, unsigned long long *version) {
    if (strncmp(name, "ckpt-", 5) != 0 || strlen(name) < 5 + 20 + 1 + 1 + 5) return 0;
    for (int i = 5; i < 25; i++)
        if (name[i] < '0' || name[i] > '9') return 0;
    if (name[25] != '-') return 0;
    const char *p = name + 26, *dot = strchr(p, '.');
    if (!dot || dot == p || dot - p > 20 || strcmp(dot, ".pstf") != 0) return 0;
    for (const char *q = p; q < dot; q++)
        if (*q < '0' || *q > '9') return 0;
    *version = strtoull(name + 5, NULL, 10);
    return 1;
}

long psctl_latest_checkpoint_step(const char *dir) {
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) return -1;
    long best = -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        unsigned long long v;
        if (checkpoint_name(e->d_name, &v) && v <= (unsigned long long)__LONG_MAX__ &&
            (long)v > best)
            best = (long)v;
    }
    closedir(d);
    return best;
}
