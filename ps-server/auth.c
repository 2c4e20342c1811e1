/* psd's CurveZMQ authentication (see auth.h): the key directory, the ZAP handler
 * (a REP socket on the event loop) and the count of failed handshakes. */
#include "auth.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <zmq.h>

#include "curve_keys.h"
#include "log.h"
#include "ps_error.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01" /* fixed by RFC 27 */
#define ZAP_DOMAIN "psd"
#define MAX_ZAP_FRAMES 8 /* a CURVE request has 7 */

typedef struct {
    uint8_t key[PS_CURVE_KEY_BYTES];
    char name[64]; /* the file name without .pub: the ZAP User-Id */
} auth_key;

/* Why a client was refused; each reason is logged at most once per second. */
enum { R_UNKNOWN_KEY, R_MECHANISM, R_HUNG_UP, R_CRYPTO, R_BAD_REQUEST, N_REASONS };
static const char *const reason_text[N_REASONS] = {
    "its public key is not in --authorized-keys",
    "it does not speak CURVE (a plaintext client?)",
    /* a plaintext client that saw our CURVE greeting first hangs up itself */
    "it hung up during the handshake (a plaintext client?)",
    "its CURVE handshake failed (does it have another server key?)",
    "malformed ZAP request",
};

struct ps_auth {
    void *router, *zap;
    uv_poll_t zap_poll;
    int started;
    auth_key *keys;
    size_t n_keys;
    uint64_t *denied;
    uint64_t last_log_ns[N_REASONS], unlogged[N_REASONS];
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

size_t ps__auth_num_keys(const ps_auth *a) {
    return a->n_keys;
}

/* ---- the key directory --------------------------------------------------------- */

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && strcmp(s + n - k, suffix) == 0;
}

/* Loads every DIR/ *.pub (regular files; hidden ones skipped). */
static int load_keys(ps_auth *a, const char *dir, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "--authorized-keys %s: %s", dir, strerror(errno));
        return PS_EINVAL;
    }
    size_t cap = 0, ignored = 0;
    int rc = PS_OK;
    struct dirent *e;
    while (rc == PS_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (!ends_with(e->d_name, ".pub")) {
            ignored++;
            continue;
        }
        char path[2048];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            PS_WARN("--authorized-keys: %s is not a regular file; ignored", path);
            continue;
        }
        if (a->n_keys == cap) {
            cap = cap ? cap * 2 : 16;
            auth_key *nk = realloc(a->keys, cap * sizeof *nk);
            if (!nk) {
                snprintf(err, errlen, "out of memory");
                rc = PS_ENOMEM;
                break;
            }
            a->keys = nk;
        }
        auth_key *k = &a->keys[a->n_keys];
        int has_secret = 0;
        rc = ps_curve_public_read(path, k->key, &has_secret, err, errlen);
        if (rc != PS_OK) break;
        if (has_secret)
            PS_WARN("--authorized-keys: %s holds a secret key; the directory needs only the "
                    "clients' public keys",
                    path);
        snprintf(k->name, sizeof k->name, "%.*s", (int)(strlen(e->d_name) - 4), e->d_name);
        a->n_keys++;
    }
    closedir(d);
    if (rc != PS_OK) return rc;
    if (a->n_keys == 0) {
        snprintf(err, errlen,
                 "--authorized-keys %s holds no *.pub key file: no client could connect "
                 "(psctl keygen NAME writes NAME.pub)",
                 dir);
        return PS_EINVAL;
    }
    PS_INFO("CurveZMQ on: %zu authorized client keys from %s%s", a->n_keys, dir,
            ignored ? " (files not named *.pub ignored)" : "");
    return PS_OK;
}

static const auth_key *find_key(const ps_auth *a, const void *key) {
    for (size_t i = 0; i < a->n_keys; i++)
        if (memcmp(a->keys[i].key, key, PS_CURVE_KEY_BYTES) == 0) return &a->keys[i];
    return NULL;
}

/* ---- refusals ------------------------------------------------------------------ */

