/* tf.train.Example records (proto/example.proto): parsed into a read-only view
 * whose features are looked up by key, and built for the project's own
 * TFRecord writer. The protobuf types stay inside example.c. */
#ifndef PS_EXAMPLE_H
#define PS_EXAMPLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct ps_example ps_example;

typedef enum {
    PS_FEATURE_NONE = 0, /* the key is absent, or the feature holds no list */
    PS_FEATURE_BYTES,
    PS_FEATURE_FLOAT,
    PS_FEATURE_INT64
} ps_feature_kind;

/* One feature of a parsed example; the pointers are into it. */
typedef struct {
    ps_feature_kind kind;
    size_t n;              /* values in the list */
    const float *floats;   /* PS_FEATURE_FLOAT */
    const int64_t *int64s; /* PS_FEATURE_INT64 */
    const void *handle;    /* PS_FEATURE_BYTES: read with ps_feature_bytes */
} ps_feature;

/* Parses one serialised Example. Returns PS_OK, PS_EFORMAT (not an Example:
 * err says so; a key given twice is refused too) or PS_ENOMEM. Free with
 * ps_example_free. */
int ps_example_parse(const uint8_t *buf, size_t len, ps_example **out, char *err, size_t errlen);
void ps_example_free(ps_example *e);

/* The feature named key (kind PS_FEATURE_NONE when absent). */
ps_feature ps_example_feature(const ps_example *e, const char *key);
/* Value i of a bytes feature: *data and *len point into the example. */
void ps_feature_bytes(const ps_feature *f, size_t i, const uint8_t **data, size_t *len);

/* Building an Example: features are added in order (keys must differ), then
 * serialised. The builder copies what it is given. */
typedef struct ps_example_builder ps_example_builder;
ps_example_builder *ps_example_builder_new(void);
int ps_example_add_bytes(ps_example_builder *b, const char *key, const void *data, size_t len);
int ps_example_add_floats(ps_example_builder *b, const char *key, const float *v, size_t n);
int ps_example_add_int64s(ps_example_builder *b, const char *key, const int64_t *v, size_t n);
/* *buf is malloc'd (caller frees). Returns PS_OK or PS_ENOMEM. */
int ps_example_serialize(const ps_example_builder *b, uint8_t **buf, size_t *len);
void ps_example_builder_free(ps_example_builder *b);

#endif
