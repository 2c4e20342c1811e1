/* CurveZMQ key files: generate, write (0600/0644, never overwriting), read and
 * check (see curve_keys.h for the format). */
#include "curve_keys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "log.h"
#include "ps_error.h"

#define MAX_KEY_FILE 4096 /* a key file is a few hundred bytes */

void ps_curve_wipe(void *p, size_t n) {
    volatile unsigned char *v = p;
    while (n--)
        *v++ = 0;
}

void ps_curve_z85(const uint8_t key[PS_CURVE_KEY_BYTES], char out[PS_CURVE_Z85_LEN + 1]) {
    zmq_z85_encode(out, key, PS_CURVE_KEY_BYTES);
}

int ps_curve_pair_generate(ps_curve_pair *out, char *err, size_t errlen) {
    char pub[PS_CURVE_Z85_LEN + 1], sec[PS_CURVE_Z85_LEN + 1];
    if (!zmq_has("curve") || zmq_curve_keypair(pub, sec) != 0) {
        snprintf(err, errlen, "this libzmq has no CURVE support (built without libsodium?)");
        return PS_EINVAL;
    }
    int ok = zmq_z85_decode(out->public_key, pub) && zmq_z85_decode(out->secret_key, sec);
    ps_curve_wipe(sec, sizeof sec);
    if (!ok) {
        snprintf(err, errlen, "zmq_curve_keypair returned a malformed key");
        return PS_EINTERNAL;
    }
    return PS_OK;
}

/* ---- writing ------------------------------------------------------------------- */

/* NAME becomes a file name: letters, digits, '.', '_', '-'; not starting with '.'. */
static int valid_name(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > 100 || name[0] == '.') return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* Creates path (must not exist) with exactly `mode`. Returns the fd, or -1 (errno). */
static int create_excl(const char *path, mode_t mode) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) return -1;
    if (fchmod(fd, mode) != 0) { /* the umask may have narrowed (or widened) it */
        int e = errno;
        close(fd);
        unlink(path);
        errno = e;
        return -1;
    }
    return fd;
}

static int write_all(int fd, const char *text) {
    size_t n = strlen(text), done = 0;
    while (done < n) {
        ssize_t w = write(fd, text + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        done += (size_t)w;
    }
    return fsync(fd);
}

int ps_curve_pair_write(const char *dir, const char *name, const ps_curve_pair *kp, char *key_path,
                        size_t key_len, char *pub_path, size_t pub_len, char *err, size_t errlen) {
    if (!valid_name(name)) {
        snprintf(err, errlen,
                 "key name '%s': use letters, digits, '.', '_' and '-' (not starting with '.')",
                 name);
        return PS_EINVAL;
    }
    if ((size_t)snprintf(key_path, key_len, "%s/%s.key", dir, name) >= key_len ||
        (size_t)snprintf(pub_path, pub_len, "%s/%s.pub", dir, name) >= pub_len) {
        snprintf(err, errlen, "directory name too long: %s", dir);
        return PS_EINVAL;
    }
    char pub[PS_CURVE_Z85_LEN + 1], sec[PS_CURVE_Z85_LEN + 1];
    ps_curve_z85(kp->public_key, pub);
    ps_curve_z85(kp->secret_key, sec);
    char key_text[800], pub_text[600];
    snprintf(key_text, sizeof key_text,
             "# psctl keygen: CurveZMQ key pair \"%s\" (ZeroMQ RFC 26), keys in Z85 (RFC 32).\n"
             "# SECRET: keep this file private (mode 0600). Give it to the program that owns\n"
             "# the key: psd --curve-secret, psworker --curve-secret or psctl --curve-secret.\n"
             "# Share only %s.pub.\n"
             "public=%s\n"
             "secret=%s\n",
             name, name, pub, sec);
    snprintf(pub_text, sizeof pub_text,
             "# psctl keygen: CurveZMQ public key \"%s\" (ZeroMQ RFC 26), in Z85 (RFC 32).\n"
             "# A client's: copy it into psd's --authorized-keys directory. A server's: give\n"
             "# it to the clients as --server-key.\n"
             "public=%s\n",
             name, pub);
    ps_curve_wipe(sec, sizeof sec);
    int rc = PS_OK;
    const char *failed = key_path;
    int kfd = create_excl(key_path, 0600), pfd = -1;
    if (kfd >= 0) {
        failed = pub_path;
        pfd = create_excl(pub_path, 0644);
    }
    if (pfd < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: %s%s", failed, strerror(e),
                 e == EEXIST ? " (psctl keygen never overwrites a key)" : "");
        rc = e == EEXIST ? PS_EEXIST : PS_EIO;
    } else if (write_all(kfd, key_text) != 0 || write_all(pfd, pub_text) != 0) {
        snprintf(err, errlen, "writing %s: %s", key_path, strerror(errno));
        rc = PS_EIO;
    }
    ps_curve_wipe(key_text, sizeof key_text);
    if (kfd >= 0 && close(kfd) != 0 && rc == PS_OK) {
        snprintf(err, errlen, "writing %s: %s", key_path, strerror(errno));
        rc = PS_EIO;
    }
    if (pfd >= 0 && close(pfd) != 0 && rc == PS_OK) {
        snprintf(err, errlen, "writing %s: %s", pub_path, strerror(errno));
        rc = PS_EIO;
    }
    if (rc != PS_OK) { /* remove what this call created, nothing else */
        if (kfd >= 0) unlink(key_path);
        if (pfd >= 0) unlink(pub_path);
    }
    return rc;
}

