/* What the option and exit status tables print: --help's lists, and the same as scdoc
 * for the man pages (--help-man; docs/man/gen_man.py puts it in the pages). */
#include "options.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* Prints text from column `col` on, wrapping at word boundaries before column 80;
 * continuation lines start at column `indent`. Returns the column it ended at. */
static size_t print_wrapped(FILE *out, const char *text, size_t col, size_t indent) {
    for (const char *p = text; *p;) {
        size_t word = strcspn(p, " ");
        if (col > indent && col + 1 + word > 79) {
            fprintf(out, "\n%*s", (int)indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', out);
            col++;
        }
        fprintf(out, "%.*s", (int)word, p);
        col += word;
        p += word;
        while (*p == ' ')
            p++;
    }
    return col;
}

void ps_options_usage(const ps_option *t, size_t n, FILE *out) {
    for (size_t i = 0; i < n; i++) {
        ps_option r = ps_option_resolve(&t[i]);
        char left[64], line[1024];
        const char *meta = r.type == PS_OPTION_CHOICE ? r.choices : r.metavar;
        if (r.type == PS_OPTION_FLAG)
            snprintf(left, sizeof left, "--%s", r.name);
        else
            snprintf(left, sizeof left, "--%s %s", r.name, meta ? meta : "VALUE");
        if (strlen(left) > 24) /* a long flag gets a line of its own */
            fprintf(out, "  %s\n%27s", left, "");
        else
            fprintf(out, "  %-24s ", left);
        const char *shown = r.default_text ? r.default_text : r.def;
        if (shown && *shown)
            snprintf(line, sizeof line, "%s [default: %s]", r.help, shown);
        else
            snprintf(line, sizeof line, "%s", r.help);
        print_wrapped(out, line, 27, 27);
        fprintf(out, "\n");
    }
    fprintf(out, "  %-24s %s\n", "-h, --help", "show this help");
    fprintf(out, "  %-24s %s\n", "--help-man", "print the options and exit statuses as scdoc");
}

/* The code as shown: "2", or "other" for PS_EXIT_OTHER. */
static void code_name(int code, char *buf, size_t n) {
    if (code == PS_EXIT_OTHER)
        snprintf(buf, n, "other");
    else
        snprintf(buf, n, "%d", code);
}

void ps_exit_status_usage(const ps_exit_status *e, size_t n, FILE *out) {
    fprintf(out, "exit status:\n");
    for (size_t i = 0; i < n; i++) {
        char code[16];
        code_name(e[i].code, code, sizeof code);
        fprintf(out, "  %-5s ", code);
        print_wrapped(out, e[i].meaning, 8, 8);
        fprintf(out, "\n");
    }
}

/* ---- scdoc (--help-man) ---------------------------------------------------------- */

/* 1 when c may stand right before a --flag or a metavar set in bold or italics. */
static int opens_markup(const char *text, const char *p) {
    return p == text || strchr(" (\"/:[", p[-1]) != NULL;
}

/* Writes the n bytes of plain text at p as scdoc: *, _ and \ escaped, a --flag in bold
 * and a whole-word meta (may be NULL) in italics. text: the paragraph p is in. */
static void put_scdoc(FILE *out, const char *text, const char *p, size_t n, const char *meta) {
    size_t ml = meta ? strlen(meta) : 0;
    for (const char *end = p + n; p < end;) {
        if (end - p > 2 && p[0] == '-' && p[1] == '-' && islower((unsigned char)p[2]) &&
            opens_markup(text, p)) {
            size_t k = 2 + strspn(p + 2, "abcdefghijklmnopqrstuvwxyz0123456789-");
            k = k > (size_t)(end - p) ? (size_t)(end - p) : k;
            fprintf(out, "*%.*s*", (int)k, p);
            p += k;
        } else if (ml && (size_t)(end - p) >= ml && strncmp(p, meta, ml) == 0 &&
                   opens_markup(text, p) && !isalnum((unsigned char)p[ml]) && p[ml] != '_') {
            fprintf(out, "_%s_", meta);
            p += ml;
        } else {
            if (strchr("*_\\", *p)) fputc('\\', out);
            fputc(*p++, out);
        }
    }
}

/* 1 when a line of a scdoc paragraph may start with the word at p: not one that scdoc
 * would read as a list or a table (-1, | ...) or roff as a request (.x, 'x). A --flag is
 * fine: it is set in bold ("*--flag*"). */
static int can_start_line(const char *p) {
    if (p[0] == '-') return p[1] == '-' && islower((unsigned char)p[2]);
    return !strchr(".'|#`", p[0]);
}

/* Writes text as the rest of a tab-indented scdoc paragraph whose line is at column col,
 * wrapping before column 80 but never before a word that scdoc or roff would read as
 * markup at a line's start. Returns the column it ended at. */
static size_t put_scdoc_words(FILE *out, const char *text, size_t col, const char *meta) {
    for (const char *p = text; *p;) {
        size_t word = strcspn(p, " ");
        if (col > 8 && col + 1 + word > 79 && can_start_line(p)) {
            fprintf(out, "\n\t");
            col = 8;
        } else if (col > 8) {
            fputc(' ', out);
            col++;
        }
        put_scdoc(out, text, p, word, meta);
        col += word;
        p += word;
        while (*p == ' ')
            p++;
    }
    return col;
}

/* 1 when s ends a sentence: its last character is '.', '!' or '?'. */
static int ends_sentence(const char *s) {
    size_t n = strlen(s);
    return n > 0 && strchr(".!?", s[n - 1]);
}

/* Writes a flag's value as the man page shows it: each '|'-separated alternative in
 * italics when it is a placeholder (no lower case: FILE, 0,1,...), else as written
 * with a trailing ":PLACEHOLDER" in italics (cuda:N). */
static void put_scdoc_meta(FILE *out, const char *meta) {
    for (const char *p = meta; *p;) {
        size_t n = strcspn(p, "|");
        int lower = 0;
        for (size_t i = 0; i < n; i++)
            lower |= islower((unsigned char)p[i]) != 0;
        const char *colon = memchr(p, ':', n);
        if (!lower) {
            fputc('_', out);
            put_scdoc(out, p, p, n, NULL);
            fputc('_', out);
        } else if (colon &&
                   strspn(colon + 1, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") == n - 1 - (size_t)(colon - p)) {
            put_scdoc(out, p, p, (size_t)(colon - p) + 1, NULL);
            fprintf(out, "_%.*s_", (int)(n - 1 - (size_t)(colon - p)), colon + 1);
        } else {
            put_scdoc(out, p, p, n, NULL);
        }
        p += n;
        if (*p == '|') fputc(*p++, out);
    }
}

/* Writes "*--name* VALUE" (no VALUE for a flag without one). */
static void put_scdoc_flag(FILE *out, const ps_option *r) {
    fprintf(out, "*--%s*", r->name);
    if (r->type == PS_OPTION_FLAG) return;
    fputc(' ', out);
    put_scdoc_meta(out, r->type == PS_OPTION_CHOICE ? r->choices
                        : r->metavar                ? r->metavar
                                                    : "VALUE");
}

/* Writes one option's scdoc entry: the flag line, then a paragraph with its help, its doc
 * and "Default: X." */
static void put_scdoc_option(FILE *out, const ps_option *r) {
    put_scdoc_flag(out, r);
    /* the one metavar set in italics in the text: a single upper-case word */
    const char *meta =
        r->type != PS_OPTION_CHOICE && r->metavar &&
                strspn(r->metavar, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") == strlen(r->metavar)
            ? r->metavar
            : NULL;
    const char *doc = r->doc ? r->doc : "";
    const char *shown = r->default_text ? r->default_text : r->def ? r->def : "";
    size_t len = strlen(r->help) + strlen(doc) + strlen(shown) + 32;
    char *text = malloc(len);
    if (!text) {
        fprintf(out, "\n\t(out of memory)\n\n");
        return;
    }
    const char *sep = !*doc ? "" : ends_sentence(r->help) ? " " : ". ";
    int n = snprintf(text, len, "%s%s%s", r->help, sep, doc);
    if (!ends_sentence(text)) n += snprintf(text + n, len - (size_t)n, ".");
    if (*shown) snprintf(text + n, len - (size_t)n, " Default: %s.", shown);
    fprintf(out, "\n\t");
    put_scdoc_words(out, text, 8, meta);
    fprintf(out, "\n\n");
    free(text);
}

void ps_options_help_man(const ps_option *t, size_t n, const ps_exit_status *e, size_t ne,
                         FILE *out) {
    fprintf(out, "%%%%options\n");
    for (size_t i = 0; i < n; i++) {
        ps_option r = ps_option_resolve(&t[i]);
        put_scdoc_option(out, &r);
    }
    fprintf(out, "*-h*, *--help*\n\tshow the options and exit.\n\n"
                 "*--help-man*\n\tprint the options and exit statuses as scdoc (the source of "
                 "this\n\tsection of the man page) and exit.\n");
    fprintf(out, "%%%%exit-status\n");
    for (size_t i = 0; i < ne; i++) {
        char code[16];
        code_name(e[i].code, code, sizeof code);
        fprintf(out, "%s*%s*\n\t", i ? "\n" : "", code);
        put_scdoc_words(out, e[i].meaning, 8, NULL);
        fprintf(out, ".\n");
    }
    fprintf(out, "%%%%synopsis\n");
    for (size_t i = 0; i < n; i++) {
        ps_option r = ps_option_resolve(&t[i]);
        fprintf(out, "%s[", i ? " " : "");
        put_scdoc_flag(out, &r);
        fputc(']', out);
    }
    fprintf(out, "\n");
}
