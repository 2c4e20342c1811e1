/* Table-driven option parsing (see options.h); --help is options_doc.c. */
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
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

ps_option ps_option_resolve(const ps_option *o) {
    if (!o->like) return *o;
    ps_option r = ps_option_resolve(o->like);
    r.offset = o->offset;
    r.size = o->size;
    r.like = NULL;
    r.flags |= o->flags;
    if (o->def) r.def = o->def;
    if (o->flags & PS_OPTION_NO_DEFAULT) r.def = r.default_text = NULL;
    if (o->default_text) r.default_text = o->default_text;
    if (o->metavar) r.metavar = o->metavar;
    if (o->help) r.help = o->help, r.doc = NULL;
    if (o->doc) r.doc = o->doc;
    if (o->parse) r.parse = o->parse;
    return r;
}

/* Stores a resolved option's value. */
static int set_resolved(const ps_option *o, void *cfg, const char *val, char *err, size_t errlen) {
    char *field = (char *)cfg + o->offset;
    long v;
    switch (o->type) {
    case PS_OPTION_STR:
        if (strlen(val) >= o->size) {
            snprintf(err, errlen, "--%s needs at most %zu bytes, got %zu", o->name, o->size - 1,
                     strlen(val));
            return PS_EINVAL;
        }
        memcpy(field, val, strlen(val) + 1);
        return PS_OK;
    case PS_OPTION_ARG:
        if (o->min > 0 && !*val) {
            snprintf(err, errlen, "--%s needs a non-empty value, got ''", o->name);
            return PS_EINVAL;
        }
        memcpy(field, &val, sizeof val);
        return PS_OK;
    case PS_OPTION_FLAG: {
        int one = 1;
        memcpy(field, &one, sizeof one);
        return PS_OK;
    }
    case PS_OPTION_CUSTOM:
        return o->parse(o, cfg, val, err, errlen);
    case PS_OPTION_SECONDS: {
        char *end;
        errno = 0;
        double d = strtod(val, &end);
        int above = (o->flags & PS_OPTION_ABOVE_MIN) != 0;
        if (end == val || *end || errno || !isfinite(d) || d < (double)o->min ||
            (above && d <= (double)o->min) || d > (double)o->max) {
            snprintf(err, errlen, "--%s needs seconds %s %ld (at most %ld), got '%s'", o->name,
                     above ? ">" : ">=", o->min, o->max, val);
            return PS_EINVAL;
        }
        memcpy(field, &d, sizeof d);
        return PS_OK;
    }
    case PS_OPTION_CHOICE:
        v = choice_index(o->choices, val);
        if (v < 0) {
            snprintf(err, errlen, "--%s needs one of %s, got '%s'", o->name, o->choices, val);
            return PS_EINVAL;
        }
        break;
    default: {
        char *end;
        errno = 0;
        v = strtol(val, &end, 10);
        if (errno || end == val || *end || v < o->min || v > o->max) {
            snprintf(err, errlen, "--%s needs an integer from %ld to %ld, got '%s'", o->name,
                     o->min, o->max, val);
            return PS_EINVAL;
        }
    }
    }
    memcpy(field, &v, sizeof v);
    return PS_OK;
}

int ps_options_set(const ps_option *o, void *cfg, const char *val, char *err, size_t errlen) {
    ps_option r = ps_option_resolve(o);
    return set_resolved(&r, cfg, val, err, errlen);
}

int ps_options_defaults(const ps_option *t, size_t n, void *cfg, char *err, size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        ps_option r = ps_option_resolve(&t[i]);
        if (r.def && set_resolved(&r, cfg, r.def, err, errlen) != PS_OK) return PS_EINVAL;
    }
    return PS_OK;
}

const ps_option *ps_options_find(const ps_option *t, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(ps_option_resolve(&t[i]).name, name) == 0) return &t[i];
    return NULL;
}

int ps_options_parse_args(const ps_option *t, size_t n, int argc, char **argv, void *cfg,
                          unsigned char *given, const char *prog, int how, int *rest, char *err,
                          size_t errlen) {
    struct option *longopts = calloc(n + 3, sizeof *longopts);
    ps_option *r = calloc(n + 1, sizeof *r);
    if (!longopts || !r) {
        free(longopts);
        free(r);
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        r[i] = ps_option_resolve(&t[i]);
        longopts[i] = (struct option){r[i].name,
                                      r[i].type == PS_OPTION_FLAG ? no_argument : required_argument,
                                      NULL, (int)i + 1000};
    }
    longopts[n] = (struct option){"help", no_argument, NULL, 'h'};
    longopts[n + 1] = (struct option){"help-man", no_argument, NULL, 'M'};
    optind = 0; /* glibc: start afresh (the '+' of optstring is read then) */
    opterr = 0;
    const char *last_value = NULL;
    int c, rc = PS_OK;
    /* "+": stop at the first non-option; ":": a missing value is reported as ':' */
    const char *optstring = how & PS_OPTIONS_IN_ORDER ? "+:h" : ":h";
    while (rc == PS_OK && (c = getopt_long(argc, argv, optstring, longopts, NULL)) != -1) {
        if (c == 'h' || c == 'M') {
            rc = c == 'h' ? PS_OPTIONS_HELP : PS_OPTIONS_HELP_MAN;
        } else if (c == '?' || c == ':') {
            if (c == ':')
                snprintf(err, errlen, "%s needs a value (see %s --help)", argv[optind - 1], prog);
            else if (optopt > 0 && optopt < 1000 && optopt != 'h' && optopt != 'M')
                snprintf(err, errlen, "unknown option '-%c' (see %s --help)", optopt, prog);
            else
                snprintf(err, errlen, "unknown option '%s' (see %s --help)", argv[optind - 1],
                         prog);
            rc = PS_EINVAL;
        } else {
            size_t i = (size_t)(c - 1000);
            rc = set_resolved(&r[i], cfg, optarg ? optarg : "", err, errlen);
            last_value = optarg;
            if (given) given[i] = 1;
        }
    }
    /* getopt_long consumed a "--" separator (not a flag's value "--") if it is the
     * argument just before optind. */
    int separated =
        optind > 1 && strcmp(argv[optind - 1], "--") == 0 && argv[optind - 1] != last_value;
    if (rc == PS_OK && optind < argc &&
        (!(how & PS_OPTIONS_ARGS) || ((how & PS_OPTIONS_AFTER_DASHDASH) && !separated))) {
        snprintf(err, errlen, "unexpected argument '%s' (%ssee %s --help)", argv[optind],
                 how & PS_OPTIONS_AFTER_DASHDASH ? "extra arguments go after --; " : "", prog);
        rc = PS_EINVAL;
    }
    if (rest) *rest = optind;
    free(longopts);
    free(r);
    return rc;
}

int ps_options_parse(const ps_option *t, size_t n, int argc, char **argv, void *cfg,
                     unsigned char *given, const char *prog, char *err, size_t errlen) {
    return ps_options_parse_args(t, n, argc, argv, cfg, given, prog, 0, NULL, err, errlen);
}
