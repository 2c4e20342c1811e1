/* Keras 3's weights in HDF5 (see keras_h5.h): read into a model by layer name
 * and order with every shape checked, and written as Keras 3 writes them. */
#include "keras_h5.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layer_export.h"
#include "model_impl.h"
#include "ps_error.h"

#define MAX_LINKS 100000  /* entries of one group we look at */
#define MAX_DEPTH 8       /* nested models */
#define MAX_GROUPS 100000 /* layer groups visited in all (hard links may make loops) */

void ps__keras_h5_quiet(void) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

bool ps__keras_var_int_scalar(const ps_model *m, size_t i) {
    for (size_t j = 0; j < m->nops; j++) {
        const ps_layer_export *le = ps_layer_export_of(m->ops[j].kind);
        if (le->keras_int_scalar && le->keras_int_scalar(&m->ops[j], i)) return true;
    }
    return false;
}

int ps__keras_var_dims(const ps_model *m, size_t i, hsize_t d[4]) {
    if (ps__keras_var_int_scalar(m, i)) return 0;
    for (size_t j = 0; j < m->nops; j++) {
        const ps_op *o = &m->ops[j];
        const ps_layer_export *le = ps_layer_export_of(o->kind);
        size_t k[4];
        int rank = le->keras_dims ? le->keras_dims(o, i, k) : 0;
        if (rank > 0) {
            for (int x = 0; x < rank; x++)
                d[x] = k[x];
            return rank;
        }
    }
    const ps_model_var *v = &m->vars[i];
    d[0] = v->shape[0];
    d[1] = v->shape[1];
    return v->rank;
}

static void dims_text(char *s, size_t n, const hsize_t *d, int rank) {
    size_t k = (size_t)snprintf(s, n, "[");
    for (int i = 0; i < rank && k < n; i++)
        k += (size_t)snprintf(s + k, n - k, "%s%llu", i ? ", " : "", (unsigned long long)d[i]);
    if (k < n) snprintf(s + k, n - k, "]");
}

/* The part of a variable's name before its last '/': its layer. */
static bool var_in_layer(const ps_model_var *v, const char *layer) {
    const char *slash = strrchr(v->name, '/');
    size_t n = slash ? (size_t)(slash - v->name) : strlen(v->name);
    return strlen(layer) == n && strncmp(v->name, layer, n) == 0;
}

/* The k-th variable of layer `layer` in m's order (PS_NO_VAR: none); *count
 * gets how many the layer has. */
static size_t layer_var(const ps_model *m, const char *layer, size_t k, size_t *count) {
    size_t found = PS_NO_VAR, c = 0;
    for (size_t i = 0; i < m->nvars; i++) {
        if (!var_in_layer(&m->vars[i], layer)) continue;
        if (c == k) found = i;
        c++;
    }
    *count = c;
    return found;
}

typedef struct {
    ps_model *m;
    const char *file;
    char *err;
    size_t errlen;
    bool *seen;    /* per variable */
    size_t groups; /* layer groups visited */
} reader;

static int fail(reader *r, const char *path, const char *fmt, const char *a, const char *b) {
    char why[600];
    snprintf(why, sizeof why, fmt, a, b);
    snprintf(r->err, r->errlen, "%s: %s: %s", r->file, path, why);
    return PS_EFORMAT;
}

/* a/b into out; false (out cut short) when it does not fit. */
__attribute__((noinline)) static bool join(char *out, size_t n, const char *a, const char *b) {
    int k = snprintf(out, n, "%s%s%s", a, a[0] ? "/" : "", b);
    return k >= 0 && (size_t)k < n;
}

/* Child `name` of g is a hard link to an object of type want (1: exists, 0:
 * absent, -1: something else, e.g. a soft or external link). */
static int child_is(hid_t g, const char *name, H5O_type_t want) {
    htri_t ex = H5Lexists(g, name, H5P_DEFAULT);
    if (ex <= 0) return ex < 0 ? -1 : 0;
    H5L_info_t li;
    if (H5Lget_info(g, name, &li, H5P_DEFAULT) < 0 || li.type != H5L_TYPE_HARD) return -1;
    H5O_info_t oi;
    if (H5Oget_info_by_name(g, name, &oi, H5P_DEFAULT) < 0 || oi.type != want) return -1;
    return 1;
}

