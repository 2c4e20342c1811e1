/* Tensor files: named float32 tensors with a header, a CRC-32C per tensor and a
 * footer, written atomically (temp file, fsync, rename, fsync of the directory).
 * psd's checkpoints and the worker's saved model use them. The format is
 * described byte by byte in docs/FORMATS.md. */
#ifndef PS_TENSORFILE_H
#define PS_TENSORFILE_H

#include <stddef.h>
#include <stdint.h>

#define PS_TF_FORMAT_VERSION 1u
#define PS_TF_MAX_NAME 511u  /* bytes in a tensor name: a 255-byte variable name plus a suffix */
#define PS_TF_MAX_RANK 8u    /* as on the wire (PS_WIRE_MAX_RANK) */
#define PS_TF_MAX_ATTR 4096u /* bytes of a tensor's opaque attribute */

typedef enum { PS_TF_CHECKPOINT = 1, PS_TF_MODEL = 2, PS_TF_WORKER_STATE = 3 } ps_tf_kind;

typedef struct {
    uint32_t kind;    /* a ps_tf_kind; the reader accepts any value, callers check */
    uint64_t meta[8]; /* kind-specific numbers (docs/FORMATS.md) */
} ps_tf_header;

/* One tensor to write; everything is borrowed for the duration of the call. */
typedef struct {
    const char *name; /* 1..PS_TF_MAX_NAME bytes, no NUL inside */
    uint32_t rank;    /* 0..PS_TF_MAX_RANK; rank 0 is a scalar (numel 1) */
    uint64_t shape[PS_TF_MAX_RANK];
    const float *data; /* numel floats; may be NULL when numel is 0 */
    size_t numel;      /* must equal the product of shape[0..rank) */
    const void *attr;  /* attr_len opaque bytes (e.g. an optimizer spec); NULL when 0 */
    uint32_t attr_len; /* <= PS_TF_MAX_ATTR */
} ps_tf_tensor;

/* One tensor read back; every pointer is owned by the ps_tf_file. */
typedef struct ps_tf_owned {
    char *name; /* NUL-terminated */
    uint32_t rank;
    uint64_t shape[PS_TF_MAX_RANK];
    float *data; /* numel floats, NULL when numel is 0 */
    size_t numel;
    void *attr; /* attr_len bytes, NULL when attr_len is 0 */
    uint32_t attr_len;
} ps_tf_owned;

typedef struct {
    ps_tf_header h;
    size_t n;
    ps_tf_owned *t; /* n tensors in file order */
} ps_tf_file;

/* Writes the header and the n tensors to `path`, atomically: into
 * "<path>.tmp.<pid>", fsync, rename over path, fsync of the directory. Returns
 * PS_OK, PS_EINVAL (a tensor breaks the limits above; nothing is written) or
 * PS_EIO (reason with strerror in err; the temp file is removed and an existing
 * file at path is left as it was, unless only the final directory fsync failed). */
int ps_tf_write(const char *path, const ps_tf_header *h, const ps_tf_tensor *t, size_t n, char *err,
                size_t errlen);

/* Reads and fully verifies `path` (magic, version, every length bound, every CRC,
 * the footer, no trailing bytes) before returning anything. On PS_OK *out owns
 * copies of everything (free with ps_tf_file_free); on failure *out is empty.
 * Errors: PS_EFORMAT (precise reason in err, e.g. "bad CRC in tensor 3
 * 'dense_0/kernel'" or "truncated at byte 812 ..."), PS_ENOENT (no such file),
 * PS_EIO (cannot open or read), PS_ENOMEM. */
int ps_tf_read(const char *path, ps_tf_file *out, char *err, size_t errlen);

/* Frees what ps_tf_read gave; safe on an empty or zeroed file. */
void ps_tf_file_free(ps_tf_file *f);

#endif
