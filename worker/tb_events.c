/* TensorBoard event files (see tb_events.h). */
#include "tb_events.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "crc32c.h"
#include "ps_error.h"
#include "tb.pb-c.h"

uint32_t ps_tfrecord_mask_crc(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void ps_tfrecord_frame(const void *data, size_t n, uint8_t *out) {
    uint64_t len = n;
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(len >> (8 * i));
    put_le32(out + 8, ps_tfrecord_mask_crc(ps_crc32c(out, 8)));
    if (n) memcpy(out + 12, data, n);
    put_le32(out + 12 + n, ps_tfrecord_mask_crc(ps_crc32c(data, n)));
}

static double now_wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Serializes ev and appends it as one record. */
static int write_event(ps_tb_file *t, const Tb__Event *ev) {
    if (!t->f) return PS_EIO;
    size_t n = tb__event__get_packed_size(ev);
    uint8_t *buf = malloc(n + PS_TFRECORD_OVERHEAD);
    if (!buf) return PS_ENOMEM;
    uint8_t *body = malloc(n ? n : 1);
    if (!body) {
        free(buf);
        return PS_ENOMEM;
    }
    tb__event__pack(ev, body);
    ps_tfrecord_frame(body, n, buf);
    free(body);
    size_t w = fwrite(buf, 1, n + PS_TFRECORD_OVERHEAD, t->f);
    free(buf);
    return w == n + PS_TFRECORD_OVERHEAD ? PS_OK : PS_EIO;
}

/* mkdir -p: every missing directory on the way to dir. */
static int mkdir_all(const char *dir) {
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    for (char *c = p + 1; *c; c++) {
        if (*c != '/') continue;
        *c = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) return -1;
        *c = '/';
    }
    return mkdir(p, 0777) == 0 || errno == EEXIST ? 0 : -1;
}

int ps_tb_open(ps_tb_file *t, const char *dir, char *err, size_t errlen) {
    static atomic_uint counter;
    memset(t, 0, sizeof *t);
    if (mkdir_all(dir) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", dir, strerror(errno));
        return PS_EIO;
    }
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    unsigned n = atomic_fetch_add(&counter, 1);
    int w = snprintf(t->path, sizeof t->path, "%s/events.out.tfevents.%lld.%s.%ld.%u", dir,
                     (long long)time(NULL), host, (long)getpid(), n);
    if (w < 0 || (size_t)w >= sizeof t->path) {
        snprintf(err, errlen, "event file path under %s is too long", dir);
        return PS_EINVAL;
    }
    t->f = fopen(t->path, "wb");
    if (!t->f) {
        snprintf(err, errlen, "cannot create %s: %s", t->path, strerror(errno));
        return PS_EIO;
    }
    Tb__Event ev = TB__EVENT__INIT;
    ev.wall_time = now_wall();
    ev.what_case = TB__EVENT__WHAT_FILE_VERSION;
    ev.file_version = (char *)PS_TB_FILE_VERSION;
    if (write_event(t, &ev) != PS_OK || ps_tb_flush(t) != PS_OK) {
        snprintf(err, errlen, "cannot write %s", t->path);
        ps_tb_close(t);
        return PS_EIO;
    }
    return PS_OK;
}

static int write_summary(ps_tb_file *t, int64_t step, double wall_time, Tb__Summary__Value **v,
                         size_t n) {
    Tb__Summary s = TB__SUMMARY__INIT;
    s.n_value = n;
    s.value = v;
    Tb__Event ev = TB__EVENT__INIT;
    ev.wall_time = wall_time > 0 ? wall_time : now_wall();
    ev.step = step;
    ev.what_case = TB__EVENT__WHAT_SUMMARY;
    ev.summary = &s;
    return write_event(t, &ev);
}

int ps_tb_scalars(ps_tb_file *t, int64_t step, double wall_time, const char *const *tags,
                  const double *values, size_t n) {
    Tb__Summary__Value vals[16], *ptr[16];
    if (n > 16) return PS_EINVAL;
    for (size_t i = 0; i < n; i++) {
        tb__summary__value__init(&vals[i]);
        vals[i].tag = (char *)tags[i];
        vals[i].value_case = TB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
        vals[i].simple_value = (float)values[i];
        ptr[i] = &vals[i];
    }
    return write_summary(t, step, wall_time, ptr, n);
}

int ps_tb_histogram(ps_tb_file *t, int64_t step, double wall_time, const char *tag,
                    const float *values, size_t n, unsigned buckets) {
    if (!buckets) buckets = 1;
    double lo = INFINITY, hi = -INFINITY, sum = 0, sq = 0;
    size_t finite = 0;
    for (size_t i = 0; i < n; i++) {
        double x = values[i];
        if (!isfinite(x)) continue;
        lo = x < lo ? x : lo;
        hi = x > hi ? x : hi;
        sum += x, sq += x * x, finite++;
    }
    if (!finite) lo = hi = 0;
    double *limit = calloc(buckets, sizeof *limit), *count = calloc(buckets, sizeof *count);
    if (!limit || !count) {
        free(limit), free(count);
        return PS_ENOMEM;
    }
    double width = (hi - lo) / buckets;
    for (unsigned b = 0; b < buckets; b++)
        limit[b] = b + 1 == buckets ? hi : lo + width * (b + 1);
    for (size_t i = 0; i < n; i++) {
        double x = values[i];
        if (!isfinite(x)) continue;
        unsigned b = width > 0 ? (unsigned)((x - lo) / width) : 0;
        count[b < buckets ? b : buckets - 1] += 1;
    }
    Tb__HistogramProto h = TB__HISTOGRAM_PROTO__INIT;
    h.min = lo, h.max = hi, h.num = (double)finite, h.sum = sum, h.sum_squares = sq;
    h.n_bucket_limit = h.n_bucket = buckets;
    h.bucket_limit = limit, h.bucket = count;
    Tb__Summary__Value v = TB__SUMMARY__VALUE__INIT, *pv = &v;
    v.tag = (char *)tag;
    v.value_case = TB__SUMMARY__VALUE__VALUE_HISTO;
    v.histo = &h;
    int rc = write_summary(t, step, wall_time, &pv, 1);
    free(limit), free(count);
    return rc;
}

int ps_tb_flush(ps_tb_file *t) {
    return t->f && fflush(t->f) == 0 ? PS_OK : PS_EIO;
}

int ps_tb_close(ps_tb_file *t) {
    if (!t->f) return PS_OK;
    int rc = fclose(t->f) == 0 ? PS_OK : PS_EIO;
    t->f = NULL;
    return rc;
}
