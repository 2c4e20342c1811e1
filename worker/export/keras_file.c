/* Keras 3's .keras archives and .weights.h5 files read into a model (see
 * keras_file.h): the archive's member names and sizes are checked before
 * anything is extracted, model.weights.h5 is opened from memory (HDF5's core
 * driver), config.json becomes a {"keras": ..., "loss": ..., "optimizer": ...}
 * wrapper for ps_model_from_json. */
#include "keras_file.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "keras_h5.h"
#include "model_impl.h" /* ps_model_read_file */
#include "ps_error.h"

#define MAX_MEMBERS 64

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && strcmp(s + n - k, suffix) == 0;
}

ps_keras_kind ps_keras_kind_of(const char *path) {
    if (ends_with(path, ".keras")) return PS_KERAS_ARCHIVE;
    if (ends_with(path, ".weights.h5")) return PS_KERAS_WEIGHTS;
    return PS_KERAS_NONE;
}

/* A member name that would land outside a directory it is extracted into. */
static bool escapes(const char *name) {
    if (!name[0] || name[0] == '/' || name[0] == '\\' || strchr(name, '\\') ||
        (isalpha((unsigned char)name[0]) && name[1] == ':'))
        return true;
    for (const char *p = name; *p;) {
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.') return true;
        p += n;
        if (*p) p++;
    }
    return false;
}

/* Opens the archive and checks every member's name. */
static int archive_open(const char *path, zip_t **out, char *err, size_t errlen) {
    int ze = 0;
    zip_t *z = zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
    if (!z) {
        zip_error_t e;
        zip_error_init_with_code(&e, ze);
        snprintf(err, errlen, "%s: not a readable zip archive: %s", path, zip_error_strerror(&e));
        int rc = ze == ZIP_ER_OPEN || ze == ZIP_ER_NOENT || ze == ZIP_ER_READ ? PS_EIO : PS_EFORMAT;
        zip_error_fini(&e);
        return rc;
    }
    zip_int64_t n = zip_get_num_entries(z, 0);
    if (n < 0 || n > MAX_MEMBERS) {
        snprintf(err, errlen, "%s: %lld members (a .keras archive holds 3; at most %d taken)", path,
                 (long long)n, MAX_MEMBERS);
        zip_discard(z);
        return PS_EFORMAT;
    }
    for (zip_int64_t i = 0; i < n; i++) {
        const char *name = zip_get_name(z, (zip_uint64_t)i, ZIP_FL_ENC_RAW);
        if (!name || escapes(name)) {
            snprintf(err, errlen, "%s: member '%s' escapes the archive (an absolute path or ..)",
                     path, name ? name : "?");
            zip_discard(z);
            return PS_EFORMAT;
        }
    }
    *out = z;
    return PS_OK;
}

/* Member `name` into *buf (malloc'd, NUL-ended, *n bytes before the NUL), if
 * its uncompressed size is at most max. */
static int member_read(zip_t *z, const char *path, const char *name, size_t max, char **buf,
                       size_t *n, char *err, size_t errlen) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat(z, name, 0, &st) != 0) {
        snprintf(err, errlen, "%s: no member '%s' (not a Keras 3 .keras archive)", path, name);
        return PS_EFORMAT;
    }
    if (!(st.valid & ZIP_STAT_SIZE) || st.size > max) {
        snprintf(err, errlen,
                 "%s: member '%s' is %llu bytes uncompressed: more than the %zu "
                 "MiB accepted",
                 path, name, (unsigned long long)st.size, max >> 20);
        return PS_EFORMAT;
    }
    char *b = malloc((size_t)st.size + 1);
    zip_file_t *f = b ? zip_fopen(z, name, 0) : NULL;
    if (!f) {
        snprintf(err, errlen, "%s: member '%s': %s", path, name,
                 b ? zip_strerror(z) : "out of memory");
        free(b);
        return b ? PS_EFORMAT : PS_ENOMEM;
    }
    zip_int64_t got = zip_fread(f, b, st.size), more = 0;
    char extra;
    if (got == (zip_int64_t)st.size) more = zip_fread(f, &extra, 1);
    int crc = zip_fclose(f);
    if (got != (zip_int64_t)st.size || more != 0 || crc != 0) {
        snprintf(err, errlen,
                 "%s: member '%s' is damaged (%lld of %llu bytes, or a bad "
                 "checksum)",
                 path, name, (long long)got, (unsigned long long)st.size);
        free(b);
        return PS_EFORMAT;
    }
    b[st.size] = 0;
    *buf = b;
    *n = (size_t)st.size;
    return PS_OK;
}

