/* 64-bit ids from a table's fields (the id columns of a CSV/TSV source):
 * unsigned decimal integers as written, or any text hashed.
 *
 * The hash, fixed: FNV-1a 64 over the field's bytes, started from the FNV
 * offset basis (0xcbf29ce484222325) xor (position + 1) * 0x9e3779b97f4a7c15,
 * then splitmix64's finalizer. position is the column's place in the spec's
 * "id_columns" (from 0), so equal text in two id columns gives two ids.
 *
 * Leading and trailing spaces are not part of an id. An empty field is the
 * column's missing id, ps_id_missing(position): the hash of the empty text,
 * in either mode. */
#ifndef PS_IDS_H
#define PS_IDS_H

#include <stddef.h>
#include <stdint.h>

/* The text of s (len bytes) hashed for id column `position`. */
uint64_t ps_id_hash(const char *s, size_t len, size_t position);

/* Id column `position`'s id for an empty field. */
uint64_t ps_id_missing(size_t position);

/* Parses field (NUL-terminated) as an unsigned decimal integer below 2^64:
 * digits only (no sign, no exponent, no hex), spaces around allowed, empty:
 * the missing id. Returns PS_OK or PS_EFORMAT. */
int ps_id_parse(const char *field, size_t position, uint64_t *out);

/* field's id for column `position`, hashed or parsed (ps_id_parse's result). */
int ps_id_of(const char *field, size_t position, int hash, uint64_t *out);

#endif
