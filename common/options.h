/* One table of options drives a program's flags, defaults, bounds and --help
 * (the Redis config-table habit): each entry names a field of the program's
 * config struct. Used by psd and psworker. */
#ifndef PS_OPTIONS_H
#define PS_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
    PS_OPTION_LONG,  /* long field, bounded by [min, max] */
    PS_OPTION_STR,   /* char[size] field */
    PS_OPTION_CHOICE /* long field: index of the value in choices ("a|b|c") */
} ps_option_type;

typedef struct {
    const char *name; /* flag without the leading "--" */
    ps_option_type type;
    size_t offset, size; /* field in the config struct; size of a STR buffer */
    long min, max;       /* LONG bounds */
    const char *def;     /* default as text; NULL: no default (required unless given otherwise) */
    const char *choices; /* CHOICE values, '|'-separated */
    const char *metavar; /* shown in --help, e.g. "N", "FILE" */
    const char *help;
} ps_option;

#define PS_OPTION_FIELD(type, field) offsetof(type, field), sizeof(((type *)0)->field)

/* Sets every option that has a default. Returns PS_OK or PS_EINVAL (a bad default). */
int ps_options_defaults(const ps_option *t, size_t n, void *cfg, char *err, size_t errlen);
/* Parses and stores one value. Returns PS_OK or PS_EINVAL with a reason naming the flag. */
int ps_options_set(const ps_option *o, void *cfg, const char *val, char *err, size_t errlen);
/* Parses argv (getopt_long, "--name value" or "--name=value"). given[i] (may be NULL)
 * is set for each option seen. Returns PS_OK, 1 when -h/--help was given (nothing
 * printed), or PS_EINVAL with a reason in err (unknown flag, missing value, bad
 * value, stray argument). */
int ps_options_parse(const ps_option *t, size_t n, int argc, char **argv, void *cfg,
                     unsigned char *given, const char *prog, char *err, size_t errlen);
/* Prints one line per option: flag, metavar, help, default. */
void ps_options_usage(const ps_option *t, size_t n, FILE *out);
/* Looks an option up by name; NULL when absent. */
const ps_option *ps_options_find(const ps_option *t, size_t n, const char *name);

#endif
