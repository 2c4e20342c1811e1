/* tf.train.Example (example.h) over protobuf-c's generated code. */
#include "example.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example.pb-c.h"
#include "ps_error.h"

struct ps_example {
    Tftrain__Example *msg; /* owned: protobuf-c's unpacked tree */
};

int ps_example_parse(const uint8_t *buf, size_t len, ps_example **out, char *err, size_t errlen) {
    *out = NULL;
    Tftrain__Example *m = tftrain__example__unpack(NULL, len, buf);
    if (!m) {
        snprintf(err, errlen, "not a tf.train.Example (protobuf decoding failed)");
        return PS_EFORMAT;
    }
    const Tftrain__Features *fs = m->features;
    for (size_t i = 0; fs && i < fs->n_feature; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(fs->feature[i]->key, fs->feature[j]->key) == 0) {
                snprintf(err, errlen, "the feature \"%.64s\" is given twice", fs->feature[i]->key);
                tftrain__example__free_unpacked(m, NULL);
                return PS_EFORMAT;
            }
    ps_example *e = malloc(sizeof *e);
    if (!e) {
        tftrain__example__free_unpacked(m, NULL);
        return PS_ENOMEM;
    }
    e->msg = m;
    *out = e;
    return PS_OK;
}

void ps_example_free(ps_example *e) {
    if (!e) return;
    tftrain__example__free_unpacked(e->msg, NULL);
    free(e);
}

ps_feature ps_example_feature(const ps_example *e, const char *key) {
    ps_feature f = {.kind = PS_FEATURE_NONE};
    const Tftrain__Features *fs = e->msg->features;
    for (size_t i = 0; fs && i < fs->n_feature; i++) {
        const Tftrain__FeatureEntry *en = fs->feature[i];
        if (strcmp(en->key, key) != 0 || !en->value) continue;
        const Tftrain__Feature *v = en->value;
        switch (v->kind_case) {
        case TFTRAIN__FEATURE__KIND_BYTES_LIST:
            f.kind = PS_FEATURE_BYTES, f.n = v->bytes_list->n_value, f.handle = v->bytes_list;
            break;
        case TFTRAIN__FEATURE__KIND_FLOAT_LIST:
            f.kind = PS_FEATURE_FLOAT, f.n = v->float_list->n_value, f.floats = v->float_list->value;
            break;
        case TFTRAIN__FEATURE__KIND_INT64_LIST:
            f.kind = PS_FEATURE_INT64, f.n = v->int64_list->n_value, f.int64s = v->int64_list->value;
            break;
        default:
            break;
        }
        break;
    }
    return f;
}

void ps_feature_bytes(const ps_feature *f, size_t i, const uint8_t **data, size_t *len) {
    const Tftrain__BytesList *l = f->handle;
    *data = l->value[i].data;
    *len = l->value[i].len;
}

/* ---- building ---------------------------------------------------------------- */

typedef struct {
    char *key;
    ps_feature_kind kind;
    void *data; /* the bytes, or the n values */
    size_t n;   /* bytes: the length */
} entry;

struct ps_example_builder {
    entry *e;
    size_t n, cap;
};

ps_example_builder *ps_example_builder_new(void) {
    return calloc(1, sizeof(ps_example_builder));
}

void ps_example_builder_free(ps_example_builder *b) {
    if (!b) return;
    for (size_t i = 0; i < b->n; i++)
        free(b->e[i].key), free(b->e[i].data);
    free(b->e);
    free(b);
}

static int add(ps_example_builder *b, const char *key, ps_feature_kind kind, const void *data,
               size_t bytes, size_t n) {
    for (size_t i = 0; i < b->n; i++)
        if (strcmp(b->e[i].key, key) == 0) return PS_EINVAL;
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 4;
        entry *e = realloc(b->e, cap * sizeof *e);
        if (!e) return PS_ENOMEM;
        b->e = e, b->cap = cap;
    }
    entry en = {.key = strdup(key), .kind = kind, .data = malloc(bytes ? bytes : 1), .n = n};
    if (!en.key || !en.data) {
        free(en.key), free(en.data);
        return PS_ENOMEM;
    }
    if (bytes) memcpy(en.data, data, bytes);
    b->e[b->n++] = en;
    return PS_OK;
}

int ps_example_add_bytes(ps_example_builder *b, const char *key, const void *data, size_t len) {
    return add(b, key, PS_FEATURE_BYTES, data, len, len);
}

int ps_example_add_floats(ps_example_builder *b, const char *key, const float *v, size_t n) {
    return add(b, key, PS_FEATURE_FLOAT, v, n * sizeof *v, n);
}

int ps_example_add_int64s(ps_example_builder *b, const char *key, const int64_t *v, size_t n) {
    return add(b, key, PS_FEATURE_INT64, v, n * sizeof *v, n);
}

int ps_example_serialize(const ps_example_builder *b, uint8_t **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    size_t n = b->n;
    /* one block per kind of generated struct, filled in place: nothing to free but them */
    Tftrain__FeatureEntry *en = calloc(n ? n : 1, sizeof *en);
    Tftrain__FeatureEntry **enp = calloc(n ? n : 1, sizeof *enp);
    Tftrain__Feature *fe = calloc(n ? n : 1, sizeof *fe);
    Tftrain__BytesList *bl = calloc(n ? n : 1, sizeof *bl);
    ProtobufCBinaryData *bd = calloc(n ? n : 1, sizeof *bd);
    Tftrain__FloatList *fl = calloc(n ? n : 1, sizeof *fl);
    Tftrain__Int64List *il = calloc(n ? n : 1, sizeof *il);
    int rc = PS_ENOMEM;
    if (!en || !enp || !fe || !bl || !bd || !fl || !il) goto out;
    for (size_t i = 0; i < n; i++) {
        const entry *s = &b->e[i];
        tftrain__feature_entry__init(&en[i]);
        tftrain__feature__init(&fe[i]);
        en[i].key = s->key;
        en[i].value = &fe[i];
        enp[i] = &en[i];
        if (s->kind == PS_FEATURE_BYTES) {
            tftrain__bytes_list__init(&bl[i]);
            bd[i].data = s->data, bd[i].len = s->n;
            bl[i].n_value = 1, bl[i].value = &bd[i];
            fe[i].kind_case = TFTRAIN__FEATURE__KIND_BYTES_LIST, fe[i].bytes_list = &bl[i];
        } else if (s->kind == PS_FEATURE_FLOAT) {
            tftrain__float_list__init(&fl[i]);
            fl[i].n_value = s->n, fl[i].value = s->data;
            fe[i].kind_case = TFTRAIN__FEATURE__KIND_FLOAT_LIST, fe[i].float_list = &fl[i];
        } else {
            tftrain__int64_list__init(&il[i]);
            il[i].n_value = s->n, il[i].value = s->data;
            fe[i].kind_case = TFTRAIN__FEATURE__KIND_INT64_LIST, fe[i].int64_list = &il[i];
        }
    }
    Tftrain__Features fs = TFTRAIN__FEATURES__INIT;
    fs.n_feature = n, fs.feature = enp;
    Tftrain__Example ex = TFTRAIN__EXAMPLE__INIT;
    ex.features = &fs;
    size_t size = tftrain__example__get_packed_size(&ex);
    uint8_t *out = malloc(size ? size : 1);
    if (!out) goto out;
    tftrain__example__pack(&ex, out);
    *buf = out, *len = size;
    rc = PS_OK;
out:
    free(en), free(enp), free(fe), free(bl), free(bd), free(fl), free(il);
    return rc;
}
