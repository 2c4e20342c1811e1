/* Table-driven option parsing and --help (see options.h). */
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"

/* Index of val in "a|b|c", or -1. */
static long choice_index(const char *choices, const char *val) {
    size_t len = strlen(val);
    long i = 0;
    for (const char *p = choices; *p; i++) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && strncmp(p, val, n) == 0) return i;
        if (!bar) break;
        p = bar + 1;
    }
    return -1;
}

int ps_options_set(const ps_option *o, void *cfg, const char *val, char *err, size_t errlen) {
    char *field = (char *)cfg + o->offset;
    long v;
    switch (o->type) {
    case PS_OPTION_STR:
        if (strlen(val) >= o->size) {
            snprintf(err, errlen, "--%s: value longer than %zu bytes", o->name, o->size - 1);
            return PS_EINVAL;
        }
        memcpy(field, val, strlen(val) + 1);
        return PS_OK;
    case PS_OPTION_CHOICE:
        v = choice_index(o->choices, val);
        if (v < 0) {
            snprintf(err, errlen, "--%s: '%s' is not one of %s", o->name, val, o->choices);
            return PS_EINVAL;
        }
        break;
    default: {
        char *end;
        errno = 0;
        v = strtol(val, &end, 10);
        if (errno || end == val || *end || v < o->min || v > o->max) {
            snprintf(err, errlen, "--%s: '%s' is not an integer in [%ld, %ld]", o->name, val,
                     o->min, o->max);
            return PS_EINVAL;
        }
    }
    }
    memcpy(field, &v, sizeof v);
    return PS_OK;
}

int ps_options_defaults(const ps_option *t, size_t n, void *cfg, char *err, size_t errlen) {
    for (size_t i = 0; i < n; i++)
        if (t[i].def && ps_options_set(&t[i], cfg, t[i].def, err, errlen) != PS_OK)
            return PS_EINVAL;
    return PS_OK;
}

const ps_option *ps_options_find(const ps_option *t, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0) return &t[i];
    return NULL;
}

int ps_options_parse(const ps_option *t, size_t n, int argc, char **argv, void *cfg,
                     unsigned char *given, const char *prog, char *err, size_t errlen) {
    struct option *longopts = calloc(n + 2, sizeof *longopts);
    if (!longopts) return PS_ENOMEM;
    for (size_t i = 0; i < n; i++)
        longopts[i] = (struct option){t[i].name, required_argument, NULL, (int)i + 1000};
    longopts[n] = (struct option){"help", no_argument, NULL, 'h'};
    optind = 1;
    opterr = 0;
    int c, rc = PS_OK;
    while (rc == PS_OK && (c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        if (c == 'h') {
            rc = 1;
        } else if (c == '?' || c == ':') {
            snprintf(err, errlen, "%s: %s (see %s --help)", argv[optind - 1],
                     c == ':' ? "needs a value" : "unknown option", prog);
            rc = PS_EINVAL;
        } else {
            size_t i = (size_t)(c - 1000);
            rc = ps_options_set(&t[i], cfg, optarg, err, errlen);
            if (given) given[i] = 1;
        }
    }
    if (rc == PS_OK && optind < argc) {
        snprintf(err, errlen, "unexpected argument '%s' (see %s --help)", argv[optind], prog);
        rc = PS_EINVAL;
    }
    free(longopts);
    return rc;
}

void ps_options_usage(const ps_option *t, size_t n, FILE *out) {
    for (size_t i = 0; i < n; i++) {
        char left[64];
        const char *meta = t[i].type == PS_OPTION_CHOICE ? t[i].choices : t[i].metavar;
        snprintf(left, sizeof left, "--%s %s", t[i].name, meta ? meta : "VALUE");
        fprintf(out, "  %-24s %s", left, t[i].help);
        if (t[i].def && *t[i].def) fprintf(out, " [default: %s]", t[i].def);
        fprintf(out, "\n");
    }
    fprintf(out, "  %-24s %s\n", "-h, --help", "show this help");
}
