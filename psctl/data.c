/* psctl data inspect|bench|convert|synth-clicks: what psworker's input pipeline
 * would read from a --data PATH, how fast it reads it with the spec's
 * preprocessing, datasets written out as image folders or TFRecord files (from
 * Fashion-MNIST, say, for trying the formats), and a synthetic click log
 * (data_synth.c). */
#include "data_cmd.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cifar.h"
#include "data.h"
#include "dataspec.h"
#include "encode.h"
#include "example.h"
#include "options.h"
#include "order.h"
#include "pipeline.h"
#include "prepare.h"
#include "ps_error.h"
#include "resize.h"
#include "source.h"
#include "tfrecord.h"

typedef struct {
    long records, threads, batch, memory, test, quality, shards, max, channels, rows, seed;
    char to[32], image[32], classes[1024], size[64];
    const char *out;
} data_opts;

#define F(field) PS_OPTION_FIELD(data_opts, field)
static const ps_option table[] = {
    {"records", PS_OPTION_LONG, F(records), 0, 1L << 40, "0", NULL, "N",
     "inspect: records to look at (0: 8); bench: records to read (0: all, at most 2000)"},
    {"threads", PS_OPTION_LONG, F(threads), 0, 256, "0", NULL, "N",
     "bench: input threads (0: one per core, at most 8)"},
    {"batch", PS_OPTION_LONG, F(batch), 1, 1 << 20, "32", NULL, "N", "bench: batch size"},
    {"memory", PS_OPTION_LONG, F(memory), 1, 1L << 20, "256", NULL, "MB",
     "bench: the pipeline's memory budget (psworker --input-memory)"},
    {"test", PS_OPTION_FLAG, F(test), 0, 0, NULL, NULL, NULL,
     "IDX and CIFAR-10: the test files, not the training files"},
    {"to", PS_OPTION_STR, F(to), 0, 0, "", NULL, "png|jpeg|tfrecord",
     "convert: an image folder of PNG or JPEG files (DEST/<class>/<n>.png), or TFRecord files "
     "of tf.train.Example (DEST, or DEST-00000-of-0000N with --shards)"},
    {"image", PS_OPTION_STR, F(image), 0, 0, "png", NULL, "png|jpeg|raw",
     "convert --to tfrecord: the \"image\" feature as PNG, JPEG or raw uint8 bytes "
     "(read back with the spec's \"shape\")"},
    {"quality", PS_OPTION_LONG, F(quality), 1, 100, "95", NULL, "Q", "JPEG quality"},
    {"classes", PS_OPTION_STR, F(classes), 0, 0, "", NULL, "C,C,...",
     "convert: only these classes, relabelled 0.. in their numeric order (e.g. 0,6 for a "
     "two-class set)"},
    {"max", PS_OPTION_LONG, F(max), 0, 1L << 40, "0", NULL, "N", "convert: at most N records"},
    {"shards", PS_OPTION_LONG, F(shards), 1, 100000, "1", NULL, "N",
     "convert --to tfrecord: N files, record i in file i % N"},
    {"size", PS_OPTION_STR, F(size), 0, 0, "", NULL, "HxW",
     "convert: resize every image to H x W (bilinear) before writing"},
    {"channels", PS_OPTION_LONG, F(channels), 0, 3, "0", NULL, "1|3",
     "convert: write 1 (gray) or 3 (RGB) channels (0: the data's own)"},
    {"rows", PS_OPTION_LONG, F(rows), 1, 1L << 40, "100000", NULL, "N",
     "synth-clicks: rows to write"},
    {"seed", PS_OPTION_LONG, F(seed), 0, 1L << 62, "1", NULL, "S",
     "synth-clicks: the generator's seed (the same seed, the same rows)"},
    {"out", PS_OPTION_ARG, F(out), 1, 0, NULL, NULL, "FILE.tsv",
     "synth-clicks: the TSV to write; FILE.tsv.json beside it gets the generator's "
     "parameters, the click rate and the AUC ceiling"},
};
#define N_OPTIONS (sizeof table / sizeof table[0])

static const ps_exit_status exits[] = {
    {0, "done"},
    {1, "the data cannot be read (the message names the file and record) or written"},
    {2, "bad usage"},
};
#define N_EXITS (sizeof exits / sizeof exits[0])

