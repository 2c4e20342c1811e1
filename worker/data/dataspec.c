/* --data resolved (dataspec.h): detection by what a path holds, and the
 * data spec's JSON. */
#include "dataspec.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cifar.h"
#include "image.h"
#include "ps_error.h"
#include "tfrecord.h"

static const char *const format_names[] = {"idx",  "cifar10", "image_folder", "tfrecord",
                                           "npy",  "npz",     "csv"};

const char *ps_data_format_name(ps_data_format f) {
    return (unsigned)f < sizeof format_names / sizeof *format_names ? format_names[f] : "?";
}

void ps_data_spec_free(ps_data_spec *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n_paths; i++) free(s->paths[i]);
    free(s->paths);
    free(s->x), free(s->y);
    free((char *)s->opts.image_key), free((char *)s->opts.label_key);
    free((char *)s->opts.label_column);
    for (size_t i = 0; i < s->opts.n_columns; i++) free((char *)s->opts.columns[i]);
    free((void *)s->opts.columns);
    for (size_t i = 0; i < s->opts.n_id_columns; i++) free((char *)s->opts.id_columns[i]);
    free((void *)s->opts.id_columns);
    cJSON_Delete(s->preprocess);
    if (s->validation) {
        ps_data_spec_free(s->validation);
        free(s->validation);
    }
    memset(s, 0, sizeof *s);
}

static int add_path(ps_data_spec *s, const char *p) {
    char **v = realloc(s->paths, (s->n_paths + 1) * sizeof *v);
    if (!v) return PS_ENOMEM;
    s->paths = v;
    if (!(v[s->n_paths] = strdup(p))) return PS_ENOMEM;
    s->n_paths++;
    return PS_OK;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

static bool is_tfrecord_name(const char *name) {
    return ends_with(name, ".tfrecord") || ends_with(name, ".tfrec") ||
           ends_with(name, ".tfrecords") || strstr(name, ".tfrecord-") != NULL;
}

/* A file whose first 12 bytes are a TFRecord header with a matching checksum. */
static bool sniff_tfrecord(const char *path) {
    FILE *f = fopen(path, "rb");
    uint8_t head[12];
    uint64_t len;
    bool ok = f && fread(head, 1, sizeof head, f) == sizeof head && ps_tfrecord_header(head, &len);
    if (f) fclose(f);
    return ok;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool exists(const char *dir, const char *name) {
    char p[4096];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0;
}

/* What a directory holds. */
static int detect_dir(const char *dir, ps_data_spec *s, char *err, size_t errlen) {
    if (exists(dir, "train-images-idx3-ubyte") || exists(dir, "train-images-idx3-ubyte.gz") ||
        exists(dir, "t10k-images-idx3-ubyte") || exists(dir, "t10k-images-idx3-ubyte.gz")) {
        s->format = PS_DATA_IDX;
        return add_path(s, dir);
    }
    if (ps_cifar10_dir_detect(dir)) {
        s->format = PS_DATA_CIFAR10;
        return add_path(s, dir);
    }
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "--data %s: %s", dir, strerror(errno));
        return PS_EIO;
    }
    size_t subdirs = 0;
    int rc = PS_OK;
    struct dirent *e;
    while (rc == PS_OK && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[4096];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (lstat(p, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) subdirs++;
        else if (S_ISREG(st.st_mode) && is_tfrecord_name(e->d_name)) rc = add_path(s, p);
    }
    closedir(d);
    if (rc != PS_OK) return rc;
    if (s->n_paths) {
        qsort(s->paths, s->n_paths, sizeof *s->paths, by_name);
        s->format = PS_DATA_TFRECORD;
        return PS_OK;
    }
    if (subdirs) {
        s->format = PS_DATA_FOLDER;
        return add_path(s, dir);
    }
    snprintf(err, errlen,
             "--data %s: no IDX files, CIFAR-10 batches, *.tfrecord files or class "
             "subdirectories of images here (a data spec names any other layout)",
             dir);
    return PS_EFORMAT;
}

/* What one file is (not a spec). want: the spec's "format", or -1; "csv"
 * takes a file of any name (a .inter, a .txt). */
static int detect_file(const char *path, int want, ps_data_format *f, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return PS_EIO;
    }
    if (!S_ISREG(st.st_mode)) { /* a FIFO or a device: opening it could block */
        snprintf(err, errlen, "%s: not a regular file", path);
        return PS_EIO;
    }
    if (want == PS_DATA_CSV) *f = PS_DATA_CSV;
    else if (ends_with(path, ".npz")) *f = PS_DATA_NPZ;
    else if (ends_with(path, ".csv") || ends_with(path, ".tsv")) *f = PS_DATA_CSV;
    else if (is_tfrecord_name(path) || sniff_tfrecord(path)) *f = PS_DATA_TFRECORD;
    else if (ends_with(path, ".npy")) {
        snprintf(err, errlen,
                 "%s: a .npy file holds one array; give x and y in a data spec "
                 "({\"format\": \"npy\", \"x\": \"x.npy\", \"y\": \"y.npy\"}) or save both in "
                 "an .npz",
                 path);
        return PS_EFORMAT;
    } else {
        snprintf(err, errlen,
                 "%s: not a format the name or the first bytes tell (.json data spec, .npz, "
                 ".csv, .tsv, TFRecord)",
                 path);
        return PS_EFORMAT;
    }
    return PS_OK;
}

