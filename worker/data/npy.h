/* NumPy's .npy files (format versions 1.0, 2.0, 3.0), memory-mapped: the
 * header is parsed and checked against the file's size, the data is read in
 * place. Little-endian (or single-byte) numbers and bools in C order; an
 * object array (a pickle), big-endian data and Fortran order are refused
 * with a message that says so. */
#ifndef PS_NPY_H
#define PS_NPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PS_NPY_MAX_DIMS 8

typedef enum {
    PS_NPY_BOOL,
    PS_NPY_I1, PS_NPY_U1, PS_NPY_I2, PS_NPY_U2, PS_NPY_I4, PS_NPY_U4, PS_NPY_I8, PS_NPY_U8,
    PS_NPY_F2, PS_NPY_F4, PS_NPY_F8
} ps_npy_dtype;

typedef struct {
    ps_npy_dtype dtype;
    size_t itemsize;
    int ndim; /* 0 for a scalar */
    size_t shape[PS_NPY_MAX_DIMS];
    size_t count;        /* product of shape */
    const uint8_t *data; /* count * itemsize bytes */
    void *map;           /* owned by ps_npy_open's result: the mapping */
    size_t map_len;
} ps_npy;

/* Parses a whole .npy image held in memory (buf must outlive *out; nothing is
 * owned). Returns PS_OK or PS_EFORMAT with err saying what is wrong: the
 * magic, the version, the header's syntax, an unsupported dtype, a shape
 * whose size overflows, or data of another size than the shape says. */
int ps_npy_parse(const uint8_t *buf, size_t len, ps_npy *out, char *err, size_t errlen);

/* Maps path and parses it; err names the file. Returns PS_OK, PS_EIO or
 * PS_EFORMAT. Close with ps_npy_close. */
int ps_npy_open(const char *path, ps_npy *out, char *err, size_t errlen);
void ps_npy_close(ps_npy *a);

/* Element i in C order, converted (bool as 0/1; float16 widened exactly). */
double ps_npy_get(const ps_npy *a, size_t i);
/* True for the integer and bool dtypes. */
bool ps_npy_is_integer(const ps_npy *a);

#endif
