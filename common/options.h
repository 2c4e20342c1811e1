/* One table of options drives a program's flags, defaults, bounds and --help
 * (the Redis config-table habit): each entry names a field of the program's
 * config struct. Used by psd, psworker and every psctl command; a flag two
 * programs share is defined once (shared_flags.h) and named by `like`. */
#ifndef PS_OPTIONS_H
#define PS_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
    PS_OPTION_LONG,    /* long field, bounded by [min, max] */
    PS_OPTION_STR,     /* char[size] field (a copy of the value) */
    PS_OPTION_CHOICE,  /* long field: index of the value in choices ("a|b|c") */
    PS_OPTION_FLAG,    /* int field set to 1; the flag takes no value */
    PS_OPTION_ARG,     /* const char * field pointing into argv; min 1: must not be empty */
    PS_OPTION_SECONDS, /* double field in [min, max] (above min with PS_OPTION_ABOVE_MIN) */
    PS_OPTION_CUSTOM   /* the entry's parse function stores the value */
} ps_option_type;

enum {
    PS_OPTION_NO_DEFAULT = 1, /* with like: do not take the shared definition's default */
    PS_OPTION_ABOVE_MIN = 2   /* SECONDS: min itself is refused */
};

typedef struct ps_option ps_option;
struct ps_option {
    const char *name; /* flag without the leading "--" */
    ps_option_type type;
    size_t offset, size; /* field in the config struct; size of a STR buffer */
    long min, max;       /* LONG and SECONDS bounds */
    const char *def;     /* default as text; NULL: no default (required unless given otherwise) */
    const char *choices; /* CHOICE values, '|'-separated */
    const char *metavar; /* shown in --help, e.g. "N", "FILE" */
    const char *help;
    /* A shared definition (shared_flags.h): the name, type, bounds and choices come from
     * it, and so do the default, metavar and help unless this entry gives its own. */
    const ps_option *like;
    unsigned flags; /* PS_OPTION_NO_DEFAULT, PS_OPTION_ABOVE_MIN */
    /* CUSTOM: stores val into cfg; returns PS_OK or PS_EINVAL with a reason in err. */
    int (*parse)(const ps_option *o, void *cfg, const char *val, char *err, size_t errlen);
    /* The default as --help states it, for an option whose default is not a value the
     * table sets (def NULL: "the model spec's", "0" for a field left unset to tell "not
     * given"). NULL: def, if any. */
    const char *default_text;
    /* More for the man page (--help-man), too long for --help: sentences that follow help
     * there. NULL: none. An entry that gives its own help does not take like's. */
    const char *doc;
};

#define PS_OPTION_FIELD(type, field) offsetof(type, field), sizeof(((type *)0)->field)
/* The same, for an entry written with designated initializers ({.like = ..., PS_OPTION_AT()}). */
#define PS_OPTION_AT(type, field)                                                                  \
    .offset = offsetof(type, field), .size = sizeof(((type *)0)->field)

/* How ps_options_parse_args treats arguments that are not options. */
enum {
    PS_OPTIONS_IN_ORDER = 1,      /* stop at the first one (what follows is not parsed) */
    PS_OPTIONS_ARGS = 2,          /* allow them (else one is "unexpected argument") */
    PS_OPTIONS_AFTER_DASHDASH = 4 /* with ARGS: only after a "--" that ends the options */
};

/* The entry as it applies: like's fields with this entry's overrides and field. */
ps_option ps_option_resolve(const ps_option *o);
/* Sets every option that has a default. Returns PS_OK or PS_EINVAL (a bad default). */
int ps_options_defaults(const ps_option *t, size_t n, void *cfg, char *err, size_t errlen);
/* Parses and stores one value. Returns PS_OK or PS_EINVAL with a reason naming the flag. */
int ps_options_set(const ps_option *o, void *cfg, const char *val, char *err, size_t errlen);
/* What ps_options_parse answers, besides PS_OK and the errors, when a program is asked
 * for its documentation (nothing is printed). */
enum {
    PS_OPTIONS_HELP = 1,    /* -h, --help: print the usage (ps_options_usage ...) */
    PS_OPTIONS_HELP_MAN = 2 /* --help-man: print ps_options_help_man */
};
/* Parses argv (getopt_long, "--name value" or "--name=value"; argv[0] is skipped). given[i]
 * (may be NULL) is set for each option seen. Returns PS_OK, PS_OPTIONS_HELP or
 * PS_OPTIONS_HELP_MAN, or PS_EINVAL with a reason in err (unknown flag, missing value, bad
 * value, stray argument). */
int ps_options_parse(const ps_option *t, size_t n, int argc, char **argv, void *cfg,
                     unsigned char *given, const char *prog, char *err, size_t errlen);
/* ps_options_parse with how (PS_OPTIONS_*) and *rest (may be NULL) set to the index in
 * argv of the first argument left after the options (argc: none). */
int ps_options_parse_args(const ps_option *t, size_t n, int argc, char **argv, void *cfg,
                          unsigned char *given, const char *prog, int how, int *rest, char *err,
                          size_t errlen);
/* Prints one line per option: flag, metavar, help, default (options_doc.c). */
void ps_options_usage(const ps_option *t, size_t n, FILE *out);

/* One exit status of a program or command. Its table is printed as --help's footer
 * (ps_exit_status_usage) and as the man page's EXIT STATUS, so the two say the same. */
typedef struct {
    int code;            /* PS_EXIT_OTHER: any other (the status of a program this one runs) */
    const char *meaning; /* one or more sentences, without the final period */
} ps_exit_status;
#define PS_EXIT_OTHER (-1)

/* Prints "exit status:" and one wrapped entry per status (code, meaning) to out. */
void ps_exit_status_usage(const ps_exit_status *e, size_t n, FILE *out);

/* Prints what a program's man page says of its options and exit statuses, as scdoc, for
 * --help-man: a line "%%options" and an entry per option (flag and value, then a paragraph:
 * help, doc, "Default: X."; -h/--help and --help-man last), a line "%%exit-status" and an
 * entry per status, a line "%%synopsis" and one line "[*--flag* VALUE] ...".
 * docs/man/gen_man.py cuts it at those lines. */
void ps_options_help_man(const ps_option *t, size_t n, const ps_exit_status *e, size_t ne,
                         FILE *out);
/* Looks an option up by name; NULL when absent. */
const ps_option *ps_options_find(const ps_option *t, size_t n, const char *name);

#endif