/* An HDF5 file image in memory, opened read-only. */
static hid_t open_image(const void *buf, size_t n) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) return -1;
    hid_t f = -1;
    if (H5Pset_fapl_core(fapl, 1 << 20, 0) >= 0 && H5Pset_file_image(fapl, (void *)buf, n) >= 0)
        f = H5Fopen("model.weights.h5", H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    return f;
}

int ps_keras_load_weights(ps_model *m, const char *path, char *err, size_t errlen) {
    ps__keras_h5_quiet();
    hid_t f = -1;
    int rc = PS_OK;
    if (ps_keras_kind_of(path) == PS_KERAS_ARCHIVE) {
        zip_t *z = NULL;
        char *buf = NULL;
        size_t n = 0;
        rc = archive_open(path, &z, err, errlen);
        if (rc == PS_OK)
            rc = member_read(z, path, "model.weights.h5", PS_KERAS_MAX_WEIGHTS, &buf, &n, err,
                             errlen);
        if (z) zip_discard(z);
        if (rc == PS_OK && (f = open_image(buf, n)) < 0) {
            snprintf(err, errlen,
                     "%s: member 'model.weights.h5' is not an HDF5 file, or is "
                     "damaged",
                     path);
            rc = PS_EFORMAT;
        }
        free(buf);
    } else {
        FILE *probe = fopen(path, "rb");
        if (!probe) {
            snprintf(err, errlen, "%s: cannot be opened", path);
            return PS_EIO;
        }
        fclose(probe);
        if ((f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0) {
            snprintf(err, errlen, "%s: not an HDF5 file, or damaged", path);
            rc = PS_EFORMAT;
        }
    }
    if (rc == PS_OK) rc = ps__keras_h5_read(m, f, path, err, errlen);
    if (f >= 0) H5Fclose(f);
    return rc;
}

/* ---- config.json ------------------------------------------------------------ */

/* compile_config's loss (a name or a serialized Keras loss) into the wrapper. */
static int add_loss(cJSON *w, const cJSON *loss, const char *path, char *err, size_t errlen) {
    static const char *const classes[][2] = {
        {"SparseCategoricalCrossentropy", "sparse_categorical_crossentropy"},
        {"BinaryCrossentropy", "binary_crossentropy"},
        {"MeanSquaredError", "mse"}};
    if (cJSON_IsString(loss)) {
        const char *s = loss->valuestring;
        cJSON_AddStringToObject(w, "loss", !strcmp(s, "mean_squared_error") ? "mse" : s);
        return PS_OK;
    }
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(loss, "class_name");
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(loss, "config");
    for (size_t i = 0; cJSON_IsString(cls) && i < sizeof classes / sizeof classes[0]; i++) {
        if (strcmp(cls->valuestring, classes[i][0])) continue;
        cJSON_AddStringToObject(w, "loss", classes[i][1]);
        const cJSON *fl = cJSON_GetObjectItemCaseSensitive(cfg, "from_logits");
        if (cJSON_IsBool(fl)) cJSON_AddBoolToObject(w, "from_logits", cJSON_IsTrue(fl));
        return PS_OK;
    }
    snprintf(err, errlen,
             "%s: config.json: compile_config.loss: want a string or one of "
             "SparseCategoricalCrossentropy, BinaryCrossentropy, MeanSquaredError",
             path);
    return PS_EFORMAT;
}

/* compile_config's optimizer ({"class_name": "Adam", "config": {...}}) as the
 * project's optimizer object: the name in lower case, Keras' None left out, the
 * settings the project has none for refused by ps_opt_spec_from_json later. */
static int add_optimizer(cJSON *w, const cJSON *opt, const char *path, char *err, size_t errlen) {
    static const char *const skip[] = {"name",
                                       "use_ema",
                                       "ema_momentum",
                                       "ema_overwrite_frequency",
                                       "loss_scale_factor",
                                       "gradient_accumulation_steps",
                                       "amsgrad",
                                       NULL};
    if (cJSON_IsString(opt)) {
        cJSON_AddStringToObject(w, "optimizer", opt->valuestring);
        return PS_OK;
    }
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(opt, "class_name");
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(opt, "config");
    if (!cJSON_IsString(cls) || strlen(cls->valuestring) >= 32 || !cJSON_IsObject(cfg)) {
        snprintf(err, errlen,
                 "%s: config.json: compile_config.optimizer: want a class_name and "
                 "a config",
                 path);
        return PS_EFORMAT;
    }
    char name[32];
    size_t i = 0;
    for (; cls->valuestring[i]; i++)
        name[i] = (char)tolower((unsigned char)cls->valuestring[i]);
    name[i] = 0;
    cJSON *o = cJSON_AddObjectToObject(w, "optimizer");
    if (!o) return PS_ENOMEM;
    cJSON_AddStringToObject(o, "name", name);
    const cJSON *k;
    cJSON_ArrayForEach(k, cfg) {
        bool skipped = cJSON_IsNull(k);
        for (size_t s = 0; !skipped && skip[s]; s++)
            skipped = !strcmp(k->string, skip[s]);
        if ((!strcmp(k->string, "use_ema") || !strcmp(k->string, "amsgrad")) && cJSON_IsTrue(k)) {
            snprintf(err, errlen,
                     "%s: config.json: compile_config.optimizer: %s = true is not "
                     "supported",
                     path, k->string);
            return PS_EFORMAT;
        }
        if (!skipped) cJSON_AddItemToObject(o, k->string, cJSON_Duplicate(k, true));
    }
    return PS_OK;
}

/* The wrapper around config.json's model (root, consumed). */
static int wrapper_of(cJSON *root, const ps_model_overrides *ov, const char *path, cJSON **out,
                      char *err, size_t errlen) {
    cJSON *w = cJSON_CreateObject();
    if (!w) {
        cJSON_Delete(root);
        return PS_ENOMEM;
    }
    cJSON_AddItemToObject(w, "keras", root);
    const cJSON *cc = cJSON_GetObjectItemCaseSensitive(root, "compile_config");
    const cJSON *loss = cJSON_GetObjectItemCaseSensitive(cc, "loss");
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(cc, "optimizer");
    int rc = PS_OK;
    bool has_loss = loss && !cJSON_IsNull(loss);
    if (has_loss && ov && ov->loss) {
        snprintf(err, errlen,
                 "%s: config.json's compile_config has its own loss: --loss does "
                 "not apply",
                 path);
        rc = PS_EINVAL;
    } else if (has_loss) {
        rc = add_loss(w, loss, path, err, errlen);
    } else if (ov && ov->loss) {
        cJSON_AddStringToObject(w, "loss", ov->loss);
        if (ov->from_logits >= 0) cJSON_AddBoolToObject(w, "from_logits", ov->from_logits);
    } else {
        snprintf(err, errlen,
                 "%s: config.json has no compile_config loss (the model was saved "
                 "uncompiled): give --loss",
                 path);
        rc = PS_EFORMAT;
    }
    if (rc == PS_OK && opt && !cJSON_IsNull(opt)) rc = add_optimizer(w, opt, path, err, errlen);
    if (rc != PS_OK) {
        cJSON_Delete(w);
        return rc;
    }
    *out = w;
    return PS_OK;
}

int ps__keras_read_config(const char *path, cJSON **out, char **text_out, char *err,
                          size_t errlen) {
    zip_t *z = NULL;
    char *text = NULL;
    size_t n = 0;
    int rc = archive_open(path, &z, err, errlen);
    if (rc == PS_OK)
        rc = member_read(z, path, "config.json", PS_KERAS_MAX_CONFIG, &text, &n, err, errlen);
    if (z) zip_discard(z);
    if (rc != PS_OK) return rc;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, true);
    if (!root || !cJSON_IsObject(root)) {
        snprintf(err, errlen, "%s: config.json: not a JSON object (syntax error at offset %zu)",
                 path,
                 root  ? (size_t)0
                 : end ? (size_t)(end - text)
                       : (size_t)0);
        cJSON_Delete(root);
        free(text);
        return PS_EFORMAT;
    }
    if (text_out)
        *text_out = text;
    else
        free(text);
    *out = root;
    return PS_OK;
}

