/* --export FILE.safetensors (see export.h): the weights in PyTorch's names and
 * layouts (export_torch.c) as a safetensors file, and FILE.model.json beside
 * it: the graph, each layer with the torch names of its tensors, so the
 * weights can be loaded into a module of the same architecture.
 * docs/FORMATS.md, "safetensors export", is the contract. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "export.h"
#include "export_torch.h"
#include "layer_export.h"
#include "model_impl.h"
#include "ps_error.h"

#define PS_EXPORT_ST_VERSION "1"

static const char *layout_note =
    "PyTorch layouts: images NCHW; Dense weight (out, in), its in axis in the order "
    "torch.flatten gives an NCHW tensor; Conv2d weight (out, in, kh, kw); the model "
    "computes NHWC (see the model JSON)";

/* ---- the model JSON -------------------------------------------------------- */

cJSON *ps_describe_sizes(const size_t *v, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
    return a;
}

static cJSON *shape_of(ps_shape s) {
    size_t v[3] = {s.h, s.w, s.c};
    return ps_describe_sizes(v, 3);
}

const char *ps_describe_act_name(int act) {
    switch (act) {
    case PS_K_ACT_RELU: return "relu";
    case PS_K_ACT_RELU6: return "relu6";
    case PS_K_ACT_SIGMOID: return "sigmoid";
    case PS_K_ACT_TANH: return "tanh";
    case PS_K_ACT_GELU: return "gelu";
    case PS_K_ACT_SWISH: return "swish";
    case PS_K_ACT_HARD_SIGMOID: return "hard_sigmoid";
    case PS_K_ACT_HARD_SWISH: return "hard_swish";
    case PS_ACT_SOFTMAX: return "softmax";
    default: return "linear";
    }
}

static const char *op_name(const ps_op *o) {
    const ps_layer_export *le = ps_layer_export_of(o->kind);
    return le->class_of ? le->class_of(o) : le->class_name;
}

/* TensorFlow's "same": the odd cell after (as kernels/conv.c). */
static void pads_of(size_t in, size_t k, size_t s, bool same, size_t *before, size_t *after) {
    *before = *after = 0;
    if (!same) return;
    size_t out = (in - 1) / s + 1, need = (out - 1) * s + k;
    size_t total = need > in ? need - in : 0;
    *before = total / 2;
    *after = total - *before;
}

void ps_describe_window(cJSON *j, const ps_op *o, const char *key) {
    size_t k[2] = {o->kh, o->kw}, s[2] = {o->sh, o->sw}, p[4];
    pads_of(o->in.h, o->kh, o->sh, o->same, &p[0], &p[1]);
    pads_of(o->in.w, o->kw, o->sw, o->same, &p[2], &p[3]);
    cJSON_AddItemToObject(j, key, ps_describe_sizes(k, 2));
    cJSON_AddItemToObject(j, "strides", ps_describe_sizes(s, 2));
    cJSON_AddStringToObject(j, "padding", o->same ? "same" : "valid");
    cJSON_AddItemToObject(j, "pads", ps_describe_sizes(p, 4)); /* top, bottom, left, right */
}

