/* CSV / TSV files as a record source (source.h): every row is parsed once at
 * open (so a ragged row, a non-number or a bad id is found before training
 * starts, by its file and line) and its place kept, 16 bytes a row; a read
 * goes back to the row with one pread and parses it again. A record is the
 * feature columns as floats, the id columns as 64-bit ids (ids.h) and the
 * label: a class, or a float target. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "csv.h"
#include "ids.h"
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
    size_t **id_cols;     /* per file: the id columns' indices, in the spec's order */
    size_t *label_col;    /* per file */
    size_t n_features, n_ids;
    bool hash_ids, float_label;
    row_ref *rows;
} csv_state;

/* What a column is to the source. */
enum { UNUSED = 0, LABEL, ID, FEATURE };

static size_t align8(size_t n) {
    return (n + 7) & ~(size_t)7;
}

static int bad_id(const ps_csv_reader *r, size_t line, size_t col, const char *field, char *err,
                  size_t errlen) {
    snprintf(err, errlen,
             "%s:%zu: column %zu (%.64s): not an unsigned 64-bit decimal id: \"%.64s\" (\"hash_ids\": "
             "true takes any text)",
             r->path, line, col + 1, r->names[col], field);
    return PS_EFORMAT;
}

/* The ids of a row split into fields. */
static int row_ids(const csv_state *t, size_t f, size_t line, char *const *fields, uint64_t *ids,
                   char *err, size_t errlen) {
    for (size_t k = 0; k < t->n_ids; k++) {
        size_t c = t->id_cols[f][k];
        if (ps_id_of(fields[c], k, t->hash_ids, &ids[k]) != PS_OK)
            return bad_id(&t->files[f], line, c, fields[c], err, errlen);
    }
    return PS_OK;
}

static int csv_read(ps_source *src, size_t i, ps_sample *s, char *err, size_t errlen) {
    csv_state *t = src->self;
    size_t f = ps_order_file_of(src->file_start, src->n_files, i);
    const ps_csv_reader *r = &t->files[f];
    row_ref ref = t->rows[i];
    size_t line_bytes = align8((size_t)ref.len + 1);
    size_t need = line_bytes + (r->cols + 1) * sizeof(char *) + r->cols * sizeof(double);
    if (ps_sample_reserve_bytes(s, need) != PS_OK || ps_sample_reserve(s, t->n_features) != PS_OK ||
        ps_sample_reserve_ids(s, t->n_ids) != PS_OK)
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
    if (rc == PS_OK) rc = row_ids(t, f, ref.line, fields, s->ids, err, errlen);
    if (rc != PS_OK) return rc;
    for (size_t k = 0; k < t->n_features; k++) s->x[k] = (float)vals[t->cols[f][k]];
    s->h = 1, s->w = 1, s->c = t->n_features;
    s->n_ids = t->n_ids;
    double l = vals[t->label_col[f]];
    s->label = t->float_label ? 0 : (int32_t)l;
    s->target = (float)l;
    return PS_OK;
}

static void csv_close(ps_source *src) {
    csv_state *t = src->self;
    if (!t) return;
    for (size_t f = 0; f < t->n_files; f++) {
        if (t->files) ps_csv_close(&t->files[f]);
        if (t->cols) free(t->cols[f]);
        if (t->id_cols) free(t->id_cols[f]);
    }
    free(t->files);
    free(t->cols);
    free(t->id_cols);
    free(t->label_col);
    free(t->rows);
    free(t);
}

static const ps_source_ops csv_ops = {.read = csv_read, .close = csv_close};

/* Finds the id columns of file f (marking them in use). */
static int id_columns(csv_state *t, size_t f, const ps_source_opts *o, unsigned char *use,
                      char *err, size_t errlen) {
    ps_csv_reader *r = &t->files[f];
    if (!t->n_ids) return PS_OK;
    if (!(t->id_cols[f] = malloc(t->n_ids * sizeof **t->id_cols))) return PS_ENOMEM;
    for (size_t k = 0; k < t->n_ids; k++) {
        const char *name = o->id_columns[k];
        long ci = ps_csv_column(r, name);
        if (ci < 0) {
            snprintf(err, errlen, "%s: no id column \"%s\"", r->path, name);
            return PS_EFORMAT;
        }
        if (use[ci] != UNUSED) {
            snprintf(err, errlen, "%s: column \"%s\" is %s", r->path, name,
                     use[ci] == LABEL ? "both the label and an id column"
                                      : "named twice in \"id_columns\"");
            return PS_EFORMAT;
        }
        use[ci] = ID;
        t->id_cols[f][k] = (size_t)ci;
    }
    return PS_OK;
}

