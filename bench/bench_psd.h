/* A psd process for the benchmarks that start their own (bench/rate, bench/rows):
 * found, started on 127.0.0.1 with a port the system picks, waited for through
 * its ready file, stopped. */
#ifndef PS_BENCH_PSD_H
#define PS_BENCH_PSD_H

#include <stddef.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;
    char endpoint[128];
} ps_bench_psd;

/* $PSD, else dirname(argv0)/../ps-server/psd if executable, else fallback (the build's). */
void ps_bench_find_psd(const char *argv0, const char *fallback, char *out, size_t n);
/* Starts psd --bind 127.0.0.1 --port 0 --ready-file DIR/ready<tag> plus args
 * (NULL-terminated; stdout and stderr appended to DIR/psd<tag>.log) and waits up
 * to timeout_s for it to listen. 0 with p set, or -1 (said on stderr). */
int ps_bench_psd_start(ps_bench_psd *p, const char *psd, const char *dir, const char *tag,
                       const char *const *args, double timeout_s);
/* SIGTERM, then SIGKILL after timeout_s; reaps it. */
void ps_bench_psd_stop(ps_bench_psd *p, double timeout_s);

#endif