static cJSON *op_json(const ps_model *m, size_t j, const ps_torch_tensor *t, size_t nt) {
    const ps_op *o = &m->ops[j];
    cJSON *e = cJSON_CreateObject(), *in = cJSON_CreateArray();
    if (!e || !in) {
        cJSON_Delete(e);
        cJSON_Delete(in);
        return NULL;
    }
    cJSON_AddStringToObject(e, "op", op_name(o));
    if (o->prefix[0]) cJSON_AddStringToObject(e, "layer", o->prefix);
    for (size_t i = 0; i < o->nin; i++)
        cJSON_AddItemToArray(in, cJSON_CreateNumber((double)o->in_t[i]));
    cJSON_AddItemToObject(e, "inputs", in);
    cJSON_AddNumberToObject(e, "output", (double)(j + 1));
    cJSON_AddItemToObject(e, "in_shape", shape_of(o->in));
    cJSON_AddItemToObject(e, "out_shape", shape_of(o->out));
    cJSON_AddBoolToObject(e, "image", o->image);
    const ps_layer_export *le = ps_layer_export_of(o->kind);
    if (le->describe) le->describe(e, m, j, o);
    char module[64];
    ps_torch_module_name(m, j, module, sizeof module);
    if (module[0]) {
        cJSON_AddStringToObject(e, "module", module);
        cJSON *params = cJSON_AddObjectToObject(e, "params");
        for (size_t i = 0; params && i < nt; i++) {
            if (t[i].op != j) continue;
            cJSON *p = cJSON_CreateObject();
            if (!p) break;
            cJSON_AddStringToObject(p, "name", t[i].name);
            if (t[i].project) cJSON_AddStringToObject(p, "project", t[i].project);
            cJSON_AddItemToObject(p, "shape", ps_describe_sizes(t[i].shape, (size_t)t[i].rank));
            cJSON_AddStringToObject(p, "layout", t[i].layout);
            cJSON_AddItemToObject(params, strchr(t[i].name, '.') + 1, p);
        }
    }
    return e;
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static cJSON *model_json(const ps_model *m, const char *st_path, const ps_torch_tensor *t,
                         size_t nt) {
    cJSON *r = cJSON_CreateObject();
    if (!r) return NULL;
    cJSON_AddStringToObject(r, "format", "ps-model-export");
    cJSON_AddNumberToObject(r, "version", 1);
    cJSON_AddStringToObject(r, "name", m->name);
    cJSON_AddStringToObject(r, "weights", base_name(st_path));
    cJSON_AddStringToObject(r, "layout", layout_note);
    cJSON_AddStringToObject(r, "tensors", "tensor 0 is the input, tensor j + 1 the output of op j");
    cJSON_AddItemToObject(r, "input_shape", shape_of(m->input));
    cJSON_AddBoolToObject(r, "input_image", m->input_image);
    cJSON_AddStringToObject(r, "loss", m->loss == LOSS_SPARSE_CE ? "sparse_categorical_crossentropy"
                                       : m->loss == LOSS_BCE     ? "binary_crossentropy"
                                                                 : "mse");
    if (m->loss != LOSS_MSE) cJSON_AddBoolToObject(r, "from_logits", m->from_logits);
    cJSON *ops = cJSON_AddArrayToObject(r, "ops");
    for (size_t j = 0; ops && j < m->nops; j++) {
        cJSON *e = op_json(m, j, t, nt);
        if (!e) break;
        cJSON_AddItemToArray(ops, e);
    }
    return r;
}

/* ---- the safetensors header -------------------------------------------------- */

static cJSON *st_header(const ps_model *m, const char *json_path, const ps_torch_tensor *t,
                        const size_t *order, size_t nt, uint64_t *data_len) {
    cJSON *h = cJSON_CreateObject(), *meta = cJSON_CreateObject();
    if (!h || !meta) {
        cJSON_Delete(h);
        cJSON_Delete(meta);
        return NULL;
    }
    uint64_t off = 0;
    for (size_t k = 0; k < nt; k++) {
        const ps_torch_tensor *e = &t[order[k]];
        uint64_t len = e->i64 ? 8 : (uint64_t)e->numel * 4;
        uint64_t span[2] = {off, off + len};
        cJSON *d = cJSON_CreateObject();
        if (!d) break;
        cJSON_AddStringToObject(d, "dtype", e->i64 ? "I64" : "F32");
        cJSON_AddItemToObject(d, "shape", ps_describe_sizes(e->shape, (size_t)e->rank));
        cJSON *o = cJSON_CreateArray();
        for (int i = 0; o && i < 2; i++)
            cJSON_AddItemToArray(o, cJSON_CreateNumber((double)span[i]));
        cJSON_AddItemToObject(d, "data_offsets", o);
        cJSON_AddItemToObject(h, e->name, d);
        off += len;
    }
    *data_len = off;
    cJSON_AddStringToObject(meta, "format", "pt");
    cJSON_AddStringToObject(meta, "ps_export", PS_EXPORT_ST_VERSION);
    cJSON_AddStringToObject(meta, "model", m->name);
    cJSON_AddStringToObject(meta, "model_json", base_name(json_path));
    cJSON_AddStringToObject(meta, "layout", layout_note);
    for (size_t i = 0; i < nt; i++) {
        char key[128];
        snprintf(key, sizeof key, "ps_name.%s", t[i].name);
        if (t[i].project) cJSON_AddStringToObject(meta, key, t[i].project);
    }
    cJSON_AddItemToObject(h, "__metadata__", meta);
    return h;
}

/* ---- the files ----------------------------------------------------------------- */

static int write_all(FILE *f, const void *p, size_t n) {
    return fwrite(p, 1, n, f) == n ? 0 : -1;
}

static void put_u64(unsigned char *b, uint64_t v) {
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}

/* Closes f after flushing it to disk; -1 (errno set) on any failure. */
static int close_synced(FILE *f) {
    int rc = fflush(f) == 0 && fsync(fileno(f)) == 0 ? 0 : -1;
    int e = errno;
    if (fclose(f) != 0 && rc == 0) return -1;
    errno = e;
    return rc;
}

static int write_st(const char *tmp, const char *hdr, size_t hlen, const ps_torch_tensor *t,
                    const size_t *order, size_t nt) {
    FILE *f = fopen(tmp, "wb");
    if (!f) return -1;
    size_t padded = (hlen + 7) / 8 * 8;
    unsigned char len8[8];
    put_u64(len8, padded);
    int rc = write_all(f, len8, 8) || write_all(f, hdr, hlen);
    for (size_t i = hlen; rc == 0 && i < padded; i++)
        rc = fputc(' ', f) == EOF ? -1 : 0;
    for (size_t k = 0; rc == 0 && k < nt; k++) {
        const ps_torch_tensor *e = &t[order[k]];
        unsigned char b[8];
        if (e->i64) {
            put_u64(b, (uint64_t)e->i64v);
            rc = write_all(f, b, 8);
            continue;
        }
        for (size_t i = 0; rc == 0 && i < e->numel; i++) {
            uint32_t u;
            memcpy(&u, &e->f32[i], 4);
            for (int q = 0; q < 4; q++)
                b[q] = (unsigned char)(u >> (8 * q));
            rc = write_all(f, b, 4);
        }
    }
    int e = errno;
    if (rc != 0) {
        fclose(f);
        errno = e;
        return -1;
    }
    return close_synced(f);
}

static int write_text(const char *tmp, const char *text) {
    FILE *f = fopen(tmp, "wb");
    if (!f) return -1;
    if (write_all(f, text, strlen(text)) || fputc('\n', f) == EOF) {
        int e = errno;
        fclose(f);
        errno = e;
        return -1;
    }
    return close_synced(f);
}

/* The directory of path fsynced, so the renames last (best effort). */
static void sync_dir(const char *path) {
    char dir[4096];
    const char *s = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", s ? (int)(s - path) + (s == path) : 1, s ? path : ".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

int ps_export_safetensors(const ps_model *m, const char *path, char *err, size_t errlen) {
    if (ps_export_check_layers(m, path, err, errlen) != PS_OK) return PS_EINVAL;
    char json_path[4096], tmp_st[4200], tmp_json[4200], why[300];
    size_t plen = strlen(path), ext = strlen(".safetensors");
    if (plen + 16 > sizeof json_path) {
        snprintf(err, errlen, "--export: the path is too long");
        return PS_EINVAL;
    }
    snprintf(json_path, sizeof json_path, "%.*s.model.json", (int)(plen - ext), path);
    snprintf(tmp_st, sizeof tmp_st, "%s.tmp.%ld", path, (long)getpid());
    snprintf(tmp_json, sizeof tmp_json, "%s.tmp.%ld", json_path, (long)getpid());

    ps_torch_tensor *t = NULL;
    size_t nt = 0;
    int rc = ps_torch_tensors(m, &t, &nt, why, sizeof why);
    if (rc != PS_OK) {
        snprintf(err, errlen, "--export %s: %s", path, why);
        return rc;
    }
    /* the I64 scalars first, so every tensor starts aligned to its element size */
    size_t *order = malloc((nt ? nt : 1) * sizeof *order), k = 0;
    for (size_t pass = 0; order && pass < 2; pass++)
        for (size_t i = 0; i < nt; i++)
            if (t[i].i64 == (pass == 0)) order[k++] = i;
    uint64_t data_len = 0;
    cJSON *hj = order ? st_header(m, json_path, t, order, nt, &data_len) : NULL;
    cJSON *mj = hj ? model_json(m, path, t, nt) : NULL;
    char *hdr = hj ? cJSON_PrintUnformatted(hj) : NULL;
    char *mtext = mj ? cJSON_Print(mj) : NULL;
    if (!mtext) {
        snprintf(err, errlen, "--export %s: out of memory", path);
        rc = PS_ENOMEM;
    }
    const char *failed = NULL;
    if (rc == PS_OK && write_st(tmp_st, hdr, strlen(hdr), t, order, nt) != 0) failed = path;
    if (rc == PS_OK && !failed && write_text(tmp_json, mtext) != 0) failed = json_path;
    if (rc == PS_OK && !failed && rename(tmp_json, json_path) != 0) failed = json_path;
    if (rc == PS_OK && !failed && rename(tmp_st, path) != 0) {
        int e = errno;
        unlink(json_path); /* both or neither */
        errno = e;
        failed = path;
    }
    if (failed) {
        snprintf(err, errlen, "--export %s: cannot write %s: %s", path, failed, strerror(errno));
        rc = PS_EIO;
    }
    if (rc != PS_OK) {
        unlink(tmp_st);
        unlink(tmp_json);
    } else {
        sync_dir(path);
    }
    free(hdr);
    free(mtext);
    cJSON_Delete(hj);
    cJSON_Delete(mj);
    free(order);
    ps_torch_tensors_free(t, nt);
    return rc;
}