/* A directory, a file or a glob, already joined to its base; want as
 * detect_file's. */
static int resolve_path(const char *p, int want, ps_data_spec *s, char *err, size_t errlen) {
    struct stat st;
    if (strpbrk(p, "*?[")) {
        glob_t g;
        int grc = glob(p, 0, NULL, &g);
        if (grc != 0) {
            snprintf(err, errlen, "%s: %s", p,
                     grc == GLOB_NOMATCH ? "no file matches" : "cannot be expanded");
            if (grc != GLOB_NOMATCH) globfree(&g);
            return PS_EIO;
        }
        int rc = PS_OK;
        for (size_t i = 0; rc == PS_OK && i < g.gl_pathc; i++) {
            ps_data_format f;
            rc = detect_file(g.gl_pathv[i], want, &f, err, errlen);
            if (rc == PS_OK && f != PS_DATA_TFRECORD && f != PS_DATA_CSV) {
                snprintf(err, errlen, "%s: a glob takes TFRecord or CSV files, not %s", p,
                         g.gl_pathv[i]);
                rc = PS_EFORMAT;
            } else if (rc == PS_OK && i > 0 && f != s->format) {
                snprintf(err, errlen, "%s: the files are not all of one format (%s)", p,
                         g.gl_pathv[i]);
                rc = PS_EFORMAT;
            }
            if (rc == PS_OK) s->format = f, rc = add_path(s, g.gl_pathv[i]);
        }
        globfree(&g); /* glob sorts its matches */
        return rc;
    }
    if (stat(p, &st) != 0) {
        snprintf(err, errlen, "%s: %s", p, strerror(errno));
        return PS_EIO;
    }
    if (S_ISDIR(st.st_mode)) return detect_dir(p, s, err, errlen);
    int rc = detect_file(p, want, &s->format, err, errlen);
    return rc == PS_OK ? add_path(s, p) : rc;
}

/* base/rel unless rel is absolute. */
static void join(const char *base, const char *rel, char *out, size_t outlen) {
    if (rel[0] == '/' || !base[0])
        snprintf(out, outlen, "%s", rel);
    else
        snprintf(out, outlen, "%s/%s", base, rel);
}

static int bad(char *err, size_t errlen, const char *origin, const char *key, const char *want) {
    snprintf(err, errlen, "%s: \"%s\" must be %s", origin, key, want);
    return PS_EFORMAT;
}

static char *dup_or_null(const char *s) {
    return s ? strdup(s) : NULL;
}

static int parse_spec(const cJSON *j, const char *base, ps_data_spec *s, char *err, size_t errlen);

