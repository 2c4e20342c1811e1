/* Line relay for psctl local: prefixes every line of a child's output with its source
 * and writes whole lines at once, so output from different children never interleaves. */
#include "relay.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A line longer than this is cut and relayed in pieces. */
#define RELAY_MAX_LINE 65536

/* Erase to the end of the line: a shorter redraw must not leave the old text behind. */
#define ERASE_EOL "\x1b[K"

void psctl_write_all(int fd, const char *data, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, data, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return;
        }
        data += w;
        n -= (size_t)w;
    }
}

void psctl_screen_break(psctl_screen *screen) {
    if (!screen->in_place) return;
    psctl_write_all(screen->in_place->fd, "\n", 1);
    screen->in_place = NULL;
}

void psctl_relay_init(psctl_relay *r, psctl_screen *screen, const char *label, int fd, int redraw) {
    memset(r, 0, sizeof *r);
    r->screen = screen;
    snprintf(r->prefix, sizeof r->prefix, "[%s] ", label);
    r->fd = fd;
    r->redraw = redraw;
}

void psctl_relay_free(psctl_relay *r) {
    if (r->screen && r->screen->in_place == r) r->screen->in_place = NULL;
    free(r->line);
    free(r->out);
    r->line = r->out = NULL;
    r->len = r->cap = r->out_cap = 0;
}

/* Writes lead + prefix + text + tail as one write. */
static void write_line(psctl_relay *r, const char *lead, const char *text, size_t len,
                       const char *tail) {
    size_t plen = strlen(r->prefix), llen = strlen(lead), tlen = strlen(tail);
    size_t need = llen + plen + len + tlen;
    if (need > r->out_cap) {
        char *p = realloc(r->out, need);
        if (!p) return; /* out of memory: drop the line rather than the job */
        r->out = p;
        r->out_cap = need;
    }
    char *o = r->out;
    memcpy(o, lead, llen);
    memcpy(o + llen, r->prefix, plen);
    memcpy(o + llen + plen, text, len);
    memcpy(o + llen + plen + len, tail, tlen);
    psctl_write_all(r->fd, r->out, need);
}

/* Handles one piece of text ended by `term` ('\n' or '\r'). */
static void emit(psctl_relay *r, const char *text, size_t len, char term) {
    psctl_screen *s = r->screen;
    if (term == '\r') {
        r->last_cr = 1;
        if (len == 0) return;
        if (!r->redraw) {
            write_line(r, "", text, len, "\n");
            return;
        }
        if (s->in_place != r) psctl_screen_break(s);
        write_line(r, "\r", text, len, ERASE_EOL);
        s->in_place = r;
        return;
    }
    int after_cr = r->last_cr;
    r->last_cr = 0;
    if (len == 0 && after_cr) {
        /* "\r\n", or a redrawn line now finished: keep what is on screen. */
        if (s->in_place == r) psctl_screen_break(s);
        return;
    }
    if (s->in_place == r) {
        write_line(r, "\r", text, len, ERASE_EOL "\n");
        s->in_place = NULL;
        return;
    }
    psctl_screen_break(s);
    write_line(r, "", text, len, "\n");
}

static int append(psctl_relay *r, const char *data, size_t n) {
    if (r->len + n > r->cap) {
        size_t cap = r->cap ? r->cap : 256;
        while (cap < r->len + n)
            cap *= 2;
        char *p = realloc(r->line, cap);
        if (!p) return -1;
        r->line = p;
        r->cap = cap;
    }
    memcpy(r->line + r->len, data, n);
    r->len += n;
    return 0;
}

void psctl_relay_feed(psctl_relay *r, const char *data, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && data[j] != '\n' && data[j] != '\r')
            j++;
        size_t chunk = j - i;
        if (r->len + chunk > RELAY_MAX_LINE) {
            /* Cut an overlong line (r->len <= RELAY_MAX_LINE always holds). */
            size_t room = RELAY_MAX_LINE - r->len;
            if (r->len == 0 || append(r, data + i, room) < 0) {
                if (r->len > 0) emit(r, r->line, r->len, '\n');
                if (room > 0) emit(r, data + i, room, '\n');
            } else {
                emit(r, r->line, r->len, '\n');
            }
            i += room;
            r->len = 0;
            continue;
        }
        if (j == n) {
            if (append(r, data + i, chunk) < 0) emit(r, data + i, chunk, '\n');
            return;
        }
        if (r->len == 0) {
            emit(r, data + i, chunk, data[j]); /* common case: no copy */
        } else {
            if (append(r, data + i, chunk) == 0) {
                emit(r, r->line, r->len, data[j]);
            } else {
                emit(r, r->line, r->len, '\n');
                emit(r, data + i, chunk, data[j]);
            }
            r->len = 0;
        }
        i = j + 1;
    }
}

void psctl_relay_flush(psctl_relay *r) {
    if (r->len > 0) {
        emit(r, r->line, r->len, '\n');
        r->len = 0;
    } else if (r->screen->in_place == r) {
        psctl_screen_break(r->screen);
    }
}
