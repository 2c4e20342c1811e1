/* CSV and TSV tables with a header row, read a row at a time (the file is
 * never held whole): every field a number (strtod's syntax: integers,
 * decimals, exponents, inf, nan), fields optionally in double quotes (""
 * for a quote inside), lines ending in LF or CRLF. A ragged row, a field that
 * is not a number, an empty field or a line over the limit is an error naming
 * the file, the line and the column. Columns marked as text (ps_csv_keep_text:
 * ids, columns nobody reads) are split but not parsed. */
#ifndef PS_CSV_H
#define PS_CSV_H

#include <stddef.h>
#include <stdio.h>

#define PS_CSV_MAX_LINE ((size_t)1 << 20)

typedef struct {
    FILE *f;      /* owned */
    char *path;   /* owned copy, for messages */
    char delim;   /* ',' or '\t' */
    size_t cols;  /* from the header */
    char **names; /* owned: the header's column names */
    char **fields; /* owned: cols + 1 pointers into buf, for splitting a row */
    size_t line;  /* the last line read, from 1 */
    unsigned long long offset;     /* bytes read so far */
    unsigned long long row_offset; /* where the last line read begins */
    size_t row_len;                /* the last row's length, without its line end */
    char *buf;    /* owned: the current line */
    size_t cap;
    unsigned char *text; /* owned: cols flags, 1 for a column kept as text (NULL: none) */
} ps_csv_reader;

/* Opens path and reads its header. delim 0: '\t' for a name ending in .tsv,
 * ',' otherwise. Returns PS_OK, PS_EIO, PS_EFORMAT (no header, an empty or
 * repeated column name) or PS_ENOMEM. */
int ps_csv_open(ps_csv_reader *r, const char *path, char delim, char *err, size_t errlen);

/* The index of the column named name, or -1. */
long ps_csv_column(const ps_csv_reader *r, const char *name);

/* Marks column col as text: not parsed (its vals entry NaN), its field left
 * in fields / r->fields for the caller. Returns PS_OK or PS_ENOMEM. */
int ps_csv_keep_text(ps_csv_reader *r, size_t col);

/* Reads the next row's cols numbers into vals (r->fields then point at the
 * row's fields, valid until the next read). Returns PS_OK, PS_ENOENT at
 * the end of the file, PS_EFORMAT or PS_EIO. Blank lines are skipped. */
int ps_csv_next(ps_csv_reader *r, double *vals, char *err, size_t errlen);

void ps_csv_close(ps_csv_reader *r);
/* Parses one row held in line (without its line end; split in place) as
 * ps_csv_next does; fields holds cols + 1 pointers, lineno names the line in
 * err. For readers that go back to a row by its offset. */
int ps_csv_parse_row(const ps_csv_reader *r, char *line, size_t lineno, char **fields,
                     double *vals, char *err, size_t errlen);

#endif
