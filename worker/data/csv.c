/* CSV/TSV rows (csv.h): a line at a time with a bounded length, split in
 * place into fields. */
#include "csv.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"

/* Reads one line (without its LF or CRLF) into r->buf. Returns 1 for a line,
 * 0 at the end of the file, -1 for a line over the limit, -2 for a read error. */
static int read_line(ps_csv_reader *r) {
    size_t n = 0;
    int c;
    r->row_offset = r->offset;
    while ((c = getc(r->f)) != EOF && c != '\n') {
        r->offset++;
        if (n + 2 > r->cap) {
            if (r->cap >= PS_CSV_MAX_LINE) return -1;
            size_t cap = r->cap ? 2 * r->cap : 256;
            char *b = realloc(r->buf, cap);
            if (!b) return -2;
            r->buf = b, r->cap = cap;
        }
        r->buf[n++] = (char)c;
    }
    if (ferror(r->f)) return -2;
    if (c == '\n') r->offset++;
    if (c == EOF && n == 0) return 0;
    if (n && r->buf[n - 1] == '\r') n--;
    if (!r->buf) { /* an empty line before anything was allocated */
        r->buf = malloc(256);
        if (!r->buf) return -2;
        r->cap = 256;
    }
    r->buf[n] = '\0';
    r->line++;
    return 1;
}

/* Splits the line in r->buf in place; fields[i] point into it. Returns the
 * number of fields (up to max, then max + 1 meaning "more"), or -1 for an
 * unterminated quote (*bad_col set). */
static long split(const ps_csv_reader *r, char *line, char **fields, size_t max,
                  size_t *bad_col) {
    char *p = line;
    size_t n = 0;
    for (;;) {
        char *q = p;
        while (*q == ' ')
            q++;
        if (*q == '"') p = q; /* spaces before a quoted field are not part of it */
        char *start = p, *out = p;
        if (*p == '"') {
            p++;
            for (;;) {
                if (*p == '\0') {
                    *bad_col = n + 1;
                    return -1;
                }
                if (*p == '"' && p[1] == '"') {
                    *out++ = '"';
                    p += 2;
                } else if (*p == '"') {
                    p++;
                    break;
                } else {
                    *out++ = *p++;
                }
            }
            while (*p != '\0' && *p != r->delim) /* text after the closing quote is kept */
                *out++ = *p++;
        } else {
            while (*p != '\0' && *p != r->delim)
                p++;
            out = p;
        }
        char end = *p;
        *out = '\0';
        if (n < max) fields[n] = start;
        n++;
        if (end == '\0') break;
        p++;
    }
    return n > max ? (long)max + 1 : (long)n;
}

int ps_csv_open(ps_csv_reader *r, const char *path, char delim, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    size_t pl = strlen(path);
    r->delim = delim ? delim : (pl > 4 && strcmp(path + pl - 4, ".tsv") == 0 ? '\t' : ',');
    r->f = fopen(path, "rb");
    r->path = strdup(path);
    if (!r->f || !r->path) {
        snprintf(err, errlen, "%s: %s", path, r->path ? strerror(errno) : "out of memory");
        ps_csv_close(r);
        return PS_EIO;
    }
    int got;
    while ((got = read_line(r)) == 1 && r->buf[0] == '\0')
        ;
    if (got != 1) {
        snprintf(err, errlen, "%s: %s", path, got == 0 ? "no header row (empty file)"
                                            : got == -1 ? "line 1 is over the limit"
                                                        : "read error");
        ps_csv_close(r);
        return got == -2 ? PS_EIO : PS_EFORMAT;
    }
    /* count the header's fields, then keep copies of them */
    size_t ncols = 1;
    for (const char *p = r->buf; *p; p++)
        ncols += *p == r->delim;
    char **fields = r->fields = calloc(ncols + 1, sizeof *fields);
    r->names = calloc(ncols, sizeof *r->names);
    size_t bad = 0;
    long n = fields && r->names ? split(r, r->buf, fields, ncols, &bad) : -2;
    int rc = PS_OK;
    if (n == -2) {
        rc = PS_ENOMEM;
    } else if (n < 0) {
        snprintf(err, errlen, "%s:%zu: column %zu: unterminated quote", path, r->line, bad);
        rc = PS_EFORMAT;
    } else {
        r->cols = (size_t)n;
        for (size_t i = 0; i < r->cols && rc == PS_OK; i++) {
            if (fields[i][0] == '\0') {
                snprintf(err, errlen, "%s:%zu: column %zu has no name", path, r->line, i + 1);
                rc = PS_EFORMAT;
                break;
            }
            for (size_t j = 0; j < i; j++)
                if (strcmp(fields[i], r->names[j]) == 0) {
                    snprintf(err, errlen, "%s:%zu: the column name \"%.64s\" is repeated", path,
                             r->line, fields[i]);
                    rc = PS_EFORMAT;
                    break;
                }
            if (rc == PS_OK && !(r->names[i] = strdup(fields[i]))) rc = PS_ENOMEM;
        }
    }
    if (rc != PS_OK) ps_csv_close(r);
    return rc;
}

