/* Logging to stderr: one line per event, with time, program tag and level. */
#ifndef PS_LOG_H
#define PS_LOG_H

typedef enum { PS_LOG_DEBUG = 0, PS_LOG_INFO, PS_LOG_WARN, PS_LOG_ERROR } ps_log_level;

/* Sets the tag printed on every line (e.g. "psd[0]"); the string is copied. */
void ps_log_set_tag(const char *tag);
/* Lines below this level are dropped (default PS_LOG_INFO; PS_LOG_LEVEL=debug lowers it). */
void ps_log_set_level(ps_log_level level);
/* Writes one line to stderr. A write that fails (stderr closed: EPIPE) drops the line;
 * programs ignore SIGPIPE (ps_ignore_sigpipe) so that it cannot kill them. */
void ps_log(ps_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define PS_DEBUG(...) ps_log(PS_LOG_DEBUG, __VA_ARGS__)
#define PS_INFO(...) ps_log(PS_LOG_INFO, __VA_ARGS__)
#define PS_WARN(...) ps_log(PS_LOG_WARN, __VA_ARGS__)
#define PS_ERROR(...) ps_log(PS_LOG_ERROR, __VA_ARGS__)

#endif
