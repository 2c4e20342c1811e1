/* psctl keygen NAME [--dir DIR]: a new CurveZMQ key pair in DIR/NAME.key (secret, 0600)
 * and DIR/NAME.pub (public, 0644); the format is in common/curve_keys.h. */
#include "keygen.h"

#include <getopt.h>
#include <stdio.h>

#include "curve_keys.h"
#include "ps_error.h"

static void usage(FILE *f) {
    fprintf(f, "usage: psctl keygen NAME [--dir DIR]\n"
               "Makes a CurveZMQ key pair and writes DIR/NAME.key (both keys; secret, mode 0600)\n"
               "and DIR/NAME.pub (the public key, mode 0644). Never overwrites a file.\n\n"
               "  psd       --curve-secret server.key --authorized-keys DIR-of-client-.pub-files\n"
               "  psworker  --curve-secret worker0.key --server-key server.pub\n"
               "  psctl status|checkpoint|shutdown  --curve-secret admin.key --server-key "
               "server.pub\n\n"
               "options:\n"
               "  --dir DIR    where to write the files (default: the current directory)\n"
               "  -h, --help   show this help\n\n"
               "Exit status: 0 written, 1 a file exists or cannot be written, 2 bad usage.\n");
}

int psctl_keygen_main(int argc, char **argv) {
    static const struct option longopts[] = {
        {"dir", required_argument, NULL, 'd'}, {"help", no_argument, NULL, 'h'}, {0, 0, 0, 0}};
    const char *dir = ".";
    opterr = 0;
    optind = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            usage(stdout);
            return 0;
        case 'd':
            dir = optarg;
            break;
        case ':':
            fprintf(stderr, "psctl keygen: option '%s' needs a value\n", argv[optind - 1]);
            goto usage_hint;
        default:
            fprintf(stderr, "psctl keygen: unknown option '%s'\n", argv[optind - 1]);
            goto usage_hint;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, optind == argc ? "psctl keygen: NAME is missing\n"
                                       : "psctl keygen: one NAME only\n");
        goto usage_hint;
    }
    const char *name = argv[optind];
    char err[1200], key_path[1100], pub_path[1100];
    ps_curve_pair kp;
    int rc = ps_curve_pair_generate(&kp, err, sizeof err), bad_usage = 0;
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
