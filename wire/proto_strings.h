/* The one check of text in received protobuf messages: every `string` field,
 * at any depth, must be valid UTF-8 without NUL (protobuf-c checks neither, and
 * once unpacked a string's length, and so an embedded NUL, is lost). */
#ifndef PS_PROTO_STRINGS_H
#define PS_PROTO_STRINGS_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

/* Walks the packed message data[0..len) with its descriptor, recursing into
 * sub-messages, and checks each string field's raw bytes with ps_utf8_check.
 * Unknown fields are skipped. Meant for bytes protobuf-c already unpacked.
 * Returns PS_OK, or PS_EPROTO with a reason naming the field (e.g.
 * "create_vars.vars[1].name: NUL byte at byte 3") in err. */
int ps_proto_check_strings(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                           char *err, size_t errlen);

#endif