static void usage(FILE *f) {
    fprintf(f,
            "usage: psctl data inspect PATH [--records N] [--test]\n"
            "       psctl data bench PATH [--threads N] [--records N] [--batch N] [--memory MB]\n"
            "       psctl data convert PATH DEST --to png|jpeg|tfrecord [options]\n"
            "       psctl data synth-clicks --out FILE.tsv [--rows N] [--seed S]\n"
            "PATH is what psworker --data takes: a directory, a file, a glob or a data spec.\n"
            "inspect prints what the input pipeline would read (format, records, classes,\n"
            "shapes, a record's statistics before and after the spec's preprocessing); bench\n"
            "times reading, decoding and preprocessing it (records/s over a second pass, as in\n"
            "training, random augmentation on); convert writes the records out as an image folder or TFRecord.\n"
            "synth-clicks writes a Criteo-like click log: a 0/1 label, 13 numeric and 26\n"
            "categorical fields (Zipf ids, exponent 1.1, over 2^40 per field), the labels drawn\n"
            "from a hidden logistic model; it prints the click rate and the AUC of the true\n"
            "probabilities (the best a model can reach).\n\n"
            "options:\n");
    ps_options_usage(table, N_OPTIONS, f);
    fprintf(f, "\n");
    ps_exit_status_usage(exits, N_EXITS, f);
}

/* The records PATH names: a streaming source, or an IDX / CIFAR-10 set loaded
 * whole into *mem (pixels back to 0..255, as decoded images are). */
static int open_any(const char *path, bool test, ps_data_spec *spec, ps_dataset *mem,
                    ps_source **src, char *err, size_t errlen) {
    int rc = ps_data_spec_resolve(path, spec, err, errlen);
    if (rc != PS_OK) return rc;
    if (spec->format != PS_DATA_IDX && spec->format != PS_DATA_CIFAR10)
        return ps_data_spec_open(spec, src, err, errlen);
    bool cifar = spec->format == PS_DATA_CIFAR10;
    rc = (cifar ? ps_dataset_load_cifar10_dir : ps_dataset_load_dir)(spec->paths[0], !test, 0, mem,
                                                                      err, errlen);
    if (rc != PS_OK) return rc;
    for (size_t i = 0; i < mem->n * mem->dim; i++) mem->x[i] = roundf(mem->x[i] * 255.0f);
    return ps_source_memory(mem, cifar ? "CIFAR-10" : "IDX", src, err, errlen);
}

static void stats(const float *x, size_t n, double *mn, double *mx, double *mean) {
    *mn = n ? x[0] : 0, *mx = *mn;
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        if (x[i] < *mn) *mn = x[i];
        if (x[i] > *mx) *mx = x[i];
        s += x[i];
    }
    *mean = n ? s / (double)n : 0;
}

