/* Image folders as Keras' image_dataset_from_directory reads them:
 * DIR/<class>/.../<name>.jpg, .jpeg or .png. Class names are the subdirectories of
 * DIR, sorted (byte order, which is Python's order for UTF-8 names), label i
 * for the i-th; files are listed recursively within each class and sorted by
 * their path, so the listing is the same on every host. Symbolic links to
 * directories are not followed (Keras' follow_links=False), so a link loop
 * cannot trap the walk; links to files are read. */
#ifndef PS_FOLDER_H
#define PS_FOLDER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char **classes;  /* owned: n_classes names, sorted */
    size_t n_classes;
    char **paths;    /* owned: n file paths, DIR/<class>/... */
    int32_t *labels; /* owned: n labels */
    size_t n;
    size_t ignored;       /* files without an image extension */
    size_t skipped_links; /* links to directories, not followed */
} ps_image_folder;

/* Lists dir. Returns PS_OK, PS_EIO (dir or a subdirectory cannot be read: err
 * names it), PS_EFORMAT (no class subdirectory, a class without images, or a
 * walk deeper than 32 levels), or PS_ENOMEM. */
int ps_image_folder_scan(const char *dir, ps_image_folder *out, char *err, size_t errlen);
void ps_image_folder_free(ps_image_folder *f);

#endif
