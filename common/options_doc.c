/* What the option and exit status tables print: --help's lists (see options.h). */
#include "options.h"

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
