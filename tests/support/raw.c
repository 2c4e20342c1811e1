/* The raw DEALER of the integration tests (see raw.h). */
#include "raw.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "ps_error.h"
#include "testutil.h"

void raw_open(raw_conn *r, const char *endpoint) {
    r->ctx = zmq_ctx_new();
    ck_assert_ptr_nonnull(r->ctx);
    r->sock = zmq_socket(r->ctx, ZMQ_DEALER);
    ck_assert_ptr_nonnull(r->sock);
    int zero = 0;
    zmq_setsockopt(r->sock, ZMQ_LINGER, &zero, sizeof zero);
    char ep[300];
    snprintf(ep, sizeof ep, "%s%s", strncmp(endpoint, "ipc://", 6) == 0 ? "" : "tcp://", endpoint);
    ck_assert_int_eq(zmq_connect(r->sock, ep), 0);
}

void raw_close(raw_conn *r) {
    zmq_close(r->sock);
    ck_assert_int_eq(zmq_ctx_term(r->ctx), 0);
}

void raw_send(raw_conn *r, const void *const *data, const size_t *lens, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int more = i + 1 < n ? ZMQ_SNDMORE : 0;
        ck_assert_int_eq(zmq_send(r->sock, data[i], lens[i], more), (int)lens[i]);
    }
}

void raw_send_hdr(raw_conn *r, const Ps__Header *h, const void *const *pl, const size_t *pl_lens,
                  size_t n_pl) {
    size_t hlen = ps__header__get_packed_size(h);
    void *buf = malloc(hlen ? hlen : 1);
    ck_assert_ptr_nonnull(buf);
    ps__header__pack(h, buf);
    ck_assert_int_eq(zmq_send(r->sock, buf, hlen, n_pl ? ZMQ_SNDMORE : 0), (int)hlen);
    free(buf);
    raw_send(r, pl, pl_lens, n_pl);
}

Ps__Header *raw_recv(raw_conn *r, int timeout_ms, ps_frames *f) {
    zmq_pollitem_t it = {r->sock, 0, ZMQ_POLLIN, 0};
    long long deadline = ps_test_now_ms() + timeout_ms;
    for (;;) {
        long long left = deadline - ps_test_now_ms();
        if (left < 0) return NULL;
        int n = zmq_poll(&it, 1, (long)left);
        if (n > 0) break;
        if (n == 0) return NULL;
    }
    ps_frames got;
    ck_assert_int_eq(ps_frames_recv(r->sock, ZMQ_DONTWAIT, &got), PS_OK);
    ck_assert_uint_ge(got.n, 1);
    Ps__Header *h = NULL;
    char err[256] = "";
    int rc = ps_header_decode(zmq_msg_data(&got.frames[0]), zmq_msg_size(&got.frames[0]), &h, err,
                              sizeof err);
    ck_assert_msg(rc == PS_OK, "psd's reply does not decode: %s", err);
    if (f)
        *f = got;
    else
        ps_frames_close(&got);
    return h;
}

void raw_expect_error(raw_conn *r, uint64_t request_id, int code, int timeout_ms) {
    raw_expect_error_text(r, request_id, code, NULL, timeout_ms);
}

void raw_expect_error_text(raw_conn *r, uint64_t request_id, int code, const char *want,
                           int timeout_ms) {
    ps_frames f;
    Ps__Header *h = raw_recv(r, timeout_ms, &f);
    unsigned long long id = (unsigned long long)request_id;
    ck_assert_msg(h != NULL, "request %llu: no reply within %d ms (want %s)", id, timeout_ms,
                  ps_errname(code));
    ck_assert_msg(h->body_case == PS__HEADER__BODY_ERROR, "request %llu: reply body %d, want %s",
                  id, (int)h->body_case, ps_errname(code));
    ck_assert_msg(h->error->code == code, "request %llu: error %s (%s), want %s", id,
                  h->error->code_name, h->error->message, ps_errname(code));
    ck_assert_str_eq(h->error->code_name, ps_errname(code));
    ck_assert_msg(h->error->message && h->error->message[0], "request %llu: empty error message",
                  id);
    ck_assert_msg(!want || strstr(h->error->message, want), "request %llu: no '%s' in: %s", id,
                  want, h->error->message);
    ck_assert_uint_eq(h->request_id, request_id);
    ck_assert_uint_eq(f.n, 1); /* an error carries no payload frames */
    ps_frames_close(&f);
    ps__header__free_unpacked(h, NULL);
}