int ps_keras_load_model(const char *path, const ps_model_overrides *ov, ps_model **out, char *err,
                        size_t errlen) {
    cJSON *root = NULL, *w = NULL;
    int rc = ps__keras_read_config(path, &root, NULL, err, errlen);
    if (rc != PS_OK) return rc;
    rc = wrapper_of(root, ov, path, &w, err, errlen);
    if (rc != PS_OK) return rc;
    char *spec = cJSON_PrintUnformatted(w);
    cJSON_Delete(w);
    if (!spec) {
        snprintf(err, errlen, "%s: out of memory", path);
        return PS_ENOMEM;
    }
    char why[512] = "";
    rc = ps_model_from_json(spec, out, why, sizeof why);
    free(spec);
    if (rc != PS_OK) snprintf(err, errlen, "%s: config.json: %s", path, why);
    return rc;
}

/* The spec file at path, parsed, when it is a wrapper naming a .keras archive
 * ({"keras": "base.keras", ...}): *archive gets its path (relative names are
 * the spec file's). NULL otherwise (not JSON, not such a wrapper). */
static cJSON *wrapped_archive(const char *path, char *archive, size_t n) {
    char *text = NULL, why[256];
    if (ps_model_read_file(path, &text, why, sizeof why) != PS_OK) return NULL;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(root, "keras");
    if (!cJSON_IsString(k) || ps_keras_kind_of(k->valuestring) != PS_KERAS_ARCHIVE) {
        cJSON_Delete(root);
        return NULL;
    }
    const char *slash = strrchr(path, '/');
    if (k->valuestring[0] == '/' || !slash)
        snprintf(archive, n, "%s", k->valuestring);
    else
        snprintf(archive, n, "%.*s/%s", (int)(slash - path), path, k->valuestring);
    return root;
}

