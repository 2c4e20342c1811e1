/* Image folders as a record source (source.h): one file a record, read and
 * decoded when asked for, pixels as floats 0..255 (as Keras'
 * image_dataset_from_directory gives them). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "folder.h"
#include "image.h"
#include "ps_error.h"
#include "source.h"

#define MAX_FILE_BYTES ((size_t)256 << 20) /* an image file larger than this is refused */

typedef struct {
    ps_image_folder folder;
    int channels;
    size_t max_pixels;
    unsigned flags;
} folder_state;

int ps_source_read_file(const char *path, ps_sample *s, size_t *len, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block */
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return PS_EIO;
    }
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > MAX_FILE_BYTES) {
        snprintf(err, errlen, "%s: %s", path,
                 S_ISREG(st.st_mode) ? "larger than 256 MiB" : "not a regular file");
        close(fd);
        return PS_EFORMAT;
    }
    size_t n = (size_t)st.st_size, got = 0;
    if (ps_sample_reserve_bytes(s, n) != PS_OK) {
        close(fd);
        return PS_ENOMEM;
    }
    while (got < n) {
        ssize_t r = pread(fd, s->bytes + got, n - got, (off_t)got);
        if (r <= 0) {
            snprintf(err, errlen, "%s: %s", path, r < 0 ? strerror(errno) : "shorter than its size");
            close(fd);
            return PS_EIO;
        }
        got += (size_t)r;
    }
    close(fd);
    *len = n;
    return PS_OK;
}

int ps_source_decode_image(const uint8_t *buf, size_t len, int channels, size_t max_pixels,
                           unsigned flags, ps_sample *s, const char *what, char *err,
                           size_t errlen) {
    char why[256];
    int rc = ps_image_decode_into(buf, len, channels, max_pixels, flags, &s->img, why, sizeof why);
    if (rc != PS_OK) {
        snprintf(err, errlen, "%s: %s", what, why);
        return rc;
    }
    const ps_image *im = &s->img;
    size_t n = im->h * im->w * im->c;
    rc = ps_sample_reserve(s, n);
    if (rc == PS_OK) {
        for (size_t k = 0; k < n; k++) s->x[k] = (float)im->pixels[k];
        s->h = im->h, s->w = im->w, s->c = im->c;
    }
    return rc;
}

static int folder_read(ps_source *src, size_t i, ps_sample *s, char *err, size_t errlen) {
    folder_state *f = src->self;
    size_t len = 0;
    const char *path = f->folder.paths[i];
    int rc = ps_source_read_file(path, s, &len, err, errlen);
    if (rc == PS_OK)
        rc = ps_source_decode_image(s->bytes, len, f->channels, f->max_pixels, f->flags, s, path,
                                    err, errlen);
    s->label = f->folder.labels[i];
    return rc;
}

static void folder_close(ps_source *src) {
    folder_state *f = src->self;
    if (!f) return;
    ps_image_folder_free(&f->folder);
    free(f);
}

static const ps_source_ops folder_ops = {.read = folder_read, .close = folder_close};

int ps_source_folder(const char *dir, const ps_source_opts *o, ps_source **out, char *err,
                     size_t errlen) {
    *out = NULL;
    folder_state *f = calloc(1, sizeof *f);
    if (!f) return PS_ENOMEM;
    int rc = ps_image_folder_scan(dir, &f->folder, err, errlen);
    if (rc != PS_OK) {
        free(f);
        return rc;
    }
    f->channels = o ? o->channels : 0;
    f->max_pixels = o ? o->max_pixels : 0;
    f->flags = o ? o->image_flags : 0;
    ps_source *s = ps_source_new(&folder_ops, 1);
    if (!s) {
        ps_image_folder_free(&f->folder);
        free(f);
        return PS_ENOMEM;
    }
    s->self = f;
    s->format = "image folder";
    s->n = f->folder.n;
    s->file_start[1] = s->n; /* one record a file, so sharding goes by record */
    s->num_classes = (int)f->folder.n_classes;
    s->classes = f->folder.classes;
    s->n_classes = f->folder.n_classes;
    snprintf(s->desc, sizeof s->desc, "%s (%zu classes, %zu images%s)", dir,
             f->folder.n_classes, f->folder.n, f->folder.ignored ? ", other files ignored" : "");
    *out = s;
    return PS_OK;
}
