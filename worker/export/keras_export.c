/* --export FILE.keras and FILE.weights.h5 (see export.h): config.json from
 * keras_config.c, the weights as Keras 3 writes model.weights.h5 (keras_h5.c),
 * metadata.json as Keras writes it, zipped as Keras zips them. The optimizer's
 * state is not written (compile_config names the optimizer and the loss only).
 * docs/FORMATS.md, "Keras 3 files", is the contract. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zip.h>

#include "export.h"
#include "keras_config.h"
#include "keras_h5.h"
#include "ps_error.h"

#define KERAS_VERSION "3.15.1" /* the version whose files these follow (metadata.json) */

/* The weights as an HDF5 file image in memory (*buf malloc'd). */
static int weights_image(const ps_model *m, const ps_keras_layer *ls, size_t n, void **buf,
                         size_t *len, const char *path, char *err, size_t errlen) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), f = -1;
    int rc = PS_EIO;
    if (fapl >= 0 && H5Pset_fapl_core(fapl, 1 << 20, 0) >= 0)
        f = H5Fcreate("model.weights.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    if (f < 0) {
        snprintf(err, errlen, "%s: cannot make an HDF5 file in memory", path);
        return PS_EIO;
    }
    rc = ps__keras_h5_write(m, ls, n, f, path, err, errlen);
    if (rc == PS_OK && H5Fflush(f, H5F_SCOPE_GLOBAL) < 0) rc = PS_EIO;
    ssize_t size = rc == PS_OK ? H5Fget_file_image(f, NULL, 0) : -1;
    void *b = size > 0 ? malloc((size_t)size) : NULL;
    if (rc == PS_OK && (!b || H5Fget_file_image(f, b, (size_t)size) != size)) {
        snprintf(err, errlen, "%s: cannot take the HDF5 image of the weights", path);
        free(b);
        b = NULL;
        rc = PS_EIO;
    }
    H5Fclose(f);
    if (rc != PS_OK) return rc;
    *buf = b;
    *len = (size_t)size;
    return PS_OK;
}

static char *metadata_json(void) {
    char date[64];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%d@%H:%M:%S", &tm);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "keras_version", KERAS_VERSION);
    cJSON_AddStringToObject(j, "date_saved", date);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

/* path + ".tmp" into out. */
static void tmp_path(char *out, size_t n, const char *path) {
    snprintf(out, n, "%s.tmp", path);
}

int ps_export_keras(const ps_model *m, const char *source, const char *path, char *err,
                    size_t errlen) {
    if (ps_export_check_layers(m, path, err, errlen) != PS_OK) return PS_EINVAL;
    ps__keras_h5_quiet();
    ps_keras_layer *ls = NULL;
    size_t n = 0, wlen = 0;
    void *w = NULL;
    char *config = NULL, *meta = NULL, tmp[4200];
    int rc = ps__keras_config(m, source, &config, &ls, &n, err, errlen);
    if (rc != PS_OK) return rc;
    meta = metadata_json();
    rc = config && meta ? weights_image(m, ls, n, &w, &wlen, path, err, errlen) : PS_ENOMEM;
    free(ls);
    tmp_path(tmp, sizeof tmp, path);
    zip_t *z = NULL;
    if (rc == PS_OK) {
        int ze = 0;
        z = zip_open(tmp, ZIP_CREATE | ZIP_TRUNCATE, &ze);
        if (!z) {
            snprintf(err, errlen, "%s: cannot be written (%s)", tmp, strerror(errno));
            rc = PS_EIO;
        }
    }
    /* the order and the stored (not deflated) members are Keras' own */
    const char *names[3] = {"metadata.json", "config.json", "model.weights.h5"};
    const void *data[3] = {meta, config, w};
    size_t sizes[3] = {meta ? strlen(meta) : 0, config ? strlen(config) : 0, wlen};
    for (size_t i = 0; rc == PS_OK && i < 3; i++) {
        zip_source_t *s = zip_source_buffer(z, data[i], sizes[i], 0);
        zip_int64_t idx = s ? zip_file_add(z, names[i], s, ZIP_FL_ENC_UTF_8) : -1;
        if (idx < 0) {
            if (s) zip_source_free(s);
            snprintf(err, errlen, "%s: %s: %s", path, names[i], zip_strerror(z));
            rc = PS_EIO;
        } else {
            zip_set_file_compression(z, (zip_uint64_t)idx, ZIP_CM_STORE, 0);
        }
    }
    if (z && rc == PS_OK && zip_close(z) != 0) {
        snprintf(err, errlen, "%s: %s", tmp, zip_strerror(z));
        rc = PS_EIO;
    }
    if (z && rc != PS_OK) zip_discard(z);
    if (rc == PS_OK && rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        rc = PS_EIO;
    }
    if (rc != PS_OK) unlink(tmp);
    free(w);
    free(config);
    free(meta);
    return rc;
}

int ps_export_weights_h5(const ps_model *m, const char *source, const char *path, char *err,
                         size_t errlen) {
    if (ps_export_check_layers(m, path, err, errlen) != PS_OK) return PS_EINVAL;
    ps__keras_h5_quiet();
    ps_keras_layer *ls = NULL;
    size_t n = 0;
    char *config = NULL;
    int rc = ps__keras_config(m, source, &config, &ls, &n, err, errlen);
    if (rc != PS_OK) return rc;
    free(config);
    char tmp[4200];
    tmp_path(tmp, sizeof tmp, path);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) {
        snprintf(err, errlen, "%s: cannot be written", tmp);
        rc = PS_EIO;
    } else {
        rc = ps__keras_h5_write(m, ls, n, f, path, err, errlen);
        if (H5Fclose(f) < 0 && rc == PS_OK) {
            snprintf(err, errlen, "%s: cannot be written", tmp);
            rc = PS_EIO;
        }
    }
    if (rc == PS_OK && rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        rc = PS_EIO;
    }
    if (rc != PS_OK) unlink(tmp);
    free(ls);
    return rc;
}