/* The spec's "path": a string or a list of files. */
static int spec_paths(const cJSON *path, int want, const char *base, ps_data_spec *s, char *err,
                      size_t errlen) {
    char full[4096];
    if (cJSON_IsString(path)) {
        join(base, path->valuestring, full, sizeof full);
        return resolve_path(full, want, s, err, errlen);
    }
    if (!cJSON_IsArray(path) || cJSON_GetArraySize(path) == 0)
        return bad(err, errlen, s->origin, "path", "a directory, a file, a glob or a list of files");
    const cJSON *it;
    int rc = PS_OK;
    cJSON_ArrayForEach(it, path) {
        if (!cJSON_IsString(it))
            return bad(err, errlen, s->origin, "path", "a list of file names");
        join(base, it->valuestring, full, sizeof full);
        ps_data_format f;
        if ((rc = detect_file(full, want, &f, err, errlen)) != PS_OK) return rc;
        if (s->n_paths && f != s->format) {
            snprintf(err, errlen, "%s: the files of \"path\" are not all of one format", s->origin);
            return PS_EFORMAT;
        }
        s->format = f;
        if ((rc = add_path(s, full)) != PS_OK) return rc;
    }
    return rc;
}

static int get_size(const cJSON *j, const char *key, size_t max, size_t *out, const char *origin,
                    char *err, size_t errlen) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v) return PS_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > (double)max ||
        v->valuedouble != (double)(size_t)v->valuedouble)
        return bad(err, errlen, origin, key, "a whole number within its range");
    *out = (size_t)v->valuedouble;
    return PS_OK;
}

/* A list of column names into *out (n + 1 entries, so an empty list is not NULL). */
static int name_list(const cJSON *v, const char *key, bool may_be_empty, const char *origin,
                     const char *const **out, size_t *n_out, char *err, size_t errlen) {
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
    if (!cJSON_IsArray(v) || (n == 0 && !may_be_empty))
        return bad(err, errlen, origin, key, "a list of column names");
    const char **names = calloc((size_t)n + 1, sizeof *names);
    if (!names) return PS_ENOMEM;
    *out = names;
    const cJSON *c;
    cJSON_ArrayForEach(c, v) {
        if (!cJSON_IsString(c) || !c->valuestring[0])
            return bad(err, errlen, origin, key, "column names");
        if (!(names[(*n_out)++] = strdup(c->valuestring))) return PS_ENOMEM;
    }
    return PS_OK;
}

/* The keys of a table (CSV / TSV): its feature, id and label columns. */
static int tabular_keys(const cJSON *j, ps_data_spec *s, char *err, size_t errlen) {
    ps_source_opts *o = &s->opts;
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(j, "id_columns");
    const cJSON *hash = cJSON_GetObjectItemCaseSensitive(j, "hash_ids");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "label_type");
    const cJSON *delim = cJSON_GetObjectItemCaseSensitive(j, "delimiter");
    const cJSON *cols = cJSON_GetObjectItemCaseSensitive(j, "columns");
    const char *only = ids ? "id_columns" : hash ? "hash_ids" : type ? "label_type"
                     : delim ? "delimiter" : NULL;
    if (only && s->format != PS_DATA_CSV) {
        snprintf(err, errlen, "%s: \"%s\" is for CSV / TSV tables, not %s data", s->origin, only,
                 ps_data_format_name(s->format));
        return PS_EFORMAT;
    }
    int rc;
    if (ids && (rc = name_list(ids, "id_columns", false, s->origin, &o->id_columns,
                               &o->n_id_columns, err, errlen)) != PS_OK)
        return rc;
    for (size_t a = 0; a < o->n_id_columns; a++)
        for (size_t b = 0; b < a; b++)
            if (strcmp(o->id_columns[a], o->id_columns[b]) == 0) {
                snprintf(err, errlen, "%s: \"id_columns\" names \"%s\" twice", s->origin,
                         o->id_columns[a]);
                return PS_EFORMAT;
            }
    if (hash) {
        if (!cJSON_IsBool(hash)) return bad(err, errlen, s->origin, "hash_ids", "true or false");
        if (!ids) return bad(err, errlen, s->origin, "hash_ids", "given with \"id_columns\"");
        o->hash_ids = cJSON_IsTrue(hash);
    }
    if (type) {
        if (!cJSON_IsString(type) ||
            (strcmp(type->valuestring, "class") && strcmp(type->valuestring, "float")))
            return bad(err, errlen, s->origin, "label_type", "\"class\" or \"float\"");
        o->float_label = strcmp(type->valuestring, "float") == 0;
    }
    if (delim) {
        if (!cJSON_IsString(delim) ||
            (strcmp(delim->valuestring, ",") && strcmp(delim->valuestring, "\t")))
            return bad(err, errlen, s->origin, "delimiter", "\",\" or \"\\t\"");
        o->delimiter = delim->valuestring[0];
    }
    if (cols) {
        /* empty: no numeric features, when the ids are the input */
        if (cJSON_IsArray(cols) && cJSON_GetArraySize(cols) == 0 && !ids)
            return bad(err, errlen, s->origin, "columns",
                       "a list of column names (empty only with \"id_columns\")");
        if ((rc = name_list(cols, "columns", true, s->origin, &o->columns, &o->n_columns, err,
                            errlen)) != PS_OK)
            return rc;
    }
    return PS_OK;
}