/* Finds the label, id and feature columns of file f; the columns nobody reads
 * (and the ids) are kept as text. */
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
    unsigned char *use = calloc(r->cols, 1);
    if (!use) return PS_ENOMEM;
    use[lc] = LABEL;
    int rc = id_columns(t, f, o, use, err, errlen);
    size_t free_cols = 0;
    for (size_t c = 0; c < r->cols; c++) free_cols += use[c] == UNUSED;
    size_t nf = o && o->columns ? o->n_columns : free_cols;
    if (rc == PS_OK && f > 0 && nf != t->n_features) {
        snprintf(err, errlen, "%s: %zu feature columns, the first file has %zu", r->path, nf,
                 t->n_features);
        rc = PS_EFORMAT;
    }
    if (rc == PS_OK && nf == 0 && t->n_ids == 0) {
        snprintf(err, errlen, "%s: no feature columns", r->path);
        rc = PS_EFORMAT;
    }
    t->n_features = nf;
    if (rc == PS_OK && !(t->cols[f] = malloc((nf ? nf : 1) * sizeof **t->cols))) rc = PS_ENOMEM;
    for (size_t k = 0, c = 0; rc == PS_OK && k < nf; k++) {
        if (o && o->columns) {
            long ci = ps_csv_column(r, o->columns[k]);
            if (ci < 0) {
                snprintf(err, errlen, "%s: no column \"%s\"", r->path, o->columns[k]);
                rc = PS_EFORMAT;
            } else if (use[ci] == ID) {
                snprintf(err, errlen, "%s: column \"%s\" is both a feature and an id column",
                         r->path, o->columns[k]);
                rc = PS_EFORMAT;
            } else {
                t->cols[f][k] = (size_t)ci;
                if (use[ci] == UNUSED) use[ci] = FEATURE;
            }
        } else {
            while (use[c] != UNUSED) c++;
            use[c] = FEATURE;
            t->cols[f][k] = c++;
        }
    }
    for (size_t c = 0; rc == PS_OK && c < r->cols; c++)
        if (use[c] == UNUSED || use[c] == ID) rc = ps_csv_keep_text(r, c);
    free(use);
    return rc;
}

/* Reads every row of file f once, checking it and keeping its place. */
static int scan(csv_state *t, ps_source *s, size_t f, size_t *n, size_t *cap, int *maxl,
                char *err, size_t errlen) {
    ps_csv_reader *r = &t->files[f];
    double *vals = malloc(r->cols * sizeof *vals);
    uint64_t *ids = malloc((t->n_ids ? t->n_ids : 1) * sizeof *ids);
    int rc = vals && ids ? PS_OK : PS_ENOMEM;
    size_t lc = t->label_col[f];
    while (rc == PS_OK && (rc = ps_csv_next(r, vals, err, errlen)) == PS_OK) {
        double l = vals[lc];
        if (t->float_label) {
            if (!isfinite((float)l)) {
                snprintf(err, errlen, "%s:%zu: column %zu (%.64s): the label %g is not a finite "
                         "float", r->path, r->line, lc + 1, r->names[lc], l);
                rc = PS_EFORMAT;
                break;
            }
            if (*n == 0 || l < s->target_min) s->target_min = l;
            if (*n == 0 || l > s->target_max) s->target_max = l;
        } else {
            if (!(l >= 0 && l <= 65535 && l == (double)(int32_t)l)) {
                snprintf(err, errlen, "%s:%zu: the label %g is not a class number (0 to 65535)",
                         r->path, r->line, l);
                rc = PS_EFORMAT;
                break;
            }
            if ((int)l > *maxl) *maxl = (int)l;
        }
        if (!t->hash_ids && (rc = row_ids(t, f, r->line, r->fields, ids, err, errlen)) != PS_OK)
            break;
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
    free(ids);
    return rc == PS_ENOENT ? PS_OK : rc;
}

int ps_source_csv(const char *const *paths, size_t n_paths, const ps_source_opts *o,
                  ps_source **out, char *err, size_t errlen) {
    *out = NULL;
    if (n_paths == 0) {
        snprintf(err, errlen, "CSV: no files");
        return PS_EINVAL;
    }
    if (o && o->delimiter && o->delimiter != ',' && o->delimiter != '\t') {
        snprintf(err, errlen, "CSV: the delimiter is a comma or a tab");
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
    t->id_cols = calloc(n_paths, sizeof *t->id_cols);
    t->label_col = calloc(n_paths, sizeof *t->label_col);
    if (!t->files || !t->cols || !t->id_cols || !t->label_col) {
        ps_source_close(s);
        return PS_ENOMEM;
    }
    t->n_files = n_paths;
    t->n_ids = o && o->id_columns ? o->n_id_columns : 0;
    t->hash_ids = o && o->hash_ids;
    t->float_label = o && o->float_label;
    const char *label = o && o->label_column ? o->label_column : "label";
    size_t n = 0, cap = 0;
    int rc = PS_OK, maxl = -1;
    for (size_t f = 0; rc == PS_OK && f < n_paths; f++) {
        s->file_start[f] = n;
        rc = ps_csv_open(&t->files[f], paths[f], o ? o->delimiter : 0, err, errlen);
        if (rc == PS_OK) rc = columns(t, f, o, label, err, errlen);
        if (rc == PS_OK) rc = scan(t, s, f, &n, &cap, &maxl, err, errlen);
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
    s->n_ids = t->n_ids;
    s->float_target = t->float_label;
    s->h = 1, s->w = 1, s->c = t->n_features;
    char ids[64] = "";
    if (t->n_ids)
        snprintf(ids, sizeof ids, ", %zu id%s%s", t->n_ids, t->n_ids == 1 ? "" : "s",
                 t->hash_ids ? " hashed" : "");
    snprintf(s->desc, sizeof s->desc, "%s%s (%zu rows, %zu features%s, %slabel \"%s\")", paths[0],
             n_paths > 1 ? ", ..." : "", n, t->n_features, ids,
             t->float_label ? "float " : "", label);
    *out = s;
    return PS_OK;
}