static int inspect(const data_opts *o, const char *path) {
    ps_data_spec spec;
    ps_dataset mem = {0};
    ps_source *src = NULL;
    ps_prep *prep = NULL;
    ps_sample s = {0};
    float *out = NULL, *scratch = NULL;
    size_t cap = 0;
    char err[1200];
    int rc = open_any(path, o->test, &spec, &mem, &src, err, sizeof err);
    if (rc == PS_OK) rc = ps_prep_new(spec.preprocess, 0, 0, 0, 0, &prep, err, sizeof err);
    if (rc != PS_OK) goto done;
    printf("path: %s\nformat: %s (%s)\n", path, src->format, ps_data_format_name(spec.format));
    printf("records: %zu in %zu file%s: %s\n", src->n, src->n_files, src->n_files == 1 ? "" : "s",
           src->desc);
    if (src->n_ids) {
        printf("ids: %zu column%s (", src->n_ids, src->n_ids == 1 ? "" : "s");
        for (size_t k = 0; k < spec.opts.n_id_columns; k++)
            printf("%s%s", k ? ", " : "", spec.opts.id_columns[k]);
        printf("), %s\n", spec.opts.hash_ids ? "text hashed to 64 bits" : "unsigned decimal");
    }
    const char *label_col = spec.opts.label_column ? spec.opts.label_column : "label";
    if (src->float_target) {
        printf("target: float, column \"%s\", %g to %g\n", label_col, src->target_min,
               src->target_max);
    } else if (src->classes) {
        printf("classes:");
        for (size_t i = 0; i < src->n_classes; i++)
            printf("%s %zu = %s", i ? "," : "", i, src->classes[i]);
        printf("\n");
    } else if (src->num_classes > 0) {
        printf("labels: 0 to %d\n", src->num_classes - 1);
    } else {
        printf("labels: not known without reading every record\n");
    }
    char desc[512];
    ps_prep_describe(prep, desc, sizeof desc);
    printf("preprocess: %s\n", spec.preprocess             ? desc
                                : spec.format == PS_DATA_CSV ? "none"
                                                             : "none (psworker resizes images to "
                                                               "the model's input)");
    if (spec.validation_split > 0) printf("validation_split: %g\n", spec.validation_split);
    if (spec.validation) printf("validation: %s\n", spec.validation->origin);
    if (spec.has_shuffle_buffer) printf("shuffle_buffer: %zu\n", spec.shuffle_buffer);
    size_t look = o->records ? (size_t)o->records : 8;
    if (look > src->n) look = src->n;
    for (size_t i = 0; i < look; i++) {
        rc = ps_source_read(src, i, &s, err, sizeof err);
        if (rc != PS_OK) goto done;
        double mn, mx, mean;
        stats(s.x, s.h * s.w * s.c, &mn, &mx, &mean);
        printf("record %zu: %zux%zux%zu, ", i, s.h, s.w, s.c);
        if (src->float_target) printf("target %g, ", (double)s.target);
        else printf("label %d, ", (int)s.label);
        if (s.n_ids) {
            printf("ids");
            for (size_t k = 0; k < s.n_ids && k < 8; k++)
                printf(" %llu", (unsigned long long)s.ids[k]);
            printf("%s, ", s.n_ids > 8 ? " ..." : "");
        }
        if (s.h * s.w * s.c > 0) printf("min %g max %g mean %.4g", mn, mx, mean);
        else printf("no numeric features");
        size_t oh, ow, oc;
        if (spec.preprocess) {
            rc = ps_prep_shape(prep, s.h, s.w, s.c, &oh, &ow, &oc, err, sizeof err);
            if (rc != PS_OK) goto done;
            float *b = realloc(out, oh * ow * oc * sizeof *b);
            if (!b) {
                rc = PS_ENOMEM;
                goto done;
            }
            out = b;
            rc = ps_prep_run(prep, &s, out, &scratch, &cap, 0, false, err, sizeof err);
            if (rc != PS_OK) goto done;
            stats(out, oh * ow * oc, &mn, &mx, &mean);
            printf("; preprocessed (evaluation): %zux%zux%zu, min %g max %g mean %.4g", oh, ow, oc,
                   mn, mx, mean);
        }
        printf("\n");
    }
done:
    if (rc != PS_OK) fprintf(stderr, "psctl data inspect: %s\n", err);
    free(out), free(scratch);
    ps_sample_free(&s);
    ps_prep_free(prep);
    ps_source_close(src);
    ps_dataset_free(&mem);
    ps_data_spec_free(&spec);
    return rc == PS_OK ? 0 : 1;
}