/* ---- reading ------------------------------------------------------------------- */

typedef struct {
    int have_public, have_secret;
    uint8_t public_key[PS_CURVE_KEY_BYTES], secret_key[PS_CURVE_KEY_BYTES];
    mode_t mode;
} key_file;

static int is_z85_char(char c) {
    static const char alphabet[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                   ".-:+=^!/*?&<>()[]{}@%$#";
    return c && strchr(alphabet, c) != NULL;
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = 0;
    return s;
}

/* Parses one FIELD=VALUE line into kf. Returns PS_OK or PS_EFORMAT (reason in err). */
static int parse_line(const char *path, unsigned lineno, char *line, key_file *kf, char *err,
                      size_t errlen) {
    char *eq = strchr(line, '=');
    if (!eq) {
        snprintf(err, errlen, "%s: line %u: expected public=KEY or secret=KEY", path, lineno);
        return PS_EFORMAT;
    }
    *eq = 0;
    char *field = trim(line), *value = trim(eq + 1);
    int is_public = strcmp(field, "public") == 0, is_secret = strcmp(field, "secret") == 0;
    if (!is_public && !is_secret) {
        snprintf(err, errlen, "%s: line %u: unknown field '%.40s' (want public= or secret=)", path,
                 lineno, field);
        return PS_EFORMAT;
    }
    if (is_public ? kf->have_public : kf->have_secret) {
        snprintf(err, errlen, "%s: line %u: a second %s key", path, lineno, field);
        return PS_EFORMAT;
    }
    size_t n = strlen(value);
    int ok = n == PS_CURVE_Z85_LEN;
    for (size_t i = 0; ok && i < n; i++)
        ok = is_z85_char(value[i]);
    uint8_t *dst = is_public ? kf->public_key : kf->secret_key;
    if (!ok || !zmq_z85_decode(dst, value)) {
        snprintf(err, errlen, "%s: line %u: the %s key is not %d characters of Z85", path, lineno,
                 field, PS_CURVE_Z85_LEN);
        return PS_EFORMAT;
    }
    if (is_public)
        kf->have_public = 1;
    else
        kf->have_secret = 1;
    return PS_OK;
}

/* Reads and parses a key file. PS_OK, PS_EINVAL (cannot read) or PS_EFORMAT. */
static int read_key_file(const char *path, key_file *kf, char *err, size_t errlen) {
    memset(kf, 0, sizeof *kf);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot read key file %s: %s", path, strerror(errno));
        return PS_EINVAL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "key file %s is not a regular file", path);
        close(fd);
        return PS_EINVAL;
    }
    kf->mode = st.st_mode & 07777;
    char buf[MAX_KEY_FILE + 1];
    size_t len = 0;
    for (;;) {
        ssize_t r = read(fd, buf + len, sizeof buf - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            snprintf(err, errlen, "cannot read key file %s: %s", path, strerror(errno));
            close(fd);
            return PS_EINVAL;
        }
        if (r == 0 || (len += (size_t)r) == sizeof buf) break;
    }
    close(fd);
    int rc = PS_OK;
    if (len > MAX_KEY_FILE) {
        snprintf(err, errlen, "%s: too large for a key file (over %d bytes)", path, MAX_KEY_FILE);
        rc = PS_EFORMAT;
    } else if (memchr(buf, 0, len)) {
        snprintf(err, errlen, "%s: not a text key file (NUL byte)", path);
        rc = PS_EFORMAT;
    }
    buf[len < sizeof buf ? len : sizeof buf - 1] = 0;
    unsigned lineno = 0;
    for (char *line = buf, *next; rc == PS_OK && line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        lineno++;
        char *t = trim(line);
        if (*t == 0 || *t == '#') continue;
        rc = parse_line(path, lineno, t, kf, err, errlen);
    }
    ps_curve_wipe(buf, sizeof buf);
    if (rc == PS_OK && !kf->have_public) {
        snprintf(err, errlen, "%s: no public= line: not a key file from psctl keygen", path);
        rc = PS_EFORMAT;
    }
    if (rc != PS_OK) ps_curve_wipe(kf, sizeof *kf);
    return rc;
}

