/* Image folders (folder.h): readdir + lstat, sorted listings. */
#include "folder.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "ps_error.h"

#define MAX_DEPTH 32

typedef struct {
    char **v;
    size_t n, cap;
} strvec;

static int push(strvec *s, char *str) {
    if (!str) return PS_ENOMEM;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        char **v = realloc(s->v, cap * sizeof *v);
        if (!v) {
            free(str);
            return PS_ENOMEM;
        }
        s->v = v, s->cap = cap;
    }
    s->v[s->n++] = str;
    return PS_OK;
}

static void strvec_free(strvec *s) {
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *p = malloc(la + lb + 2);
    if (!p) return NULL;
    memcpy(p, a, la);
    p[la] = '/';
    memcpy(p + la + 1, b, lb + 1);
    return p;
}

static int is_image_name(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot && (strcasecmp(dot, ".jpg") == 0 || strcasecmp(dot, ".jpeg") == 0 ||
                   strcasecmp(dot, ".png") == 0);
}

/* Appends the image files under path (recursively) to files. */
static int walk(const char *path, int depth, strvec *files, ps_image_folder *f, char *err,
                size_t errlen) {
    if (depth > MAX_DEPTH) {
        snprintf(err, errlen, "%s: more than %d levels of subdirectories", path, MAX_DEPTH);
        return PS_EFORMAT;
    }
    DIR *d = opendir(path);
    if (!d) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return PS_EIO;
    }
    int rc = PS_OK;
    struct dirent *e;
    errno = 0;
    while (rc == PS_OK && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char *p = join(path, e->d_name);
        struct stat st;
        if (!p) {
            rc = PS_ENOMEM;
        } else if (lstat(p, &st) != 0) {
            snprintf(err, errlen, "%s: %s", p, strerror(errno));
            rc = PS_EIO;
        } else if (S_ISDIR(st.st_mode)) {
            rc = walk(p, depth + 1, files, f, err, errlen);
        } else if (S_ISLNK(st.st_mode) && stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            f->skipped_links++;
        } else if (is_image_name(e->d_name)) {
            rc = push(files, p);
            p = NULL;
        } else {
            f->ignored++;
        }
        free(p);
        errno = 0;
    }
    if (rc == PS_OK && errno != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        rc = PS_EIO;
    }
    closedir(d);
    return rc;
}

int ps_image_folder_scan(const char *dir, ps_image_folder *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    strvec classes = {0}, paths = {0};
    int32_t *labels = NULL;
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "%s: %s", dir, strerror(errno));
        return PS_EIO;
    }
    int rc = PS_OK;
    struct dirent *e;
    while (rc == PS_OK && (e = readdir(d))) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        char *p = join(dir, e->d_name);
        struct stat st;
        if (!p) {
            rc = PS_ENOMEM;
        } else if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            rc = push(&classes, strdup(e->d_name));
        } else if (lstat(p, &st) == 0 && S_ISLNK(st.st_mode) && stat(p, &st) == 0 &&
                   S_ISDIR(st.st_mode)) {
            out->skipped_links++;
        } else {
            out->ignored++; /* files beside the class directories */
        }
        free(p);
    }
    closedir(d);
    if (rc == PS_OK && classes.n == 0) {
        snprintf(err, errlen, "%s: no class subdirectories (expected %s/<class>/*.jpg|png)", dir,
                 dir);
        rc = PS_EFORMAT;
    }
    if (rc == PS_OK) qsort(classes.v, classes.n, sizeof *classes.v, by_name);
    for (size_t c = 0; rc == PS_OK && c < classes.n; c++) {
        char *cdir = join(dir, classes.v[c]);
        size_t before = paths.n;
        rc = cdir ? walk(cdir, 1, &paths, out, err, errlen) : PS_ENOMEM;
        if (rc == PS_OK && paths.n == before) {
            snprintf(err, errlen, "%s: class \"%s\" has no .jpg, .jpeg or .png file", cdir,
                     classes.v[c]);
            rc = PS_EFORMAT;
        }
        if (rc == PS_OK) qsort(paths.v + before, paths.n - before, sizeof *paths.v, by_name);
        if (rc == PS_OK) {
            int32_t *l = realloc(labels, (paths.n ? paths.n : 1) * sizeof *l);
            if (!l) {
                rc = PS_ENOMEM;
            } else {
                labels = l;
                for (size_t i = before; i < paths.n; i++)
                    labels[i] = (int32_t)c;
            }
        }
        free(cdir);
    }
    if (rc != PS_OK) {
        strvec_free(&classes);
        strvec_free(&paths);
        free(labels);
        memset(out, 0, sizeof *out);
        return rc;
    }
    out->classes = classes.v, out->n_classes = classes.n;
    out->paths = paths.v, out->n = paths.n, out->labels = labels;
    return PS_OK;
}

void ps_image_folder_free(ps_image_folder *f) {
    for (size_t i = 0; i < f->n_classes; i++)
        free(f->classes[i]);
    for (size_t i = 0; i < f->n; i++)
        free(f->paths[i]);
    free(f->classes);
    free(f->paths);
    free(f->labels);
    memset(f, 0, sizeof *f);
}
