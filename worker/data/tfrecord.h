/* TFRecord files, as tf.io.TFRecordWriter writes them (uncompressed): a
 * sequence of records, each framed as
 *     uint64 length, little-endian
 *     uint32 masked CRC-32C of those 8 bytes
 *     length bytes of data
 *     uint32 masked CRC-32C of the data
 * with both checksums verified on every record read. */
#ifndef PS_TFRECORD_H
#define PS_TFRECORD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The largest record a reader accepts by default (a 224x224 JPEG is ~50 KiB, a
 * raw 224x224x3 float image 588 KiB). */
#define PS_TFRECORD_MAX_LEN_DEFAULT ((size_t)64 << 20)

/* TensorFlow's masking of a stored CRC: rotate right by 15, add 0xa282ead8. */
uint32_t ps_tfrecord_mask(uint32_t crc);

typedef struct {
    FILE *f;         /* owned */
    char *path;      /* owned copy, for messages */
    uint64_t size;   /* the file's size when opened */
    uint64_t offset; /* of the next record's header */
    uint64_t index;  /* the next record's number, from 0 */
    size_t max_len;
    uint8_t *buf; /* owned: the last record's data */
    size_t cap;
} ps_tfrecord_reader;

/* Opens path for reading; max_len 0 means PS_TFRECORD_MAX_LEN_DEFAULT.
 * Returns PS_OK, PS_EIO (cannot open or stat: err says why) or PS_ENOMEM. */
int ps_tfrecord_open(ps_tfrecord_reader *r, const char *path, size_t max_len, char *err,
                     size_t errlen);

/* Reads the next record: *data points into the reader's buffer (valid until
 * the next call or close), *len is its size. Returns PS_OK, PS_ENOENT at the
 * end of the file (after a whole record), PS_EFORMAT for a truncated record,
 * a checksum that does not match or a length over max_len or past the end of
 * the file (nothing is allocated for it), PS_EIO or PS_ENOMEM; err names the
 * file, the record's number and its byte offset. */
int ps_tfrecord_next(ps_tfrecord_reader *r, const uint8_t **data, size_t *len, char *err,
                     size_t errlen);

void ps_tfrecord_close(ps_tfrecord_reader *r);

/* For readers of their own (the indexed source): a 12-byte record header's
 * length into *len; returns 1 when its checksum matches, else 0. */
int ps_tfrecord_header(const uint8_t head[12], uint64_t *len);
/* 1 when the 4-byte footer is the masked CRC-32C of data, else 0. */
int ps_tfrecord_data_ok(const uint8_t *data, size_t len, const uint8_t foot[4]);

/* Appends one record to f. Returns PS_OK or PS_EIO. */
int ps_tfrecord_write(FILE *f, const void *data, size_t len);

#endif