int ps_curve_pair_read(const char *path, ps_curve_pair *out, char *err, size_t errlen) {
    key_file kf;
    int rc = read_key_file(path, &kf, err, errlen);
    if (rc != PS_OK) return rc;
    if (!kf.have_secret) {
        snprintf(err, errlen, "%s holds no secret key: give the .key file (not the .pub)", path);
        return PS_EFORMAT;
    }
    char sec[PS_CURVE_Z85_LEN + 1], derived[PS_CURVE_Z85_LEN + 1], pub[PS_CURVE_Z85_LEN + 1];
    ps_curve_z85(kf.secret_key, sec);
    ps_curve_z85(kf.public_key, pub);
    int match = zmq_curve_public(derived, sec) == 0 && strcmp(derived, pub) == 0;
    ps_curve_wipe(sec, sizeof sec);
    if (!match) {
        ps_curve_wipe(&kf, sizeof kf);
        snprintf(err, errlen, "%s: the secret key does not belong to the public key", path);
        return PS_EFORMAT;
    }
    if (kf.mode & 077)
        PS_WARN("key file %s can be read by other users (mode %04o): chmod 600 it", path,
                (unsigned)kf.mode);
    memcpy(out->public_key, kf.public_key, PS_CURVE_KEY_BYTES);
    memcpy(out->secret_key, kf.secret_key, PS_CURVE_KEY_BYTES);
    ps_curve_wipe(&kf, sizeof kf);
    return PS_OK;
}

int ps_curve_public_read(const char *path, uint8_t out[PS_CURVE_KEY_BYTES], int *has_secret,
                         char *err, size_t errlen) {
    key_file kf;
    int rc = read_key_file(path, &kf, err, errlen);
    if (rc != PS_OK) return rc;
    memcpy(out, kf.public_key, PS_CURVE_KEY_BYTES);
    if (has_secret) *has_secret = kf.have_secret;
    ps_curve_wipe(&kf, sizeof kf);
    return PS_OK;
}

int ps_curve_client_load(ps_curve_client *out, const char *secret_file, const char *server_key_file,
                         char *err, size_t errlen) {
    int rc = ps_curve_pair_read(secret_file, &out->pair, err, errlen);
    int has_secret = 0;
    if (rc == PS_OK)
        rc = ps_curve_public_read(server_key_file, out->server_key, &has_secret, err, errlen);
    if (rc != PS_OK) {
        ps_curve_wipe(out, sizeof *out);
        return rc;
    }
    if (has_secret)
        PS_WARN("%s holds the server's secret key: clients need only its .pub file",
                server_key_file);
    return PS_OK;
}

int ps_curve_client_apply(void *sock, const ps_curve_client *k) {
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, k->server_key, PS_CURVE_KEY_BYTES) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, k->pair.public_key, PS_CURVE_KEY_BYTES) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, k->pair.secret_key, PS_CURVE_KEY_BYTES) != 0)
        return PS_EINVAL;
    return PS_OK;
}
