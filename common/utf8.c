/* UTF-8 validation (RFC 3629) and a sanitizer that replaces bad bytes (see utf8.h). */
#include "utf8.h"

#include <string.h>

/* Length of the well-formed sequence at s[0..n), or 0 (and *why) when there is none.
 * A NUL byte is refused too: C strings would cut the text there. */
static size_t seq_len(const unsigned char *s, size_t n, const char **why) {
    unsigned char b = s[0];
    if (b == 0) {
        *why = "NUL byte";
        return 0;
    }
    if (b < 0x80) return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (b >= 0xc2 && b <= 0xdf) {
        len = 2;
    } else if (b >= 0xe0 && b <= 0xef) {
        len = 3;
        if (b == 0xe0) lo = 0xa0; /* overlong below U+0800 */
        if (b == 0xed) hi = 0x9f; /* surrogates U+D800..U+DFFF */
    } else if (b >= 0xf0 && b <= 0xf4) {
        len = 4;
        if (b == 0xf0) lo = 0x90; /* overlong below U+10000 */
        if (b == 0xf4) hi = 0x8f; /* above U+10FFFF */
    } else {
        *why = b < 0xc2 && b >= 0xc0   ? "overlong encoding"
               : b >= 0x80 && b < 0xc0 ? "stray continuation byte"
                                       : "byte that never appears in UTF-8";
        return 0;
    }
    if (n < len) {
        *why = "truncated multibyte sequence";
        return 0;
    }
    if (s[1] < lo || s[1] > hi) {
        *why = (s[1] & 0xc0) != 0x80 ? "truncated multibyte sequence"
               : b == 0xed           ? "UTF-16 surrogate"
               : b == 0xf4           ? "code point above U+10FFFF"
                                     : "overlong encoding";
        return 0;
    }
    for (size_t i = 2; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            *why = "truncated multibyte sequence";
            return 0;
        }
    }
    return len;
}

size_t ps_utf8_check(const char *s, size_t n, const char **why) {
    const unsigned char *u = (const unsigned char *)s;
    const char *w = "";
    size_t i = 0;
    while (i < n) {
        size_t len = seq_len(u + i, n - i, &w);
        if (len == 0) break;
        i += len;
    }
    if (why) *why = i < n ? w : "";
    return i;
}

char *ps_utf8_sanitize(const char *in, char *out, size_t outlen) {
    static const char repl[] = "\xef\xbf\xbd"; /* U+FFFD */
    const unsigned char *u = (const unsigned char *)in;
    size_t n = strlen(in), i = 0, o = 0;
    const char *why;
    while (i < n) {
        size_t len = seq_len(u + i, n - i, &why);
        const char *src = len ? in + i : repl;
        size_t take = len ? len : 3;
        if (o + take >= outlen) break;
        memcpy(out + o, src, take);
        o += take;
        i += len ? len : 1;
    }
    out[o] = '\0';
    return out;
}