void raw_pb_varint(raw_pb *p, uint64_t v) {
    do {
        ck_assert_uint_lt(p->n, sizeof p->b);
        p->b[p->n++] = (uint8_t)(v >= 0x80 ? (v & 0x7f) | 0x80 : v);
        v >>= 7;
    } while (v);
}

void raw_pb_bytes(raw_pb *p, unsigned field, const void *data, size_t len) {
    raw_pb_varint(p, (uint64_t)field << 3 | 2u);
    raw_pb_varint(p, len);
    ck_assert_uint_le(p->n + len, sizeof p->b);
    memcpy(p->b + p->n, data, len);
    p->n += len;
}

raw_pb raw_pb_meta2(const char *name, size_t len) {
    raw_pb m = {.n = 0};
    raw_pb_bytes(&m, 1, name, len);
    const uint8_t rest[] = {0x10, 0x01, 0x1a, 0x01, 0x02, 0x20, 0x08}; /* F32, [2], 8 bytes */
    memcpy(m.b + m.n, rest, sizeof rest);
    m.n += sizeof rest;
    return m;
}

void raw_send_body(raw_conn *r, uint64_t request_id, unsigned field, const raw_pb *body,
                   size_t n_payloads, const float *payload) {
    raw_pb h = {.n = 0};
    raw_pb_varint(&h, 1 << 3);
    raw_pb_varint(&h, PS_PROTOCOL_VERSION);
    raw_pb_varint(&h, 2 << 3);
    raw_pb_varint(&h, request_id);
    raw_pb_bytes(&h, field, body->b, body->n);
    const void *data[3] = {h.b, payload, payload};
    size_t lens[3] = {h.n, 2 * sizeof(float), 2 * sizeof(float)};
    ck_assert_uint_le(n_payloads, 2);
    raw_send(r, data, lens, 1 + n_payloads);
}

/* ---- a fake shard: a ROUTER in a thread ---- */

static void *router_main(void *arg) {
    raw_router *r = arg;
    while (!atomic_load(&r->stop)) {
        zmq_pollitem_t item = {r->sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, 20) <= 0 || !(item.revents & ZMQ_POLLIN)) continue;
        ps_frames f;
        if (ps_frames_recv(r->sock, ZMQ_DONTWAIT, &f) != PS_OK) continue;
        Ps__Header *h = NULL;
        char err[256];
        if (f.n >= 2 &&
            ps_header_decode(zmq_msg_data(&f.frames[1]), zmq_msg_size(&f.frames[1]), &h, err,
                             sizeof err) == PS_OK &&
            r->fn(r, &f.frames[0], h, &f, r->user))
            h = NULL; /* kept */
        if (h) ps__header__free_unpacked(h, NULL);
        ps_frames_close(&f);
    }
    return NULL;
}

void raw_router_start(raw_router *r, raw_router_fn fn, void *user) {
    memset(r, 0, sizeof *r);
    r->fn = fn;
    r->user = user;
    r->ctx = zmq_ctx_new();
    ck_assert_ptr_nonnull(r->ctx);
    r->sock = zmq_socket(r->ctx, ZMQ_ROUTER);
    ck_assert_ptr_nonnull(r->sock);
    int linger = 0;
    zmq_setsockopt(r->sock, ZMQ_LINGER, &linger, sizeof linger);
    ck_assert_int_eq(zmq_bind(r->sock, "tcp://127.0.0.1:*"), 0);
    char last[64];
    size_t len = sizeof last;
    ck_assert_int_eq(zmq_getsockopt(r->sock, ZMQ_LAST_ENDPOINT, last, &len), 0);
    snprintf(r->endpoint, sizeof r->endpoint, "%.40s", last + strlen("tcp://"));
    ck_assert_int_eq(pthread_create(&r->thread, NULL, router_main, r), 0);
    r->running = 1;
}

void raw_router_stop(raw_router *r) {
    if (!r->running) return;
    atomic_store(&r->stop, 1);
    pthread_join(r->thread, NULL);
    zmq_close(r->sock);
    zmq_ctx_term(r->ctx);
    r->running = 0;
}

void raw_router_reply(raw_router *r, const zmq_msg_t *id, uint64_t request_id, Ps__Header *h,
                      const ps_payload *pl, size_t n) {
    h->protocol_version = PS_PROTOCOL_VERSION;
    h->request_id = request_id;
    ps_wire_send(r->sock, zmq_msg_data((zmq_msg_t *)id), zmq_msg_size(id), h, pl, n, ZMQ_DONTWAIT);
}
