/* Relays a child's output stream line by line to one of psctl's own fds, each line
 * prefixed with its source ("[psd 0] ..."); handles partial lines and '\r' redraws. */
#ifndef PSCTL_RELAY_H
#define PSCTL_RELAY_H

#include <stddef.h>

struct psctl_relay;

/* The terminal shared by all relays: remembers which relay, if any, has a line drawn
 * in place ('\r' redraw) on stdout that has not been ended with a newline yet. */
typedef struct psctl_screen {
    struct psctl_relay *in_place;
} psctl_screen;

typedef struct psctl_relay {
    psctl_screen *screen;
    char prefix[48]; /* "[worker 1] " */
    int fd;          /* destination: STDOUT_FILENO or STDERR_FILENO */
    int redraw;      /* '\r' redraws in place (destination is a terminal) */
    int last_cr;     /* the last terminator seen was '\r' (so "\r\n" is one line end) */
    char *line;      /* the partial line not yet terminated */
    size_t len, cap;
    char *out; /* scratch space for one formatted line */
    size_t out_cap;
} psctl_relay;

/* Prepares r to relay text labelled `label` to `fd`; `redraw` makes '\r' redraw the
 * line in place instead of ending it. Nothing is allocated until text arrives. */
void psctl_relay_init(psctl_relay *r, psctl_screen *screen, const char *label, int fd, int redraw);
/* Relays n bytes of output; complete lines are written at once, the rest is kept. */
void psctl_relay_feed(psctl_relay *r, const char *data, size_t n);
/* At end of stream: writes the kept partial line (with a newline) and ends any
 * in-place line. */
void psctl_relay_flush(psctl_relay *r);
/* Frees r's buffers (after psctl_relay_flush); r may be initialised again. */
void psctl_relay_free(psctl_relay *r);
/* Ends the in-place line on the screen, if any, so that other output starts on a fresh
 * line. psctl calls this before printing its own messages. */
void psctl_screen_break(psctl_screen *screen);
/* Writes all n bytes to fd, retrying after EINTR; output errors are dropped (psctl
 * keeps supervising even if nobody reads its output). */
void psctl_write_all(int fd, const char *data, size_t n);

#endif