bool ps_keras_wrapped_archive(const char *spec_path, char *archive, size_t n) {
    cJSON *root = wrapped_archive(spec_path, archive, n);
    cJSON_Delete(root);
    return root != NULL;
}

/* A wrapper over an archive: the archive's config.json in place of its name. */
static int open_wrapper(const char *path, cJSON *root, const char *archive, ps_model **out,
                        char *err, size_t errlen) {
    cJSON *cfg = NULL;
    char why[600] = "";
    int rc = ps__keras_read_config(archive, &cfg, NULL, why, sizeof why);
    if (rc != PS_OK) {
        snprintf(err, errlen, "%s: 'keras': %s", path, why);
        cJSON_Delete(root);
        return rc;
    }
    cJSON_ReplaceItemInObjectCaseSensitive(root, "keras", cfg);
    char *spec = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!spec) {
        snprintf(err, errlen, "%s: out of memory", path);
        return PS_ENOMEM;
    }
    why[0] = '\0';
    rc = ps_model_from_json(spec, out, why, sizeof why);
    free(spec);
    if (rc != PS_OK) snprintf(err, errlen, "%s: %s", path, why);
    return rc;
}

int ps_keras_load_weights_by_name(ps_model *m, const char *archive, size_t *copied, char *err,
                                  size_t errlen) {
    *copied = 0;
    ps_model *base = NULL;
    /* the base's loss is irrelevant here: only its variables are read */
    ps_model_overrides ov = {.loss = "sparse_categorical_crossentropy", .from_logits = -1};
    cJSON *cfg = NULL;
    int rc = ps__keras_read_config(archive, &cfg, NULL, err, errlen);
    bool has_loss = rc == PS_OK &&
                    cJSON_GetObjectItemCaseSensitive(
                        cJSON_GetObjectItemCaseSensitive(cfg, "compile_config"), "loss");
    cJSON_Delete(cfg);
    if (rc == PS_OK) rc = ps_keras_load_model(archive, has_loss ? NULL : &ov, &base, err, errlen);
    if (rc != PS_OK) return rc;
    ps_model_init_params(base, 0);
    rc = ps_keras_load_weights(base, archive, err, errlen);
    for (size_t i = 0; rc == PS_OK && i < ps_model_num_vars(m); i++) {
        const ps_model_var *v = ps_model_var_at(m, i);
        for (size_t k = 0; k < ps_model_num_vars(base); k++) {
            const ps_model_var *b = ps_model_var_at(base, k);
            if (strcmp(b->name, v->name)) continue;
            if (b->numel != v->numel || b->shape[0] != v->shape[0] || b->rank != v->rank) {
                snprintf(err, errlen, "%s: %s: %zu values, the model's has %zu", archive,
                         v->name, b->numel, v->numel);
                rc = PS_EFORMAT;
                break;
            }
            memcpy(ps_model_params(m) + v->offset, ps_model_params(base) + b->offset,
                   v->numel * sizeof(float));
            ++*copied;
            break;
        }
    }
    if (rc == PS_OK && *copied == 0) {
        snprintf(err, errlen, "%s: none of the model's variables is in it (by name)", archive);
        rc = PS_EFORMAT;
    }
    ps_model_free(base);
    return rc;
}

int ps_model_open(const char *path, const ps_model_overrides *ov, ps_model **out, char *err,
                  size_t errlen) {
    if (ps_keras_kind_of(path) == PS_KERAS_ARCHIVE)
        return ps_keras_load_model(path, ov, out, err, errlen);
    char archive[4096];
    cJSON *wrapped = ps_keras_kind_of(path) == PS_KERAS_NONE
                         ? wrapped_archive(path, archive, sizeof archive)
                         : NULL;
    if (wrapped) {
        if (ov && ov->loss) {
            cJSON_Delete(wrapped);
            snprintf(err, errlen, "--loss is for a bare Keras model file; %s gives its own", path);
            return PS_EINVAL;
        }
        return open_wrapper(path, wrapped, archive, out, err, errlen);
    }
    if (ps_keras_kind_of(path) == PS_KERAS_WEIGHTS) {
        snprintf(err, errlen,
                 "%s: a weights file has no architecture: give it to --init-from "
                 "with the model in --model",
                 path);
        return PS_EINVAL;
    }
    return ps_model_load_with(path, ov, out, err, errlen);
}