/* A copy of a list of names (n + 1 entries), or NULL for NULL. */
static const char *const *dup_names(const char *const *v, size_t n) {
    if (!v) return NULL;
    const char **c = calloc(n + 1, sizeof *c);
    for (size_t i = 0; c && i < n; i++)
        if (!(c[i] = strdup(v[i]))) {
            while (i--) free((char *)c[i]);
            free(c);
            return NULL;
        }
    return c;
}

static const char *const spec_keys[] = {
    "format", "path", "x", "y", "image_key", "label_key", "shape", "columns", "label", "channels",
    "preprocess", "on_error", "validation_split", "validation", "shuffle_buffer", "max_pixels",
    "max_record_bytes", "jpeg_dct", "id_columns", "hash_ids", "label_type", "delimiter", "comment"};

static int parse_spec(const cJSON *j, const char *base, ps_data_spec *s, char *err, size_t errlen) {
    if (!cJSON_IsObject(j)) {
        snprintf(err, errlen, "%s: a data spec is a JSON object", s->origin);
        return PS_EFORMAT;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, j) {
        bool known = false;
        for (size_t k = 0; k < sizeof spec_keys / sizeof *spec_keys; k++)
            known |= strcmp(it->string, spec_keys[k]) == 0;
        if (!known) {
            snprintf(err, errlen, "%s: unknown key \"%s\" (docs/DATA.md lists them)", s->origin,
                     it->string);
            return PS_EFORMAT;
        }
    }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(j, "path");
    int want = -1;
    if (fmt) {
        for (int k = 0; k < (int)(sizeof format_names / sizeof *format_names); k++)
            if (cJSON_IsString(fmt) && strcmp(fmt->valuestring, format_names[k]) == 0) want = k;
        if (want < 0)
            return bad(err, errlen, s->origin, "format",
                       "one of idx, cifar10, image_folder, tfrecord, npy, npz, csv");
    }
    int rc = PS_OK;
    char full[4096];
    if (want == PS_DATA_NPY) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, "x"),
                    *y = cJSON_GetObjectItemCaseSensitive(j, "y");
        if (!cJSON_IsString(x) || !cJSON_IsString(y))
            return bad(err, errlen, s->origin, "x\" and \"y", "the .npy files' names");
        s->format = PS_DATA_NPY;
        join(base, x->valuestring, full, sizeof full);
        s->x = strdup(full);
        join(base, y->valuestring, full, sizeof full);
        s->y = strdup(full);
        if (!s->x || !s->y) return PS_ENOMEM;
    } else {
        if (!path) return bad(err, errlen, s->origin, "path", "given");
        if ((rc = spec_paths(path, want, base, s, err, errlen)) != PS_OK) return rc;
        if (want >= 0 && (int)s->format != want &&
            !(want == PS_DATA_FOLDER && s->n_paths == 1) &&
            !(want == PS_DATA_TFRECORD && s->format == PS_DATA_CSV)) {
            snprintf(err, errlen, "%s: \"format\" is %s, but \"path\" holds %s", s->origin,
                     format_names[want], format_names[s->format]);
            return PS_EFORMAT;
        }
        if (want >= 0) s->format = (ps_data_format)want;
        if (s->format == PS_DATA_NPZ) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, "x"),
                        *y = cJSON_GetObjectItemCaseSensitive(j, "y");
            if ((x && !cJSON_IsString(x)) || (y && !cJSON_IsString(y)))
                return bad(err, errlen, s->origin, "x\" and \"y", "the .npz members' names");
            s->x = strdup(x ? x->valuestring : "x");
            s->y = strdup(y ? y->valuestring : "y");
            if (!s->x || !s->y) return PS_ENOMEM;
        }
    }
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "image_key"))) {
        if (!cJSON_IsString(v)) return bad(err, errlen, s->origin, "image_key", "a string");
        if (!(s->opts.image_key = strdup(v->valuestring))) return PS_ENOMEM;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "label_key"))) {
        if (!cJSON_IsString(v)) return bad(err, errlen, s->origin, "label_key", "a string");
        if (!(s->opts.label_key = strdup(v->valuestring))) return PS_ENOMEM;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "label"))) {
        if (!cJSON_IsString(v)) return bad(err, errlen, s->origin, "label", "a column name");
        if (!(s->opts.label_column = strdup(v->valuestring))) return PS_ENOMEM;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "shape"))) {
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 3)
            return bad(err, errlen, s->origin, "shape", "[height, width, channels]");
        for (int k = 0; k < 3; k++) {
            const cJSON *d = cJSON_GetArrayItem(v, k);
            if (!cJSON_IsNumber(d) || d->valuedouble < 1 || d->valuedouble > 65536 ||
                d->valuedouble != (double)(int)d->valuedouble)
                return bad(err, errlen, s->origin, "shape", "three whole numbers from 1 to 65536");
            s->opts.shape[k] = (size_t)d->valuedouble;
        }
    }
    if ((rc = tabular_keys(j, s, err, errlen)) != PS_OK) return rc;
    size_t ch = 0;
    if ((rc = get_size(j, "channels", 3, &ch, s->origin, err, errlen)) != PS_OK) return rc;
    if (ch == 2) return bad(err, errlen, s->origin, "channels", "0, 1 or 3");
    s->opts.channels = (int)ch;
    if ((rc = get_size(j, "max_pixels", (size_t)1 << 40, &s->opts.max_pixels, s->origin, err,
                       errlen)) != PS_OK ||
        (rc = get_size(j, "max_record_bytes", (size_t)1 << 40, &s->opts.max_record, s->origin,
                       err, errlen)) != PS_OK)
        return rc;
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "shuffle_buffer"))) {
        if ((rc = get_size(j, "shuffle_buffer", (size_t)1 << 40, &s->shuffle_buffer, s->origin,
                           err, errlen)) != PS_OK)
            return rc;
        if (s->shuffle_buffer == 0)
            return bad(err, errlen, s->origin, "shuffle_buffer", "at least 1 (1: no shuffling)");
        s->has_shuffle_buffer = true;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "jpeg_dct"))) {
        if (!cJSON_IsString(v) ||
            (strcmp(v->valuestring, "fast") && strcmp(v->valuestring, "accurate")))
            return bad(err, errlen, s->origin, "jpeg_dct", "\"fast\" or \"accurate\"");
        s->opts.image_flags = strcmp(v->valuestring, "accurate") == 0 ? PS_IMAGE_DCT_ACCURATE : 0;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "on_error"))) {
        if (!cJSON_IsString(v) || (strcmp(v->valuestring, "fail") && strcmp(v->valuestring, "skip")))
            return bad(err, errlen, s->origin, "on_error", "\"fail\" or \"skip\"");
        s->skip_bad = strcmp(v->valuestring, "skip") == 0;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "validation_split"))) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= 1)
            return bad(err, errlen, s->origin, "validation_split", "a fraction from 0 to below 1");
        s->validation_split = v->valuedouble;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "preprocess"))) {
        if (!cJSON_IsArray(v)) return bad(err, errlen, s->origin, "preprocess", "a list");
        if (!(s->preprocess = cJSON_Duplicate(v, 1))) return PS_ENOMEM;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "validation"))) {
        if (s->validation_split > 0) {
            snprintf(err, errlen, "%s: \"validation\" and \"validation_split\" exclude each other",
                     s->origin);
            return PS_EFORMAT;
        }
        if (!(s->validation = calloc(1, sizeof *s->validation))) return PS_ENOMEM;
        snprintf(s->validation->origin, sizeof s->validation->origin, "%.900s (validation)",
                 s->origin);
        if (cJSON_IsString(v)) {
            join(base, v->valuestring, full, sizeof full);
            rc = resolve_path(full, want, s->validation, err, errlen);
            /* the same way of reading as the training data */
            if (rc == PS_OK && s->validation->format == s->format) {
                ps_source_opts *o = &s->validation->opts;
                o->channels = s->opts.channels;
                o->max_pixels = s->opts.max_pixels, o->max_record = s->opts.max_record;
                o->image_flags = s->opts.image_flags;
                memcpy(o->shape, s->opts.shape, sizeof o->shape);
                o->image_key = dup_or_null(s->opts.image_key);
                o->label_key = dup_or_null(s->opts.label_key);
                o->label_column = dup_or_null(s->opts.label_column);
                o->columns = dup_names(s->opts.columns, s->opts.n_columns);
                o->n_columns = o->columns ? s->opts.n_columns : 0;
                o->id_columns = dup_names(s->opts.id_columns, s->opts.n_id_columns);
                o->n_id_columns = o->id_columns ? s->opts.n_id_columns : 0;
                o->hash_ids = s->opts.hash_ids, o->float_label = s->opts.float_label;
                o->delimiter = s->opts.delimiter;
                if ((s->opts.columns && !o->columns) || (s->opts.id_columns && !o->id_columns))
                    return PS_ENOMEM;
                if (s->format == PS_DATA_NPZ) {
                    s->validation->x = dup_or_null(s->x);
                    s->validation->y = dup_or_null(s->y);
                }
            }
        } else {
            rc = parse_spec(v, base, s->validation, err, errlen);
        }
        if (rc != PS_OK) return rc;
        if (s->validation->validation || s->validation->validation_split > 0) {
            snprintf(err, errlen, "%s: a validation set has no validation of its own", s->origin);
            return PS_EFORMAT;
        }
        if (!s->validation->preprocess && s->preprocess &&
            !(s->validation->preprocess = cJSON_Duplicate(s->preprocess, 1)))
            return PS_ENOMEM;
    }
    return PS_OK;
}