/* The scalar string attribute "name" of o into out (false: none or not a string). */
static bool attr_name(hid_t o, char *out, size_t n) {
    if (H5Aexists(o, "name") <= 0) return false;
    hid_t a = H5Aopen(o, "name", H5P_DEFAULT);
    if (a < 0) return false;
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    bool ok =
        t >= 0 && sp >= 0 && H5Tget_class(t) == H5T_STRING && H5Sget_simple_extent_npoints(sp) == 1;
    if (ok && H5Tis_variable_str(t) > 0) {
        hid_t mt = H5Tcopy(H5T_C_S1);
        char *s = NULL;
        ok = mt >= 0 && H5Tset_size(mt, H5T_VARIABLE) >= 0 &&
             H5Tset_cset(mt, H5Tget_cset(t)) >= 0 && H5Aread(a, mt, &s) >= 0 && s && strlen(s) < n;
        if (ok) snprintf(out, n, "%s", s);
        if (s) H5free_memory(s);
        if (mt >= 0) H5Tclose(mt);
    } else if (ok) {
        size_t sz = H5Tget_size(t);
        char *s = sz > 0 && sz < n ? calloc(1, sz + 1) : NULL;
        ok = s && H5Aread(a, t, s) >= 0;
        if (ok) snprintf(out, n, "%s", s);
        free(s);
    }
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    return ok;
}

/* Dataset `key` of a vars group (at path) into variable `k` of `layer`. */
static int read_one(reader *r, hid_t vars, const char *path, const char *key, const char *layer,
                    size_t k) {
    char where[1100], why[256], want[96], got[96];
    join(where, sizeof where, path, key);
    size_t count;
    size_t i = layer_var(r->m, layer, k, &count);
    if (i == PS_NO_VAR) {
        if (!count)
            return fail(r, where, "a weight of layer '%s', which the model does not have%s", layer,
                        "");
        (void)snprintf(why, sizeof why, "%zu", count);
        return fail(r, where, "an extra weight: the model's layer '%s' has %s", layer, why);
    }
    const ps_model_var *v = &r->m->vars[i];
    if (r->seen[i]) return fail(r, where, "a second value for the model's %s%s", v->name, "");
    if (child_is(vars, key, H5O_TYPE_DATASET) != 1)
        return fail(r, where, "not a dataset (the model's %s)%s", v->name, "");
    hid_t d = H5Dopen2(vars, key, H5P_DEFAULT);
    if (d < 0) return fail(r, where, "cannot be opened (the model's %s)%s", v->name, "");
    /* raw data kept in another file (external storage, a virtual dataset) is not read */
    hid_t dcpl = H5Dget_create_plist(d);
    bool outside =
        dcpl < 0 || H5Pget_external_count(dcpl) != 0 || H5Pget_layout(dcpl) == H5D_VIRTUAL;
    if (dcpl >= 0) H5Pclose(dcpl);
    if (outside) {
        H5Dclose(d);
        return fail(r, where, "its data is stored outside the file (the model's %s)%s", v->name,
                    "");
    }
    hid_t t = H5Dget_type(d), sp = H5Dget_space(d);
    hsize_t dims[H5S_MAX_RANK], wd[4];
    int rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    int wrank = ps__keras_var_dims(r->m, i, wd);
    int rc = PS_OK;
    bool int_ok = ps__keras_var_int_scalar(r->m, i); /* Normalization's count: int64, int32 */
    H5T_class_t tc = t < 0 ? H5T_NO_CLASS : H5Tget_class(t);
    if (tc != H5T_FLOAT && !(int_ok && tc == H5T_INTEGER)) {
        rc = fail(r, where, "not %s (the model's %s)", int_ok ? "a number" : "floating point",
                  v->name);
    } else if (rank < 0 || rank > 4 || H5Sget_simple_extent_dims(sp, dims, NULL) < 0) {
        rc = fail(r, where, "a dataspace of rank %s (the model's %s)",
                  rank < 0 ? "?" : (snprintf(why, sizeof why, "%d", rank), why), v->name);
    } else {
        bool same = rank == wrank;
        for (int x = 0; same && x < rank; x++)
            same = dims[x] == wd[x];
        if (!same) {
            dims_text(got, sizeof got, dims, rank);
            dims_text(want, sizeof want, wd, wrank);
            snprintf(why, sizeof why, "%s is %s", v->name, want);
            rc = fail(r, where, "shape %s, the model's %s", got, why);
        } else if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                           ps_model_params(r->m) + v->offset) < 0) {
            rc = fail(r, where, "cannot be read (the model's %s): the file is damaged%s", v->name,
                      "");
        }
    }
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    H5Dclose(d);
    if (rc == PS_OK) r->seen[i] = true;
    return rc;
}