/* CPU seconds of this process, all threads (user + system). */
static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int bench(const data_opts *o, const char *path) {
    ps_data_spec spec;
    ps_dataset mem = {0};
    ps_source *src = NULL;
    ps_prep *prep = NULL;
    ps_pipeline *pl = NULL;
    ps_sample s = {0};
    char err[1200];
    int rc = open_any(path, o->test, &spec, &mem, &src, err, sizeof err);
    size_t oh = 0, ow = 0, oc = 0;
    /* the output shape: the first record's through the list (images must come out alike) */
    if (rc == PS_OK) rc = ps_source_read(src, 0, &s, err, sizeof err);
    if (rc == PS_OK) rc = ps_prep_new(spec.preprocess, 0, 0, 0, 0, &prep, err, sizeof err);
    if (rc == PS_OK) rc = ps_prep_shape(prep, s.h, s.w, s.c, &oh, &ow, &oc, err, sizeof err);
    ps_prep_free(prep);
    prep = NULL;
    if (rc == PS_OK) rc = ps_prep_new(spec.preprocess, oh, ow, oc, 0, &prep, err, sizeof err);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned threads = o->threads ? (unsigned)o->threads : cpus < 1 ? 1 : cpus > 8 ? 8 : (unsigned)cpus;
    size_t n = o->records ? (size_t)o->records : 2000;
    if (rc == PS_OK && n > src->n) n = src->n;
    size_t *recs = rc == PS_OK ? malloc(n * sizeof *recs) : NULL;
    if (rc == PS_OK && !recs) rc = PS_ENOMEM;
    for (size_t i = 0; recs && i < n; i++) recs[i] = i;
    ps_pipeline_cfg pc = {.src = src, .out_h = oh, .out_w = ow, .out_c = oc,
                          .prepare = ps_prep_run, .prepare_ctx = prep,
                          .batch = (size_t)o->batch, .threads = threads,
                          .memory_bytes = (size_t)o->memory << 20, .training = true,
                          .skip_bad = spec.skip_bad, .records = recs, .n_records = n,
                          .count = 1, .seed = 1};
    if (rc == PS_OK) rc = ps_pipeline_open(&pl, &pc, err, sizeof err);
    /* two epochs, the second timed: the first brings the files into the page cache
     * and touches the ring's memory, as the first epoch of training does */
    double t0 = 0, c0 = 0;
    size_t got = 0;
    for (unsigned epoch = 0; rc == PS_OK && epoch < 2; epoch++) {
        t0 = now_s(), c0 = cpu_s();
        got = 0;
        rc = ps_pipeline_start_epoch(pl, epoch, 0);
        while (rc == PS_OK) {
            float *x;
            int32_t *y;
            size_t nb = 0;
            rc = ps_pipeline_next(pl, &x, &y, &nb, err, sizeof err);
            if (nb == 0) break;
            got += nb;
        }
    }
    double secs = now_s() - t0, cpu = cpu_s() - c0;
    if (rc == PS_OK) {
        printf("%s: %zu records -> %zux%zux%zu, %u thread%s: %.0f records/s (%.0f per thread), "
               "%.2f s; %.2f CPU s: %.0f records per CPU second\n",
               src->format, got, oh, ow, oc, threads, threads == 1 ? "" : "s",
               secs > 0 ? (double)got / secs : 0, secs > 0 ? (double)got / secs / threads : 0,
               secs, cpu, cpu > 0 ? (double)got / cpu : 0);
        char first[512];
        uint64_t skipped = ps_pipeline_skipped(pl, first, sizeof first);
        if (skipped) printf("skipped: %llu records, the first: %s\n", (unsigned long long)skipped,
                            first);
    } else {
        fprintf(stderr, "psctl data bench: %s\n", err);
    }
    ps_pipeline_close(pl);
    free(recs);
    ps_sample_free(&s);
    ps_prep_free(prep);
    ps_source_close(src);
    ps_dataset_free(&mem);
    ps_data_spec_free(&spec);
    return rc == PS_OK ? 0 : 1;
}

/* --classes "0,6" -> keep[c] = new label + 1 (0: dropped). */
static int parse_classes(const char *text, int32_t *keep, size_t n, char *err, size_t errlen) {
    if (!text[0]) {
        for (size_t c = 0; c < n; c++) keep[c] = (int32_t)c + 1;
        return PS_OK;
    }
    memset(keep, 0, n * sizeof *keep);
    const char *p = text;
    while (*p) {
        char *end;
        long c = strtol(p, &end, 10);
        if (end == p || c < 0 || (size_t)c >= n || (*end && *end != ',')) {
            snprintf(err, errlen, "--classes: '%s' is not a list of class numbers below %zu", text, n);
            return PS_EINVAL;
        }
        keep[c] = 1;
        p = *end ? end + 1 : end;
    }
    int32_t next = 1;
    for (size_t c = 0; c < n; c++)
        if (keep[c]) keep[c] = next++;
    return PS_OK;
}

static int write_file(const char *path, const void *buf, size_t len, char *err, size_t errlen) {
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(buf, 1, len, f) == len;
    if (f && fclose(f) != 0) ok = false;
    if (!ok) snprintf(err, errlen, "%.1000s: %s", path, strerror(errno));
    return ok ? PS_OK : PS_EIO;
}

