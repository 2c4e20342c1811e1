/* NumPy's .npz archives (np.savez: a zip of .npy members), memory-mapped: the
 * zip's directories (ZIP64 included, as np.savez writes) are checked against
 * the file's size and each stored member becomes a ps_npy view of the
 * mapping, read in place. A compressed archive (np.savez_compressed) is
 * refused: a deflated member cannot be mapped. */
#ifndef PS_NPZ_H
#define PS_NPZ_H

#include <stddef.h>
#include <stdint.h>

#include "npy.h"

/* At most this many members; an archive that declares more is refused. */
#define PS_NPZ_MAX_MEMBERS 65536

typedef struct {
    char *name; /* the member's name without ".npy" ("x" for "x.npy") */
    ps_npy arr; /* a view into the archive: arr.map is NULL, never close it; arr.data
                 * is at whatever offset the zip put it, maybe not aligned for its
                 * dtype: read it with ps_npy_get or memcpy */
} ps_npz_member;

typedef struct {
    ps_npz_member *members; /* in the archive's order; names are unique */
    size_t n;
    void *map; /* ps_npz_open's mapping of the whole file (NULL after ps_npz_parse) */
    size_t map_len;
} ps_npz;

/* Parses a whole .npz image held in memory; buf must outlive *out, whose
 * arrays point into it. Members must be stored (not compressed), not
 * encrypted, named "<name>.npy" and unique, and each a valid .npy image
 * (ps_npy_parse). CRCs are not checked (that would read every byte).
 * Returns PS_OK, PS_EFORMAT (err says why: no end of central directory, a
 * directory, offset, size or count outside the buffer, a compressed member,
 * a bad .npy member, naming the member where there is one) or PS_ENOMEM.
 * On error *out is zeroed and owns nothing. Free with ps_npz_close. */
int ps_npz_parse(const uint8_t *buf, size_t len, ps_npz *out, char *err, size_t errlen);

/* Maps path read-only (once, for all members) and parses it; err names the
 * file. Returns PS_OK, PS_EIO (cannot open, stat or map it), PS_EFORMAT or
 * PS_ENOMEM. Close with ps_npz_close, which unmaps the file. */
int ps_npz_open(const char *path, ps_npz *out, char *err, size_t errlen);

/* The member named name (without ".npy"), or NULL when there is none; the
 * view lives as long as z. */
const ps_npy *ps_npz_get(const ps_npz *z, const char *name);

/* Frees the member table and unmaps the file (if ps_npz_open mapped it);
 * zeroes *z. Safe on a zeroed ps_npz. */
void ps_npz_close(ps_npz *z);

#endif
