/* CurveZMQ key files (psctl keygen writes them; psd, psworker and psctl read them):
 * a key pair file NAME.key and a public key file NAME.pub, text, keys in Z85. */
#ifndef PS_CURVE_KEYS_H
#define PS_CURVE_KEYS_H

#include <stddef.h>
#include <stdint.h>

#define PS_CURVE_KEY_BYTES 32 /* a Curve25519 key */
#define PS_CURVE_Z85_LEN 40   /* its Z85 text (ZeroMQ RFC 32), without the NUL */

/* Key file format (docs/SECURITY.md). Lines; blank lines and lines starting with
 * '#' are comments; every other line is FIELD=VALUE (spaces around either are
 * ignored), each field at most once:
 *
 *     # psctl keygen: CurveZMQ key pair "worker0" ...
 *     public=<40 characters of Z85>
 *     secret=<40 characters of Z85>
 *
 * NAME.key holds both fields (mode 0600); NAME.pub only `public` (mode 0644).
 * Any other field, a value that is not 40 characters of Z85, or a secret key that
 * does not belong to the public key makes the file malformed. */

typedef struct {
    uint8_t public_key[PS_CURVE_KEY_BYTES];
    uint8_t secret_key[PS_CURVE_KEY_BYTES];
} ps_curve_pair;

/* What a CURVE client socket needs: its own key pair and the server's public key. */
typedef struct {
    ps_curve_pair pair;
    uint8_t server_key[PS_CURVE_KEY_BYTES];
} ps_curve_client;

/* Makes a new key pair (zmq_curve_keypair). PS_OK, or PS_EINVAL with a reason in
 * err when libzmq was built without CURVE. */
int ps_curve_pair_generate(ps_curve_pair *out, char *err, size_t errlen);

/* Writes DIR/NAME.key (both keys, mode 0600) and DIR/NAME.pub (public key, mode
 * 0644), refusing to overwrite either (O_CREAT|O_EXCL; the modes are set with
 * fchmod, whatever the umask). Nothing is left behind on failure. The paths written
 * go to key_path / pub_path. Returns PS_OK, PS_EEXIST (a file is already there),
 * PS_EINVAL (bad NAME) or PS_EIO, with a reason in err. */
int ps_curve_pair_write(const char *dir, const char *name, const ps_curve_pair *kp, char *key_path,
                        size_t key_len, char *pub_path, size_t pub_len, char *err, size_t errlen);

/* Reads a key pair file (both fields; the secret key must match the public key).
 * Warns when the file is readable by group or others. Returns PS_OK, PS_EINVAL (the
 * file cannot be read) or PS_EFORMAT (malformed), with a reason naming the file in
 * err. */
int ps_curve_pair_read(const char *path, ps_curve_pair *out, char *err, size_t errlen);

/* Reads the public key of a .pub file (a .key file works too, its secret key is
 * ignored). *has_secret (may be NULL) is set to 1 when the file also holds a secret
 * key. Returns as ps_curve_pair_read. */
int ps_curve_public_read(const char *path, uint8_t out[PS_CURVE_KEY_BYTES], int *has_secret,
                         char *err, size_t errlen);

/* Loads a client's keys: its key pair file and the server's public key file.
 * Returns as ps_curve_pair_read. */
int ps_curve_client_load(ps_curve_client *out, const char *secret_file, const char *server_key_file,
                         char *err, size_t errlen);

/* Makes sock a CURVE client (ZMQ_CURVE_SERVERKEY, PUBLICKEY, SECRETKEY); call before
 * zmq_connect. Returns PS_OK, or PS_EINVAL (zmq_errno() tells why). */
int ps_curve_client_apply(void *sock, const ps_curve_client *k);

/* Encodes a key as Z85 into out[PS_CURVE_Z85_LEN + 1]. */
void ps_curve_z85(const uint8_t key[PS_CURVE_KEY_BYTES], char out[PS_CURVE_Z85_LEN + 1]);

/* Overwrites secret material (not optimised away). */
void ps_curve_wipe(void *p, size_t n);

#endif
