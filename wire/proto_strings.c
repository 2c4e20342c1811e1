/* Checks the string fields of a packed protobuf message on the wire bytes,
 * guided by protobuf-c's descriptors (see proto_strings.h). */
#include "proto_strings.h"

#include <stdio.h>
#include <string.h>

#include "ps_error.h"
#include "utf8.h"

#define MAX_DEPTH 16    /* ps.proto nests 4 deep; deeper is not ours */
#define MAX_COUNTED 64u /* fields whose repeats are numbered in the reason */

/* Reads a varint at *p (< end). Returns 0 when it runs past end or 10 bytes. */
static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    uint64_t out = 0;
    for (unsigned shift = 0; shift < 70 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        out |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = out;
            return 1;
        }
    }
    return 0;
}

/* Appends ".name" or ".name[i]" to path (at used bytes). Returns the new length. */
static size_t path_push(char *path, size_t cap, size_t used, const char *name, int repeated,
                        unsigned index) {
    int n = repeated ? snprintf(path + used, cap - used, "%s%s[%u]", used ? "." : "", name, index)
                     : snprintf(path + used, cap - used, "%s%s", used ? "." : "", name);
    if (n < 0) return used;
    return used + (size_t)n < cap ? used + (size_t)n : cap - 1;
}

static int walk(const ProtobufCMessageDescriptor *desc, const uint8_t *p, const uint8_t *end,
                unsigned depth, char *path, size_t cap, size_t used, char *err, size_t errlen) {
    unsigned counts[MAX_COUNTED] = {0};
    if (depth > MAX_DEPTH) {
        snprintf(err, errlen, "%s: messages nested too deep", used ? path : "message");
        return PS_EPROTO;
    }
    while (p < end) {
        uint64_t key, len;
        if (!read_varint(&p, end, &key)) goto malformed;
        unsigned wire = (unsigned)(key & 7u);
        uint64_t number = key >> 3;
        switch (wire) {
        case 0: /* varint */
            if (!read_varint(&p, end, &len)) goto malformed;
            continue;
        case 1: /* 64-bit */
            if (end - p < 8) goto malformed;
            p += 8;
            continue;
        case 5: /* 32-bit */
            if (end - p < 4) goto malformed;
            p += 4;
            continue;
        case 2: /* length-delimited: string, bytes, sub-message, packed */
            if (!read_varint(&p, end, &len) || len > (uint64_t)(end - p)) goto malformed;
            break;
        default: /* groups: not in proto3, not in ps.proto */
            goto malformed;
        }
        const uint8_t *val = p;
        p += len;
        const ProtobufCFieldDescriptor *f =
            number <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(desc, (unsigned)number)
                                 : NULL;
        if (!f || (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE))
            continue;
        size_t fi = (size_t)(f - desc->fields);
        unsigned index = fi < MAX_COUNTED ? counts[fi]++ : 0;
        int repeated = f->label == PROTOBUF_C_LABEL_REPEATED && fi < MAX_COUNTED;
        size_t sub = path_push(path, cap, used, f->name, repeated, index);
        if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
            int rc = walk(f->descriptor, val, val + len, depth + 1, path, cap, sub, err, errlen);
            if (rc != PS_OK) return rc;
        } else {
            const char *why;
            size_t at = ps_utf8_check((const char *)val, (size_t)len, &why);
            if (at < len) {
                snprintf(err, errlen, "%s: not valid UTF-8 text (%s at byte %zu of %zu)", path, why,
                         at, (size_t)len);
                return PS_EPROTO;
            }
        }
        path[used] = '\0';
    }
    return PS_OK;
malformed:
    snprintf(err, errlen, "%s: malformed protobuf", used ? path : desc->short_name);
    return PS_EPROTO;
}

int ps_proto_check_strings(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                           char *err, size_t errlen) {
    char path[256] = "";
    return walk(desc, data, data + len, 0, path, sizeof path, 0, err, errlen);
}