/* Reads a spec file (at most 1 MiB). */
static int read_spec(const char *path, ps_data_spec *s, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "--data %s: %s", path, strerror(errno));
        return PS_EIO;
    }
    char *buf = malloc((1 << 20) + 1);
    size_t n = buf ? fread(buf, 1, 1 << 20, f) : 0;
    bool more = buf && fgetc(f) != EOF;
    fclose(f);
    if (!buf) return PS_ENOMEM;
    buf[n] = '\0';
    if (more) {
        free(buf);
        snprintf(err, errlen, "%s: a data spec of more than 1 MiB", path);
        return PS_EFORMAT;
    }
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    if (!j) {
        snprintf(err, errlen, "%s: not valid JSON", path);
        return PS_EFORMAT;
    }
    char base[4096];
    snprintf(base, sizeof base, "%s", path);
    char *slash = strrchr(base, '/');
    if (slash) *slash = '\0';
    else base[0] = '\0';
    s->from_spec = true;
    int rc = parse_spec(j, base, s, err, errlen);
    cJSON_Delete(j);
    return rc;
}

int ps_data_spec_resolve(const char *arg, ps_data_spec *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    snprintf(out->origin, sizeof out->origin, "%s", arg);
    int rc = ends_with(arg, ".json") ? read_spec(arg, out, err, errlen)
                                     : resolve_path(arg, -1, out, err, errlen);
    if (rc != PS_OK) ps_data_spec_free(out);
    return rc;
}

int ps_data_spec_open(const ps_data_spec *s, ps_source **out, char *err, size_t errlen) {
    *out = NULL;
    switch (s->format) {
    case PS_DATA_FOLDER:
        return ps_source_folder(s->paths[0], &s->opts, out, err, errlen);
    case PS_DATA_TFRECORD:
        return ps_source_tfrecord((const char *const *)s->paths, s->n_paths, &s->opts, out, err,
                                  errlen);
    case PS_DATA_CSV:
        return ps_source_csv((const char *const *)s->paths, s->n_paths, &s->opts, out, err,
                             errlen);
    case PS_DATA_NPY:
        return ps_source_npy(s->x, s->y, &s->opts, out, err, errlen);
    case PS_DATA_NPZ:
        return ps_source_npz(s->paths[0], s->x ? s->x : "x", s->y ? s->y : "y", &s->opts, out,
                             err, errlen);
    default:
        snprintf(err, errlen, "%s: %s data is not read through a streaming source", s->origin,
                 ps_data_format_name(s->format));
        return PS_EINVAL;
    }
}
