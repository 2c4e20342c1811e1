/* CSV / TSV files as a record source (source.h): every row is parsed once at
 * open (so a ragged row or a non-number is found before training starts, by
 * its file and line) and its place kept, 16 bytes a row; a read goes back to
 * the row with one pread and parses it again. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "csv.h"
#include "order.h"
#include "ps_error.h"
#include "source.h"

typedef struct {
    uint64_t offset;
    uint32_t len, line;
} row_ref;

typedef struct {
    ps_csv_reader *files; /* open, for their headers and descriptors */
    size_t n_files;
    size_t **cols;        /* per file: the feature columns' indices */
    size_t *label_col;    /* per file */
    size_t n_features;
    row_ref *rows;
} csv_state;


static size_t align8(size_t n) {
    return (n + 7) & ~(size_t)7;
}

static int csv_read(ps_source *src, size_t i, ps_sample *s, char *err, size_t errlen) {
    csv_state *t = src->self;
    size_t f = ps_order_file_of(src->file_start, src->n_files, i);
    const ps_csv_reader *r = &t->files[f];
    row_ref ref = t->rows[i];
    size_t line_bytes = align8((size_t)ref.len + 1);
    size_t need = line_bytes + (r->cols + 1) * sizeof(char *) + r->cols * sizeof(double);
    if (ps_sample_reserve_bytes(s, need) != PS_OK || ps_sample_reserve(s, t->n_features) != PS_OK)
        return PS_ENOMEM;
    char *line = (char *)s->bytes;
    char **fields = (char **)(void *)(s->bytes + line_bytes);
    double *vals = (double *)(void *)(s->bytes + line_bytes + (r->cols + 1) * sizeof(char *));
    size_t got = 0;
    while (got < ref.len) {
        ssize_t n = pread(fileno(r->f), line + got, ref.len - got, (off_t)(ref.offset + got));
        if (n <= 0) {
            snprintf(err, errlen, "%s:%u: %s", r->path, ref.line,
                     n < 0 ? strerror(errno) : "the file got shorter");
            return PS_EIO;
        }
        got += (size_t)n;
    }
    line[ref.len] = '\0';
    int rc = ps_csv_parse_row(r, line, ref.line, fields, vals, err, errlen);
    if (rc != PS_OK) return rc;
    for (size_t k = 0; k < t->n_features; k++) s->x[k] = (float)vals[t->cols[f][k]];
    s->h = 1, s->w = 1, s->c = t->n_features;
    s->label = (int32_t)vals[t->label_col[f]];
    return PS_OK;
}

static void csv_close(ps_source *src) {
    csv_state *t = src->self;
    if (!t) return;
    for (size_t f = 0; f < t->n_files; f++) {
        if (t->files) ps_csv_close(&t->files[f]);
        if (t->cols) free(t->cols[f]);
    }
    free(t->files);
    free(t->cols);
    free(t->label_col);
    free(t->rows);
    free(t);
}

static const ps_source_ops csv_ops = {.read = csv_read, .close = csv_close};

/* Finds the feature and label columns of file f. */
static int columns(csv_state *t, size_t f, const ps_source_opts *o, const char *label, char *err,
                   size_t errlen) {
    ps_csv_reader *r = &t->files[f];
    long lc = ps_csv_column(r, label);
    if (lc < 0) {
        snprintf(err, errlen, "%s: no label column \"%s\" (name it in the data spec's \"label\")",
                 r->path, label);
        return PS_EFORMAT;
    }
    t->label_col[f] = (size_t)lc;
    size_t nf = o && o->columns ? o->n_columns : r->cols - 1;
    if (f > 0 && nf != t->n_features) {
        snprintf(err, errlen, "%s: %zu feature columns, the first file has %zu", r->path, nf,
                 t->n_features);
        return PS_EFORMAT;
    }
    if (nf == 0) {
        snprintf(err, errlen, "%s: no feature columns", r->path);
        return PS_EFORMAT;
    }
    t->n_features = nf;
    t->cols[f] = malloc(nf * sizeof **t->cols);
    if (!t->cols[f]) return PS_ENOMEM;
    for (size_t k = 0, c = 0; k < nf; k++) {
        if (o && o->columns) {
            long ci = ps_csv_column(r, o->columns[k]);
            if (ci < 0) {
                snprintf(err, errlen, "%s: no column \"%s\"", r->path, o->columns[k]);
                return PS_EFORMAT;
            }
            t->cols[f][k] = (size_t)ci;
        } else {
            if (c == (size_t)lc) c++;
            t->cols[f][k] = c++;
        }
    }
    return PS_OK;
}