/* A layer's vars group: vars/0 .. vars/N-1, all of them. */
static int read_vars(reader *r, hid_t g, const char *path, const char *group) {
    char vpath[1024], layer[256], key[32];
    join(vpath, sizeof vpath, path, "vars");
    hid_t vars = H5Gopen2(g, "vars", H5P_DEFAULT);
    if (vars < 0) return fail(r, vpath, "cannot be opened%s%s", "", "");
    if (!attr_name(vars, layer, sizeof layer) && !join(layer, sizeof layer, "", group))
        layer[0] = 0;
    H5G_info_t gi;
    int rc = PS_OK;
    if (H5Gget_info(vars, &gi) < 0 || gi.nlinks > MAX_LINKS)
        rc = fail(r, vpath, "cannot be listed, or too many entries%s%s", "", "");
    for (hsize_t k = 0; rc == PS_OK && k < gi.nlinks; k++) {
        snprintf(key, sizeof key, "%llu", (unsigned long long)k);
        if (H5Lexists(vars, key, H5P_DEFAULT) <= 0) {
            char where[1100];
            join(where, sizeof where, vpath, key);
            rc = fail(r, where, "missing (the entries are not numbered 0..%s)%s",
                      (snprintf(key, sizeof key, "%llu", (unsigned long long)gi.nlinks - 1), key),
                      "");
        } else {
            rc = read_one(r, vars, vpath, key, layer, (size_t)k);
        }
    }
    H5Gclose(vars);
    return rc;
}

/* Every layer group under `layers` of g (path: its path in the file). */
static int read_layers(reader *r, hid_t g, const char *path, int depth) {
    if (depth > MAX_DEPTH) return fail(r, path, "models nested too deep%s%s", "", "");
    hid_t ls = H5Gopen2(g, "layers", H5P_DEFAULT);
    char lpath[1024];
    join(lpath, sizeof lpath, path, "layers");
    if (ls < 0) return fail(r, lpath, "cannot be opened%s%s", "", "");
    H5G_info_t gi;
    int rc = PS_OK;
    if (H5Gget_info(ls, &gi) < 0 || gi.nlinks > MAX_LINKS)
        rc = fail(r, lpath, "cannot be listed, or too many entries%s%s", "", "");
    for (hsize_t k = 0; rc == PS_OK && k < gi.nlinks; k++) {
        char name[256], cpath[1024];
        ssize_t nl = H5Lget_name_by_idx(ls, ".", H5_INDEX_NAME, H5_ITER_INC, k, name, sizeof name,
                                        H5P_DEFAULT);
        if (nl < 0 || (size_t)nl >= sizeof name) {
            rc = fail(r, lpath, "an entry whose name cannot be read%s%s", "", "");
            break;
        }
        join(cpath, sizeof cpath, lpath, name);
        if (++r->groups > MAX_GROUPS) {
            rc = fail(r, cpath, "more than 100000 layer groups (a loop of links?)%s%s", "", "");
            break;
        }
        if (child_is(ls, name, H5O_TYPE_GROUP) != 1) {
            rc = fail(r, cpath, "not a group%s%s", "", "");
            break;
        }
        hid_t c = H5Gopen2(ls, name, H5P_DEFAULT);
        if (c < 0) {
            rc = fail(r, cpath, "cannot be opened%s%s", "", "");
            break;
        }
        int v = child_is(c, "vars", H5O_TYPE_GROUP), l = child_is(c, "layers", H5O_TYPE_GROUP);
        if (v < 0 || l < 0)
            rc = fail(r, cpath, "its %s is not a group", v < 0 ? "vars" : "layers", "");
        if (rc == PS_OK && v == 1) rc = read_vars(r, c, cpath, name);
        if (rc == PS_OK && l == 1) rc = read_layers(r, c, cpath, depth + 1);
        H5Gclose(c);
    }
    H5Gclose(ls);
    return rc;
}