long ps_csv_column(const ps_csv_reader *r, const char *name) {
    for (size_t i = 0; i < r->cols; i++)
        if (strcmp(r->names[i], name) == 0) return (long)i;
    return -1;
}

int ps_csv_keep_text(ps_csv_reader *r, size_t col) {
    if (col >= r->cols) return PS_EINVAL;
    if (!r->text && !(r->text = calloc(r->cols, 1))) return PS_ENOMEM;
    r->text[col] = 1;
    return PS_OK;
}

int ps_csv_next(ps_csv_reader *r, double *vals, char *err, size_t errlen) {
    int got;
    while ((got = read_line(r)) == 1 && r->buf[0] == '\0')
        ;
    if (got == 0) return PS_ENOENT;
    if (got < 0) {
        snprintf(err, errlen, "%s:%zu: %s", r->path, r->line + 1,
                 got == -1 ? "line over the limit of 1 MiB" : "read error");
        return got == -1 ? PS_EFORMAT : PS_EIO;
    }
    r->row_len = strlen(r->buf);
    return ps_csv_parse_row(r, r->buf, r->line, r->fields, vals, err, errlen);
}

int ps_csv_parse_row(const ps_csv_reader *r, char *line, size_t lineno, char **fields,
                     double *vals, char *err, size_t errlen) {
    size_t bad = 0;
    long n = split(r, line, fields, r->cols, &bad);
    if (n < 0) {
        snprintf(err, errlen, "%s:%zu: column %zu: unterminated quote", r->path, lineno, bad);
        return PS_EFORMAT;
    }
    if ((size_t)n != r->cols) {
        snprintf(err, errlen, "%s:%zu: %s%ld fields, the header has %zu", r->path, lineno,
                 (size_t)n > r->cols ? "more than " : "", (size_t)n > r->cols ? (long)r->cols : n,
                 r->cols);
        return PS_EFORMAT;
    }
    for (size_t i = 0; i < r->cols; i++) {
        if (r->text && r->text[i]) {
            vals[i] = NAN;
            continue;
        }
        char *end;
        const char *s = fields[i];
        while (*s == ' ')
            s++;
        errno = 0;
        double v = strtod(s, &end);
        while (*end == ' ')
            end++;
        if (end == s || *end != '\0') {
            snprintf(err, errlen, "%s:%zu: column %zu (%.64s): %s%.64s%s", r->path, lineno,
                     i + 1, r->names[i], *s ? "not a number: \"" : "empty field", s,
                     *s ? "\"" : "");
            return PS_EFORMAT;
        }
        vals[i] = v;
    }
    return PS_OK;
}

void ps_csv_close(ps_csv_reader *r) {
    if (r->f) fclose(r->f);
    for (size_t i = 0; r->names && i < r->cols; i++)
        free(r->names[i]);
    free(r->names);
    free(r->fields);
    free(r->path);
    free(r->buf);
    free(r->text);
    memset(r, 0, sizeof *r);
}