static void refused(ps_auth *a, int reason, const char *peer, const char *detail) {
    (*a->denied)++;
    uint64_t now = now_ns();
    if (a->last_log_ns[reason] && now - a->last_log_ns[reason] < 1000000000ull) {
        a->unlogged[reason]++;
        return;
    }
    char more[96] = "";
    if (a->unlogged[reason])
        snprintf(more, sizeof more, "; %llu more like it not shown",
                 (unsigned long long)a->unlogged[reason]);
    PS_WARN("refused a connection%s%s: %s%s [%llu refused in all%s]", peer ? " from " : "",
            peer ? peer : "", reason_text[reason], detail, (unsigned long long)*a->denied, more);
    a->last_log_ns[reason] = now;
    a->unlogged[reason] = 0;
}

/* ---- the ZAP handler (RFC 27) -------------------------------------------------- */

static int frame_is(zmq_msg_t *m, const char *s) {
    size_t n = strlen(s);
    return zmq_msg_size(m) == n && memcmp(zmq_msg_data(m), s, n) == 0;
}

static void send_frame(ps_auth *a, const void *data, size_t n, int more) {
    if (zmq_send(a->zap, data, n, ZMQ_DONTWAIT | (more ? ZMQ_SNDMORE : 0)) < 0)
        PS_ERROR("ZAP: cannot send the reply: %s", zmq_strerror(zmq_errno()));
}

/* Reads one ZAP request and answers it: 200 for CURVE with an authorized key, 400
 * otherwise. Returns 0 when nothing was there to read. */
static int zap_answer_one(ps_auth *a) {
    zmq_msg_t f[MAX_ZAP_FRAMES];
    size_t n = 0;
    for (int more = 1; more;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, a->zap, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            if (n == 0) return 0;
            break;
        }
        more = zmq_msg_more(&m);
        if (n < MAX_ZAP_FRAMES)
            f[n++] = m;
        else
            zmq_msg_close(&m);
    }
    /* version, request id, domain, address, routing id, mechanism, credentials... */
    const char *status = "400", *text = "not authorized", *user = "";
    char peer[64] = "", detail[128] = "";
    int reason = -1;
    if (n >= 4)
        snprintf(peer, sizeof peer, "%.*s", (int)zmq_msg_size(&f[3]), (char *)zmq_msg_data(&f[3]));
    if (n < 6 || !frame_is(&f[0], "1.0")) {
        reason = R_BAD_REQUEST;
    } else if (!frame_is(&f[5], "CURVE")) {
        reason = R_MECHANISM;
    } else if (n < 7 || zmq_msg_size(&f[6]) != PS_CURVE_KEY_BYTES) {
        reason = R_BAD_REQUEST;
    } else {
        const auth_key *k = find_key(a, zmq_msg_data(&f[6]));
        if (k) {
            status = "200";
            text = "OK";
            user = k->name;
            PS_DEBUG("authorized a connection from %s as %s", peer, k->name);
        } else {
            char z85[PS_CURVE_Z85_LEN + 1];
            ps_curve_z85(zmq_msg_data(&f[6]), z85);
            snprintf(detail, sizeof detail, " (public=%s)", z85);
            reason = R_UNKNOWN_KEY;
        }
    }
    if (reason >= 0) refused(a, reason, peer[0] ? peer : NULL, detail);
    send_frame(a, "1.0", 3, 1);
    send_frame(a, n >= 2 ? zmq_msg_data(&f[1]) : "", n >= 2 ? zmq_msg_size(&f[1]) : 0, 1);
    send_frame(a, status, 3, 1);
    send_frame(a, text, strlen(text), 1);
    send_frame(a, user, strlen(user), 1);
    send_frame(a, "", 0, 0); /* metadata */
    for (size_t i = 0; i < n; i++)
        zmq_msg_close(&f[i]);
    return 1;
}

/* ZMQ_FD is edge-triggered: drain while ZMQ_EVENTS says POLLIN (re-read every turn). */
static int readable(void *sock) {
    int events = 0;
    size_t len = sizeof events;
    return zmq_getsockopt(sock, ZMQ_EVENTS, &events, &len) == 0 && (events & ZMQ_POLLIN);
}

static void zap_drain(ps_auth *a) {
    while (readable(a->zap) && zap_answer_one(a))
        ;
}

