/* psctl keygen NAME [--dir DIR]: a new CurveZMQ key pair in DIR/NAME.key (secret, 0600)
 * and DIR/NAME.pub (public, 0644); the format is in wire/curve_keys.h. */
#include "keygen.h"

#include <stdio.h>

#include "curve_keys.h"
#include "options.h"
#include "ps_error.h"

typedef struct {
    const char *dir; /* --dir */
} keygen_opts;

static const ps_option table[] = {
    {"dir", PS_OPTION_ARG, PS_OPTION_FIELD(keygen_opts, dir), 0, 0, ".", NULL, "DIR",
     "where to write the files", .default_text = "., the current directory",
     .doc = "DIR must exist. Never overwrites a file: an existing NAME.key or NAME.pub is an "
            "error (exit status 1)"},
};
#define N_OPTIONS (sizeof table / sizeof table[0])

/* What psctl_keygen_main returns. */
static const ps_exit_status exits[] = {
    {0, "the key pair was written"},
    {1, "a file exists (none is overwritten) or cannot be written (also: DIR does not exist)"},
    {2, "bad usage: a flag, no NAME or two, a NAME that is not letters, digits, '.', '_' and "
        "'-' (not starting with '.'), a DIR name too long"},
};
#define N_EXITS (sizeof exits / sizeof exits[0])

static void usage(FILE *f) {
    fprintf(f, "usage: psctl keygen NAME [--dir DIR]\n"
               "Makes a CurveZMQ key pair and writes DIR/NAME.key (both keys; secret, mode 0600)\n"
               "and DIR/NAME.pub (the public key, mode 0644). Never overwrites a file.\n\n"
               "  psd       --curve-secret server.key --authorized-keys DIR-of-client-.pub-files\n"
               "  psworker  --curve-secret worker0.key --server-key server.pub\n"
               "  psctl status|checkpoint|shutdown\n"
               "            --curve-secret admin.key --server-key server.pub\n\n"
               "options:\n");
    ps_options_usage(table, N_OPTIONS, f);
    fprintf(f, "\n");
    ps_exit_status_usage(exits, N_EXITS, f);
}

int psctl_keygen_main(int argc, char **argv) {
    keygen_opts o = {0};
    char err[1200];
    int first = argc; /* the first argument left: NAME (options may come before or after) */
    int rc = ps_options_defaults(table, N_OPTIONS, &o, err, sizeof err);
    if (rc == PS_OK)
        rc = ps_options_parse_args(table, N_OPTIONS, argc, argv, &o, NULL, "psctl keygen",
                                   PS_OPTIONS_ARGS, &first, err, sizeof err);
    if (rc == PS_OPTIONS_HELP || rc == PS_OPTIONS_HELP_MAN) {
        if (rc == PS_OPTIONS_HELP)
            usage(stdout);
        else
            ps_options_help_man(table, N_OPTIONS, exits, N_EXITS, stdout);
        return 0;
    }
    if (rc != PS_OK) {
        fprintf(stderr, "psctl keygen: %s\n", err);
        return 2;
    }
    if (first + 1 != argc) {
        fprintf(stderr, first == argc ? "psctl keygen: NAME is missing\n"
                                      : "psctl keygen: one NAME only\n");
        goto usage_hint;
    }
    const char *name = argv[first], *dir = o.dir;
    char key_path[1100], pub_path[1100];
    ps_curve_pair kp;
    int bad_usage = 0;
    rc = ps_curve_pair_generate(&kp, err, sizeof err);
    if (rc == PS_OK) {
        rc = ps_curve_pair_write(dir, name, &kp, key_path, sizeof key_path, pub_path,
                                 sizeof pub_path, err, sizeof err);
        bad_usage = rc == PS_EINVAL; /* NAME or DIR */
    }
    if (rc != PS_OK) {
        ps_curve_wipe(&kp, sizeof kp);
        fprintf(stderr, "psctl keygen: %s\n", err);
        return bad_usage ? 2 : 1;
    }
    char pub[PS_CURVE_Z85_LEN + 1];
    ps_curve_z85(kp.public_key, pub);
    ps_curve_wipe(&kp, sizeof kp);
    printf("wrote %s (key pair: keep it secret) and %s (public key)\npublic=%s\n", key_path,
           pub_path, pub);
    return 0;
usage_hint:
    fprintf(stderr, "Try 'psctl keygen --help'.\n");
    return 2;
}
