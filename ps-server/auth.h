/* psd's CurveZMQ authentication: the ROUTER becomes a CURVE server, and a ZAP handler
 * (ZeroMQ RFC 27) on the event loop lets in only clients whose public key is in the
 * --authorized-keys directory. Handshakes refused for a wrong mechanism (a plaintext
 * client) or bad cryptography are seen through the ROUTER's monitor (monitor.c). */
#ifndef PS_AUTH_H
#define PS_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>
#include <zmq.h>

typedef struct ps_auth ps_auth;

/* Loads the key pair (secret_file) and every *.pub in keys_dir, binds the ZAP handler
 * ("inproc://zeromq.zap.01") in zctx and makes router a CURVE server (its failed
 * handshakes come from monitor.c, ps__auth_handshake_event). Call before binding router (a CURVE
 * server without a ZAP handler lets every client in). `denied` (psd's stats) counts refusals.
 * Returns PS_OK with *out owned by the caller (ps__auth_free), PS_EINVAL (a file or the directory
 * cannot be read, no keys) or PS_EFORMAT (a malformed key file), with a reason in err. */
int ps__auth_init(ps_auth **out, void *zctx, void *router, const char *secret_file,
                  const char *keys_dir, uint64_t *denied, char *err, size_t errlen);
/* Starts answering ZAP requests and reading handshake events on the loop. */
int ps__auth_start(ps_auth *a, uv_loop_t *loop);
/* Closes the loop handles (the loop then ends without them); NULL is ignored. */
void ps__auth_stop(ps_auth *a);
/* Closes the sockets and frees a, after the loop has ended and after the ROUTER was
 * closed (the ZAP handler must outlive it); NULL is ignored. */
void ps__auth_free(ps_auth *a);
/* The ROUTER's monitor events auth wants (monitor.c subscribes to them). */
#define PS_AUTH_EVENTS (ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
/* One such event: a refused client is counted and logged (at most once a second). */
void ps__auth_handshake_event(ps_auth *a, uint16_t event, uint32_t value);
/* Number of authorized keys. */
size_t ps__auth_num_keys(const ps_auth *a);

#endif
