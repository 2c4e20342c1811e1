/* TensorBoard event files (psworker --tensorboard): TFRecord framing of
 * serialized tb.Event messages (proto/tb.proto), written the way TensorFlow's
 * summary writer does so TensorBoard reads them. docs/FORMATS.md. */
#ifndef PS_TB_EVENTS_H
#define PS_TB_EVENTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PS_TB_FILE_VERSION "brain.Event:2"
#define PS_TFRECORD_OVERHEAD 16 /* u64 length, u32 CRC of it, u32 CRC of the data */

/* TFRecord's masked CRC-32C: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t ps_tfrecord_mask_crc(uint32_t crc);

/* Frames n bytes of data as one TFRecord into out (n + PS_TFRECORD_OVERHEAD
 * bytes): length (u64 little-endian), masked CRC-32C of those 8 bytes, the
 * data, masked CRC-32C of the data. */
void ps_tfrecord_frame(const void *data, size_t n, uint8_t *out);

typedef struct {
    FILE *f;
    char path[4096];
} ps_tb_file;

/* Creates dir (and the directories above it, when missing) and in it a new event file named as
 * TensorFlow names them, events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n>,
 * n counting this process's files; writes the file_version record. Returns PS_OK or
 * PS_EIO with a reason in err. */
int ps_tb_open(ps_tb_file *t, const char *dir, char *err, size_t errlen);

/* One Event with a Summary of scalars: tags[i] = values[i] (simple_value, a
 * float), at step and wall_time (seconds since the epoch; <= 0: now). */
int ps_tb_scalars(ps_tb_file *t, int64_t step, double wall_time, const char *const *tags,
                  const double *values, size_t n);

/* One Event with a histogram of n values under tag, in `buckets` equal-width
 * buckets between their min and max (TensorBoard's HistogramProto). */
int ps_tb_histogram(ps_tb_file *t, int64_t step, double wall_time, const char *tag,
                    const float *values, size_t n, unsigned buckets);

/* Pushes the records written so far to the file (TensorBoard reads a live file). */
int ps_tb_flush(ps_tb_file *t);
/* Flushes and closes; returns PS_EIO if a write failed. Idempotent. */
int ps_tb_close(ps_tb_file *t);

#endif