/* Reads every row of file f once, checking it and keeping its place. */
static int scan(csv_state *t, size_t f, size_t *n, size_t *cap, int *maxl, char *err,
                size_t errlen) {
    ps_csv_reader *r = &t->files[f];
    double *vals = malloc(r->cols * sizeof *vals);
    if (!vals) return PS_ENOMEM;
    int rc;
    while ((rc = ps_csv_next(r, vals, err, errlen)) == PS_OK) {
        double l = vals[t->label_col[f]];
        if (!(l >= 0 && l <= 65535 && l == (double)(int32_t)l)) {
            snprintf(err, errlen, "%s:%zu: the label %g is not a class number (0 to 65535)",
                     r->path, r->line, l);
            rc = PS_EFORMAT;
            break;
        }
        if ((int)l > *maxl) *maxl = (int)l;
        if (*n == *cap) {
            size_t nc = *cap ? 2 * *cap : 1024;
            row_ref *rows = realloc(t->rows, nc * sizeof *rows);
            if (!rows) {
                rc = PS_ENOMEM;
                break;
            }
            t->rows = rows, *cap = nc;
        }
        t->rows[(*n)++] = (row_ref){r->row_offset, (uint32_t)r->row_len, (uint32_t)r->line};
    }
    free(vals);
    return rc == PS_ENOENT ? PS_OK : rc;
}

int ps_source_csv(const char *const *paths, size_t n_paths, const ps_source_opts *o,
                  ps_source **out, char *err, size_t errlen) {
    *out = NULL;
    if (n_paths == 0) {
        snprintf(err, errlen, "CSV: no files");
        return PS_EINVAL;
    }
    ps_source *s = ps_source_new(&csv_ops, n_paths);
    csv_state *t = calloc(1, sizeof *t);
    if (!s || !t) {
        free(t), ps_source_close(s);
        return PS_ENOMEM;
    }
    s->self = t;
    s->format = "CSV";
    t->files = calloc(n_paths, sizeof *t->files);
    t->cols = calloc(n_paths, sizeof *t->cols);
    t->label_col = calloc(n_paths, sizeof *t->label_col);
    if (!t->files || !t->cols || !t->label_col) {
        ps_source_close(s);
        return PS_ENOMEM;
    }
    t->n_files = n_paths;
    const char *label = o && o->label_column ? o->label_column : "label";
    size_t n = 0, cap = 0;
    int rc = PS_OK, maxl = -1;
    for (size_t f = 0; rc == PS_OK && f < n_paths; f++) {
        s->file_start[f] = n;
        rc = ps_csv_open(&t->files[f], paths[f], 0, err, errlen);
        if (rc == PS_OK) rc = columns(t, f, o, label, err, errlen);
        if (rc == PS_OK) rc = scan(t, f, &n, &cap, &maxl, err, errlen);
    }
    s->file_start[n_paths] = n;
    s->n = n;
    if (rc == PS_OK && n == 0) {
        snprintf(err, errlen, "%s: no rows", paths[0]);
        rc = PS_EFORMAT;
    }
    if (rc != PS_OK) {
        ps_source_close(s);
        return rc;
    }
    s->num_classes = maxl + 1;
    s->h = 1, s->w = 1, s->c = t->n_features;
    snprintf(s->desc, sizeof s->desc, "%s%s (%zu rows, %zu features, label \"%s\")", paths[0],
             n_paths > 1 ? ", ..." : "", n, t->n_features, label);
    *out = s;
    return PS_OK;
}