/* A record as 8-bit pixels of the asked size and channels. */
static int to_pixels(const data_opts *o, const ps_sample *s, size_t oh, size_t ow, float **tmp,
                     uint8_t **px, size_t *h, size_t *w, size_t *c) {
    size_t ic = s->c, oc = o->channels ? (size_t)o->channels : ic;
    *h = oh ? oh : s->h, *w = ow ? ow : s->w, *c = oc;
    float *r = realloc(*tmp, *h * *w * ic * sizeof *r);
    uint8_t *p = realloc(*px, *h * *w * oc);
    if (r) *tmp = r;
    if (p) *px = p;
    if (!r || !p) return PS_ENOMEM;
    if (*h != s->h || *w != s->w)
        ps_resize_bilinear(s->x, s->h, s->w, ic, r, *h, *w);
    else
        memcpy(r, s->x, *h * *w * ic * sizeof *r);
    for (size_t i = 0; i < *h * *w; i++)
        for (size_t k = 0; k < oc; k++) {
            float v = ic == oc  ? r[i * ic + k]
                      : ic == 1 ? r[i]
                                : 0.299f * r[i * ic] + 0.587f * r[i * ic + 1] + 0.114f * r[i * ic + 2];
            v = roundf(v);
            p[i * oc + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    return PS_OK;
}

static int convert(const data_opts *o, const char *path, const char *dest) {
    ps_data_spec spec;
    ps_dataset mem = {0};
    ps_source *src = NULL;
    ps_sample s = {0};
    char err[1200] = "";
    float *tmp = NULL;
    uint8_t *px = NULL, *enc = NULL;
    FILE **files = NULL;
    int32_t *keep = NULL;
    bool folder = strcmp(o->to, "png") == 0 || strcmp(o->to, "jpeg") == 0;
    bool tfr = strcmp(o->to, "tfrecord") == 0;
    bool jpeg = strcmp(o->to, "jpeg") == 0 || (tfr && strcmp(o->image, "jpeg") == 0);
    bool raw = tfr && strcmp(o->image, "raw") == 0;
    size_t oh = 0, ow = 0, written = 0;
    if (!folder && !tfr) {
        fprintf(stderr, "psctl data convert: --to png, jpeg or tfrecord\n");
        return 2;
    }
    if (tfr && !raw && strcmp(o->image, "png") && strcmp(o->image, "jpeg")) {
        fprintf(stderr, "psctl data convert: --image png, jpeg or raw\n");
        return 2;
    }
    if (o->size[0] && (sscanf(o->size, "%zux%zu", &oh, &ow) != 2 || !oh || !ow || oh > 65536 ||
                       ow > 65536)) {
        fprintf(stderr, "psctl data convert: --size takes HxW, e.g. 224x224\n");
        return 2;
    }
    int rc = open_any(path, o->test, &spec, &mem, &src, err, sizeof err);
    size_t nclass = src && src->num_classes > 0 ? (size_t)src->num_classes : 65536;
    if (rc == PS_OK && !(keep = malloc(nclass * sizeof *keep))) rc = PS_ENOMEM;
    if (rc == PS_OK && (rc = parse_classes(o->classes, keep, nclass, err, sizeof err)) != PS_OK) {
        fprintf(stderr, "psctl data convert: %s\n", err);
        rc = 2;
        goto out;
    }
    if (rc == PS_OK && mkdir(dest, 0755) != 0 && folder) {
        snprintf(err, sizeof err, "%s: %s", dest, strerror(errno));
        rc = PS_EIO;
    }
    if (rc == PS_OK && tfr) {
        files = calloc((size_t)o->shards, sizeof *files);
        rmdir(dest); /* made above; a TFRecord DEST is a file */
        for (long k = 0; files && k < o->shards && rc == PS_OK; k++) {
            char name[4200];
            if (o->shards == 1)
                snprintf(name, sizeof name, "%s", dest);
            else
                snprintf(name, sizeof name, "%s-%05ld-of-%05ld", dest, k, o->shards);
            if (!(files[k] = fopen(name, "wb"))) {
                snprintf(err, sizeof err, "%.1000s: %s", name, strerror(errno));
                rc = PS_EIO;
            }
        }
        if (!files) rc = PS_ENOMEM;
    }
    for (size_t i = 0; rc == PS_OK && i < src->n && (!o->max || written < (size_t)o->max); i++) {
        if ((rc = ps_source_read(src, i, &s, err, sizeof err)) != PS_OK) break;
        if (s.label < 0 || (size_t)s.label >= nclass || !keep[s.label]) continue;
        int32_t label = keep[s.label] - 1;
        size_t h, w, c;
        if ((rc = to_pixels(o, &s, oh, ow, &tmp, &px, &h, &w, &c)) != PS_OK) break;
        size_t len = 0;
        free(enc);
        enc = NULL;
        if (c != 1 && c != 3 && !raw) {
            snprintf(err, sizeof err, "record %zu has %zu channels: images take 1 or 3", i, c);
            rc = PS_EINVAL;
            break;
        }
        if (raw) {
            len = h * w * c;
            if (!(enc = malloc(len))) rc = PS_ENOMEM;
            else memcpy(enc, px, len);
        } else if (jpeg) {
            rc = ps_image_encode_jpeg(px, h, w, c, (int)o->quality, &enc, &len, err, sizeof err);
        } else {
            rc = ps_image_encode_png(px, h, w, c, &enc, &len, err, sizeof err);
        }
        if (rc != PS_OK) break;
        if (folder) {
            char dir[4200], file[4300];
            if (src->classes)
                snprintf(dir, sizeof dir, "%s/%s", dest, src->classes[s.label]);
            else
                snprintf(dir, sizeof dir, "%s/%02d", dest, (int)s.label);
            if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
                snprintf(err, sizeof err, "%.1000s: %s", dir, strerror(errno));
                rc = PS_EIO;
                break;
            }
            snprintf(file, sizeof file, "%s/%06zu.%s", dir, i, jpeg ? "jpg" : "png");
            rc = write_file(file, enc, len, err, sizeof err);
        } else {
            ps_example_builder *b = ps_example_builder_new();
            int64_t lab = label, dims[3] = {(int64_t)h, (int64_t)w, (int64_t)c};
            uint8_t *rec = NULL;
            size_t rlen = 0;
            rc = b ? PS_OK : PS_ENOMEM;
            if (rc == PS_OK) rc = ps_example_add_bytes(b, "image", enc, len);
            if (rc == PS_OK) rc = ps_example_add_int64s(b, "label", &lab, 1);
            if (rc == PS_OK) rc = ps_example_add_int64s(b, "shape", dims, 3);
            if (rc == PS_OK) rc = ps_example_serialize(b, &rec, &rlen);
            if (rc == PS_OK &&
                ps_tfrecord_write(files[written % (size_t)o->shards], rec, rlen) != PS_OK) {
                snprintf(err, sizeof err, "%s: write failed", dest);
                rc = PS_EIO;
            }
            free(rec);
            ps_example_builder_free(b);
        }
        written++;
    }
    for (long k = 0; files && k < o->shards; k++)
        if (files[k] && fclose(files[k]) != 0 && rc == PS_OK) {
            snprintf(err, sizeof err, "%s: %s", dest, strerror(errno));
            rc = PS_EIO;
        }
    if (rc == PS_OK)
        printf("wrote %zu records to %s (%s%s)\n", written, dest, o->to,
               tfr ? (raw ? ", raw uint8 images" : jpeg ? ", JPEG images" : ", PNG images") : "");
out:
    if (rc != PS_OK && rc != 2) fprintf(stderr, "psctl data convert: %s\n", err);
    free(files), free(keep), free(tmp), free(px), free(enc);
    ps_sample_free(&s);
    ps_source_close(src);
    ps_dataset_free(&mem);
    ps_data_spec_free(&spec);
    return rc == PS_OK ? 0 : rc == 2 ? 2 : 1;
}

int psctl_data_main(int argc, char **argv) {
    data_opts o = {0};
    char err[1200];
    int first = argc;
    int rc = ps_options_defaults(table, N_OPTIONS, &o, err, sizeof err);
    if (rc == PS_OK)
        rc = ps_options_parse_args(table, N_OPTIONS, argc, argv, &o, NULL, "psctl data",
                                   PS_OPTIONS_ARGS, &first, err, sizeof err);
    if (rc == PS_OPTIONS_HELP || rc == PS_OPTIONS_HELP_MAN) {
        if (rc == PS_OPTIONS_HELP)
            usage(stdout);
        else
            ps_options_help_man(table, N_OPTIONS, exits, N_EXITS, stdout);
        return 0;
    }
    if (rc != PS_OK) {
        fprintf(stderr, "psctl data: %s\n", err);
        return 2;
    }
    int nargs = argc - first;
    const char *sub = nargs > 0 ? argv[first] : "";
    if (strcmp(sub, "inspect") == 0 && nargs == 2) return inspect(&o, argv[first + 1]);
    if (strcmp(sub, "bench") == 0 && nargs == 2) return bench(&o, argv[first + 1]);
    if (strcmp(sub, "convert") == 0 && nargs == 3)
        return convert(&o, argv[first + 1], argv[first + 2]);
    if (strcmp(sub, "synth-clicks") == 0 && nargs == 1)
        return psctl_data_synth_clicks(o.rows, o.seed, o.out);
    fprintf(stderr, "psctl data: %s\n", nargs == 0 ? "inspect, bench, convert or synth-clicks"
                                                   : "wrong command or number of arguments");
    usage(stderr);
    return 2;
}