int ps__keras_h5_read(ps_model *m, hid_t f, const char *file, char *err, size_t errlen) {
    reader r = {.m = m, .file = file, .err = err, .errlen = errlen};
    r.seen = calloc(m->nvars ? m->nvars : 1, sizeof *r.seen);
    if (!r.seen) {
        snprintf(err, errlen, "%s: out of memory", file);
        return PS_ENOMEM;
    }
    int has = child_is(f, "layers", H5O_TYPE_GROUP);
    int rc = has == 1 ? read_layers(&r, f, "", 0)
                      : fail(&r, "layers", "%s: not a Keras 3 weights file%s",
                             has ? "not a group" : "missing", "");
    for (size_t i = 0; rc == PS_OK && i < m->nvars; i++) {
        if (r.seen[i]) continue;
        const char *slash = strrchr(m->vars[i].name, '/');
        char layer[64];
        snprintf(layer, sizeof layer, "%.*s", slash ? (int)(slash - m->vars[i].name) : 63,
                 m->vars[i].name);
        snprintf(err, errlen,
                 "%s: missing weight: the model's %s (no layers/*/vars named '%s' "
                 "holds it)",
                 file, m->vars[i].name, layer);
        rc = PS_EFORMAT;
    }
    free(r.seen);
    return rc;
}

/* ---- writing ---------------------------------------------------------------- */

static bool write_name(hid_t o, const char *name) {
    hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR), a = -1;
    bool ok = t >= 0 && sp >= 0 && H5Tset_size(t, H5T_VARIABLE) >= 0 &&
              H5Tset_cset(t, H5T_CSET_UTF8) >= 0 &&
              (a = H5Acreate2(o, "name", t, sp, H5P_DEFAULT, H5P_DEFAULT)) >= 0 &&
              H5Awrite(a, t, &name) >= 0;
    if (a >= 0) H5Aclose(a);
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    return ok;
}

/* An integer scalar (Normalization's count, a float in the model) as the int64
 * Keras' TensorFlow and PyTorch backends write. */
static bool write_int_scalar(hid_t ds, float v) {
    int64_t n = isfinite(v) && v > 0 ? (int64_t)llroundf(v) : 0;
    return H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &n) >= 0;
}

/* Variable i as dataset `key` of vars (Keras' shape d, rank). */
static bool write_var(const ps_model *m, hid_t vars, const char *key, size_t i, int rank,
                      const hsize_t *d) {
    bool is_int = ps__keras_var_int_scalar(m, i);
    const float *p = m->params + m->vars[i].offset;
    hid_t sp = rank ? H5Screate_simple(rank, d, NULL) : H5Screate(H5S_SCALAR);
    hid_t ds = sp >= 0 ? H5Dcreate2(vars, key, is_int ? H5T_STD_I64LE : H5T_IEEE_F32LE, sp,
                                    H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)
                       : -1;
    bool ok = ds >= 0 && (is_int ? write_int_scalar(ds, *p)
                                 : H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                                            p) >= 0);
    if (ds >= 0) H5Dclose(ds);
    if (sp >= 0) H5Sclose(sp);
    return ok;
}

static int write_layer(const ps_model *m, hid_t ls, const ps_keras_layer *l) {
    hid_t g = H5Gcreate2(ls, l->group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t v = g >= 0 ? H5Gcreate2(g, "vars", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
    bool ok = v >= 0 && write_name(v, l->name);
    size_t count = 1;
    for (size_t k = 0; ok && k < count; k++) {
        size_t i = layer_var(m, l->name, k, &count);
        if (i == PS_NO_VAR) break;
        hsize_t d[4];
        int rank = ps__keras_var_dims(m, i, d);
        char key[32];
        snprintf(key, sizeof key, "%zu", k);
        ok = write_var(m, v, key, i, rank, d);
    }
    if (v >= 0) H5Gclose(v);
    if (g >= 0) H5Gclose(g);
    return ok ? PS_OK : PS_EIO;
}

int ps__keras_h5_write(const ps_model *m, const ps_keras_layer *ls, size_t n, hid_t f,
                       const char *file, char *err, size_t errlen) {
    hid_t g = H5Gcreate2(f, "layers", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = g >= 0 ? PS_OK : PS_EIO;
    for (size_t i = 0; rc == PS_OK && i < n; i++) {
        rc = write_layer(m, g, &ls[i]);
        if (rc != PS_OK)
            snprintf(err, errlen, "%s: layers/%s: cannot be written", file, ls[i].group);
    }
    if (g >= 0) H5Gclose(g);
    if (rc == PS_OK) {
        hid_t v = H5Gcreate2(f, "vars", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (v < 0 || !write_name(v, m->name)) rc = PS_EIO;
        if (v >= 0) H5Gclose(v);
        if (rc != PS_OK) snprintf(err, errlen, "%s: vars: cannot be written", file);
    } else if (!err[0]) {
        snprintf(err, errlen, "%s: layers: cannot be written", file);
    }
    return rc;
}
