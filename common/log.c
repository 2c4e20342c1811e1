/* Logging to stderr with a timestamp, a tag and a level. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char log_tag[64] = "ps";
static int log_level = -1;

void ps_log_set_tag(const char *tag) {
    snprintf(log_tag, sizeof log_tag, "%s", tag);
}

void ps_log_set_level(ps_log_level level) {
    log_level = (int)level;
}

static int current_level(void) {
    if (log_level < 0) {
        const char *env = getenv("PS_LOG_LEVEL");
        log_level = (env && strcmp(env, "debug") == 0) ? PS_LOG_DEBUG : PS_LOG_INFO;
    }
    return log_level;
}

void ps_log(ps_log_level level, const char *fmt, ...) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    if ((int)level < current_level()) return;
    char line[1024];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld %s %s: ", tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, log_tag, names[level]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* A closed stderr (the reader died: EPIPE, with SIGPIPE ignored) loses the line,
     * never the process; the error flag is cleared so later lines are tried again. */
    if (fprintf(stderr, "%s\n", line) < 0) clearerr(stderr);
}
