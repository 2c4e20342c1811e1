/* UTF-8 checks for text that crosses a trust boundary: protobuf string fields,
 * variable names, error messages, JSON output. */
#ifndef PS_UTF8_H
#define PS_UTF8_H

#include <stddef.h>

/* Checks that s[0..n) is well-formed UTF-8 (RFC 3629: no overlong encodings, no
 * surrogates U+D800..U+DFFF, nothing above U+10FFFF, no truncated sequence) and has
 * no NUL byte. Returns n when it is; otherwise the offset of the first bad byte.
 * *why (may be NULL) gets a static phrase naming the problem ("" when valid). */
size_t ps_utf8_check(const char *s, size_t n, const char **why);

/* Copies the NUL-terminated string in into out[outlen] (outlen > 0) as valid UTF-8:
 * each byte that does not start a well-formed sequence becomes U+FFFD, and a
 * sequence that would not fit whole is left out. Returns out (always terminated). */
char *ps_utf8_sanitize(const char *in, char *out, size_t outlen);

#endif
