/* psctl scale --workers K DIR|PID|SOCKET: finds the job's control socket (control.h)
 * and asks its supervisor for K workers; prints the answer. */
#include "scale.h"

#include "control.h"
#include "local.h"
#include "options.h"
#include "ps_error.h"
#include "shared_flags.h"

#include <errno.h>
#include <glob.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    long workers;
    double timeout_s;
} scale_opts;

static const ps_option table[] = {
    {"workers", PS_OPTION_LONG, PS_OPTION_FIELD(scale_opts, workers), 0, PS_MAX_WORKERS, NULL, NULL,
     "K", "the number of workers the job should have (required)",
     .doc = "Between the job's --workers-min and its slots (psctl local --workers-max, else "
            "--workers). Up: workers start at the free slots, in index order, and join at the "
            "job's current step. Down: the highest-index workers get SIGTERM and leave after "
            "their current step, telling psd (Goodbye)"},
    {"timeout", PS_OPTION_SECONDS, PS_OPTION_FIELD(scale_opts, timeout_s), 0, 3600, "10", NULL,
     "SECONDS", "wait this long for the job's answer"},
};
#define N_OPTIONS (sizeof table / sizeof table[0])

static const ps_exit_status exits[] = {
    {0, "the job took the new number of workers (or had it already)"},
    {1, "the job refused (outside [--workers-min, slots], not elastic, starting or ending) or "
        "could not be reached"},
    {2, "bad usage: a flag, no JOB or two"},
};
#define N_EXITS (sizeof exits / sizeof exits[0])

static void usage(FILE *f) {
    fprintf(f, "usage: psctl scale --workers K JOB\n"
               "Changes the number of workers of a running elastic psctl local job (one\n"
               "started with --workers-min M, and --workers-max X for room to grow).\n"
               "JOB is psctl local's pid, its run directory (psctl local prints it:\n"
               "$TMPDIR/psctl-local.<pid>.XXXXXX), or the control socket in it\n"
               "(" PSCTL_CONTROL_SOCKET ").\n\n"
               "options:\n");
    ps_options_usage(table, N_OPTIONS, f);
    fprintf(f, "\n");
    ps_exit_status_usage(exits, N_EXITS, f);
}

/* The control socket of JOB into path[n]. Returns 0, or -1 after saying why. */
static int find_socket(const char *job, char *path, size_t n) {
    struct stat st;
    char *end;
    long pid = strtol(job, &end, 10);
    if (*job && !*end && pid > 0) { /* a pid: its run directory under $TMPDIR or /tmp */
        const char *tmp = getenv("TMPDIR");
        const char *bases[] = {tmp && *tmp ? tmp : "/tmp", "/tmp"};
        for (int i = 0; i < 2; i++) {
            char pat[4096];
            snprintf(pat, sizeof pat, "%s/" PSCTL_RUN_DIR_PREFIX "%ld.*/" PSCTL_CONTROL_SOCKET,
                     bases[i], pid);
            glob_t g;
            int r = glob(pat, 0, NULL, &g);
            if (r == 0 && g.gl_pathc > 0) snprintf(path, n, "%s", g.gl_pathv[0]);
            globfree(&g);
            if (r == 0) return 0;
        }
        fprintf(stderr,
                "psctl scale: no elastic psctl local job of pid %ld (no %s%ld.*/%s "
                "under $TMPDIR or /tmp)\n",
                pid, PSCTL_RUN_DIR_PREFIX, pid, PSCTL_CONTROL_SOCKET);
        return -1;
    }
    if (stat(job, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(path, n, "%s/%s", job, PSCTL_CONTROL_SOCKET);
    else
        snprintf(path, n, "%s", job);
    if (stat(path, &st) != 0 || !S_ISSOCK(st.st_mode)) {
        fprintf(stderr,
                "psctl scale: %s is not a job's control socket (%s): is the job elastic "
                "(--workers-min) and running?\n",
                path, stat(path, &st) != 0 ? strerror(errno) : "not a socket");
        return -1;
    }
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sends req to the socket at path and reads one answer line into out[n]. Returns 0, or -1
 * after saying why. */
static int ask(const char *path, const char *req, double timeout_s, char *out, size_t n) {
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path) {
        fprintf(stderr, "psctl scale: socket path too long: %s\n", path);
        return -1;
    }
    memcpy(addr.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
        write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
        fprintf(stderr, "psctl scale: cannot reach the job at %s: %s\n", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    size_t len = 0;
    double deadline = now_s() + timeout_s;
    while (len < n - 1 && !memchr(out, '\n', len)) {
        double left = deadline - now_s();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = left > 0 ? poll(&p, 1, (int)(left * 1000) + 1) : 0;
        if (r < 0 && errno == EINTR) continue;
        ssize_t got = r > 0 ? read(fd, out + len, n - 1 - len) : -1;
        if (got <= 0) {
            fprintf(stderr, "psctl scale: %s from the job at %s\n",
                    r == 0 ? "no answer in time" : "no answer", path);
            close(fd);
            return -1;
        }
        len += (size_t)got;
        out[len] = '\0';
    }
    close(fd);
    out[len] = '\0';
    char *nl = strchr(out, '\n');
    if (nl) *nl = '\0';
    return 0;
}

int psctl_scale_main(int argc, char **argv) {
    scale_opts o = {.workers = -1};
    unsigned char given[N_OPTIONS] = {0};
    char err[1200];
    int first = argc;
    int rc = ps_options_defaults(table, N_OPTIONS, &o, err, sizeof err);
    if (rc == PS_OK)
        rc = ps_options_parse_args(table, N_OPTIONS, argc, argv, &o, given, "psctl scale",
                                   PS_OPTIONS_ARGS, &first, err, sizeof err);
    if (rc == PS_OPTIONS_HELP || rc == PS_OPTIONS_HELP_MAN) {
        if (rc == PS_OPTIONS_HELP)
            usage(stdout);
        else
            ps_options_help_man(table, N_OPTIONS, exits, N_EXITS, stdout);
        return 0;
    }
    if (rc != PS_OK) {
        fprintf(stderr, "psctl scale: %s\n", err);
        goto usage_hint;
    }
    if (!given[0]) {
        fprintf(stderr, "psctl scale: --workers K is required\n");
        goto usage_hint;
    }
    if (first + 1 != argc) {
        fprintf(stderr, first == argc ? "psctl scale: JOB (psctl local's pid or run directory) "
                                        "is missing\n"
                                      : "psctl scale: one JOB only\n");
        goto usage_hint;
    }
    char path[4096], req[64], answer[PSCTL_CONTROL_LINE_MAX + 16];
    if (find_socket(argv[first], path, sizeof path) != 0) return 1;
    snprintf(req, sizeof req, "scale %ld\n", o.workers);
    if (ask(path, req, o.timeout_s, answer, sizeof answer) != 0) return 1;
    if (strncmp(answer, "ok ", 3) == 0) {
        printf("psctl scale: %s\n", answer + 3);
        return 0;
    }
    fprintf(stderr, "psctl scale: %s\n", strncmp(answer, "error ", 6) == 0 ? answer + 6 : answer);
    return 1;
usage_hint:
    fprintf(stderr, "Try 'psctl scale --help'.\n");
    return 2;
}