/* ---- handshake events (from the ROUTER's monitor, monitor.c) ------------------- */

void ps__auth_handshake_event(ps_auth *a, uint16_t event, uint32_t value) {
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
        refused(a, R_HUNG_UP, NULL, "");
        return;
    }
    if (event != ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) return;
    if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
        refused(a, R_MECHANISM, NULL, "");
    else if (value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
        refused(a, R_CRYPTO, NULL, "");
    else
        PS_DEBUG("a handshake failed: ZMTP protocol error 0x%x", (unsigned)value);
}

static void on_zap(uv_poll_t *h, int status, int events) {
    (void)events;
    if (status < 0) PS_ERROR("ZAP socket poll failed: %s", uv_strerror(status));
    zap_drain(h->data);
}

/* ---- life cycle ---------------------------------------------------------------- */

/* Makes router a CURVE server with the key pair in secret_file. */
static int curve_server(void *router, const char *secret_file, char *err, size_t errlen) {
    ps_curve_pair kp;
    int rc = ps_curve_pair_read(secret_file, &kp, err, errlen);
    if (rc != PS_OK) return rc;
    int one = 1;
    if (zmq_setsockopt(router, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
        zmq_setsockopt(router, ZMQ_CURVE_PUBLICKEY, kp.public_key, PS_CURVE_KEY_BYTES) != 0 ||
        zmq_setsockopt(router, ZMQ_CURVE_SECRETKEY, kp.secret_key, PS_CURVE_KEY_BYTES) != 0 ||
        zmq_setsockopt(router, ZMQ_ZAP_DOMAIN, ZAP_DOMAIN, strlen(ZAP_DOMAIN)) != 0) {
        snprintf(err, errlen, "cannot make the socket a CURVE server: %s",
                 zmq_strerror(zmq_errno()));
        rc = PS_EINVAL;
    }
    ps_curve_wipe(&kp, sizeof kp);
    return rc;
}

int ps__auth_init(ps_auth **out, void *zctx, void *router, const char *secret_file,
                  const char *keys_dir, uint64_t *denied, char *err, size_t errlen) {
    *out = NULL;
    if (!zmq_has("curve")) {
        snprintf(err, errlen, "--curve-secret: this libzmq has no CURVE support");
        return PS_EINVAL;
    }
    ps_auth *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    a->router = router;
    a->denied = denied;
    int rc = load_keys(a, keys_dir, err, errlen);
    if (rc == PS_OK) rc = curve_server(router, secret_file, err, errlen);
    if (rc == PS_OK) {
        int linger = 0;
        a->zap = zmq_socket(zctx, ZMQ_REP);
        if (!a->zap || zmq_setsockopt(a->zap, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
            zmq_bind(a->zap, ZAP_ENDPOINT) != 0) {
            snprintf(err, errlen, "cannot bind the ZAP handler: %s", zmq_strerror(zmq_errno()));
            rc = PS_EINVAL;
        }
    }
    if (rc != PS_OK) {
        ps__auth_free(a);
        return rc;
    }
    *out = a;
    return PS_OK;
}

static int poll_socket(uv_loop_t *loop, uv_poll_t *h, void *sock, uv_poll_cb cb, void *data) {
    int fd;
    size_t len = sizeof fd;
    if (zmq_getsockopt(sock, ZMQ_FD, &fd, &len) != 0 || uv_poll_init(loop, h, fd) != 0)
        return PS_EIO;
    h->data = data;
    uv_poll_start(h, UV_READABLE, cb);
    return PS_OK;
}

int ps__auth_start(ps_auth *a, uv_loop_t *loop) {
    if (poll_socket(loop, &a->zap_poll, a->zap, on_zap, a) != PS_OK) return PS_EIO;
    a->started = 1;
    zap_drain(a); /* requests may have come in before the poll started */
    return PS_OK;
}

void ps__auth_stop(ps_auth *a) {
    if (!a || !a->started) return;
    uv_close((uv_handle_t *)&a->zap_poll, NULL);
    a->started = 0;
}

void ps__auth_free(ps_auth *a) {
    if (!a) return;
    if (a->zap) zmq_close(a->zap);
    free(a->keys);
    free(a);
}
