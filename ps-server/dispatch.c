/* The one dispatch table: checks run in a fixed order (frames present, header
 * decodes, protocol version, known request type, payload frames match the
 * header) before any handler; every failure gets an Error reply. */
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "ps_error.h"
#include "replica.h"
#include "server.h"
#include "utf8.h"

typedef int (*handler_fn)(ps_server *, ps_request *, char *, size_t);

typedef struct {
    Ps__Header__BodyCase body;
    const char *name;
    handler_fn fn;
    int has_payloads; /* 1: payload frames allowed (checked by the handler against its metas) */
} dispatch_entry;

static const dispatch_entry table[] = {
    {PS__HEADER__BODY_HELLO, "Hello", ps__handle_hello, 0},
    {PS__HEADER__BODY_CREATE_VARS, "CreateVars", ps__handle_create_vars, 1},
    {PS__HEADER__BODY_PULL, "Pull", ps__handle_pull, 0},
    {PS__HEADER__BODY_PUSH, "Push", ps__handle_push, 1},
    {PS__HEADER__BODY_PUSH_PULL, "PushPull", ps__handle_push_pull, 1},
    {PS__HEADER__BODY_STATS, "Stats", ps__handle_stats, 0},
    {PS__HEADER__BODY_SHUTDOWN, "Shutdown", ps__handle_shutdown, 0},
    {PS__HEADER__BODY_HEARTBEAT, "Heartbeat", ps__handle_heartbeat, 0},
    {PS__HEADER__BODY_GOODBYE, "Goodbye", ps__handle_goodbye, 0},
    {PS__HEADER__BODY_CHECKPOINT, "Checkpoint", ps__handle_checkpoint, 0},
    {PS__HEADER__BODY_REPORT_METRICS, "ReportMetrics", ps__handle_report_metrics, 0},
    {PS__HEADER__BODY_QUERY_METRICS, "QueryMetrics", ps__handle_query_metrics, 0},
    {PS__HEADER__BODY_CREATE_TABLE, "CreateTable", ps__handle_create_table, 0},
    {PS__HEADER__BODY_PULL_ROWS, "PullRows", ps__handle_pull_rows, 1},
    {PS__HEADER__BODY_PUSH_ROWS, "PushRows", ps__handle_push_rows, 1},
    {PS__HEADER__BODY_FOLLOW, "Follow", ps__handle_follow, 0},
    {PS__HEADER__BODY_REPLICATE_ACK, "ReplicateAck", ps__handle_replicate_ack, 0},
};

/* What a replica that is not the primary still answers itself. */
static int served_by_any_replica(Ps__Header__BodyCase body) {
    return body == PS__HEADER__BODY_HELLO || body == PS__HEADER__BODY_STATS ||
           body == PS__HEADER__BODY_SHUTDOWN || body == PS__HEADER__BODY_FOLLOW ||
           body == PS__HEADER__BODY_REPLICATE_ACK || body == PS__HEADER__BODY_CHECKPOINT ||
           body == PS__HEADER__BODY_QUERY_METRICS;
}

static const dispatch_entry *lookup(Ps__Header__BodyCase body) {
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].body == body) return &table[i];
    return NULL;
}

void ps__server_dispatch(ps_server *s, ps_frames *f) {
    s->stats.bytes_in += f->bytes;
    if (f->n < 1) return;
    const void *id = zmq_msg_data(&f->frames[0]);
    size_t id_len = zmq_msg_size(&f->frames[0]);
    char err[512] = "";
    int rc;
    Ps__Header *hdr = NULL;
    uint64_t req_id = 0;
    const char *what = "request";

    if (f->n < 2) {
        s->stats.requests++;
        s->stats.by_type[0]++;
        rc = PS_EPROTO;
        snprintf(err, sizeof err, "message has no header frame");
    } else {
        rc = ps_header_decode(zmq_msg_data(&f->frames[1]), zmq_msg_size(&f->frames[1]), &hdr, err,
                              sizeof err);
        if (hdr) req_id = hdr->request_id;
        if (hdr && hdr->body_case == PS__HEADER__BODY_HEARTBEAT) {
            s->stats.heartbeats++; /* not a request: nothing is answered */
        } else {
            s->stats.requests++;
            unsigned bc = hdr ? (unsigned)hdr->body_case : 0u;
            s->stats.by_type[bc < PS_BODY_CASES ? bc : 0]++;
        }
        if (rc == PS_OK && f->truncated) {
            rc = PS_EPROTO;
            snprintf(err, sizeof err, "message has more than %u payload frames",
                     PS_WIRE_MAX_FRAMES);
        }
    }
    if (rc == PS_OK) {
        const dispatch_entry *e = lookup(hdr->body_case);
        if (!e) {
            rc = PS_EPROTO;
            snprintf(err, sizeof err, "request type %d is not something psd serves",
                     (int)hdr->body_case);
        } else if (!e->has_payloads && f->n > 2) {
            what = e->name;
            rc = PS_EPROTO;
            snprintf(err, sizeof err, "%s takes no payload frames but %zu followed", e->name,
                     f->n - 2);
        } else if (!ps__repl_serving(s) && !served_by_any_replica(e->body)) {
            what = e->name;
            if (e->body == PS__HEADER__BODY_HEARTBEAT) goto done; /* one-way: nothing to say */
            rc = PS_ENOTPRIMARY;
            ps__repl_not_primary(s, err, sizeof err);
        } else {
            what = e->name;
            /* the socket from the header frame: the ROUTER makes the identity frame
             * itself, and that one does not carry it */
            ps_request r = {id,  id_len,        zmq_msg_get(&f->frames[1], ZMQ_SRCFD),
                            hdr, f->frames + 2, f->n - 2};
            rc = e->fn(s, &r, err, sizeof err);
        }
    }
    if (rc != PS_OK) {
        s->stats.errors++;
        s->stats.by_error[-rc > 0 && -rc < PS_ERR_CODES ? -rc : 0]++;
        PS_DEBUG("%s %llu: %s: %s", what, (unsigned long long)req_id, ps_errname(rc), err);
        ps__server_reply_error(s, id, id_len, req_id, rc, err);
    }
done:
    if (hdr) ps__header__free_unpacked(hdr, NULL);
    ps__repl_after_request(s);
}

/* Counts a dropped reply; logs at most one line a second (a peer flooding requests
 * without reading its replies must not make psd spend its time logging). */
static void note_dropped(ps_server *s, uint64_t request_id, int zerr) {
    s->stats.dropped_replies++;
    s->drops_unlogged++;
    uint64_t now = ps__now_ns();
    if (s->drop_log_ns && now - s->drop_log_ns < 1000000000ull) return;
    if (s->drops_unlogged == 1)
        PS_WARN("reply to request %llu dropped: %s", (unsigned long long)request_id,
                zmq_strerror(zerr));
    else
        PS_WARN("%llu replies dropped in the last %.1f s (peers gone or not reading; last: "
                "request %llu, %s)",
                (unsigned long long)s->drops_unlogged, (double)(now - s->drop_log_ns) / 1e9,
                (unsigned long long)request_id, zmq_strerror(zerr));
    s->drops_unlogged = 0;
    s->drop_log_ns = now;
}

void ps__server_log_drops(ps_server *s) {
    if (!s->drops_unlogged || ps__now_ns() - s->drop_log_ns < 1000000000ull) return;
    PS_WARN("%llu replies dropped in the last %.1f s (peers gone or not reading)",
            (unsigned long long)s->drops_unlogged, (double)(ps__now_ns() - s->drop_log_ns) / 1e9);
    s->drops_unlogged = 0;
    s->drop_log_ns = ps__now_ns();
}

int ps__server_reply(ps_server *s, const void *identity, size_t identity_len, uint64_t request_id,
                     Ps__Header *hdr, const ps_payload *payloads, size_t n_payloads) {
    hdr->protocol_version = PS_PROTOCOL_VERSION;
    hdr->request_id = request_id;
    for (size_t i = 0; i < n_payloads; i++)
        s->stats.bytes_out += payloads[i].len;
    /* a replicated primary sends it once the backup has what it shows */
    if (ps__repl_hold(s, identity, identity_len, hdr, payloads, n_payloads)) return PS_OK;
    /* Never block the loop: a peer that is gone or not reading loses its reply. */
    int rc =
        ps_wire_send(s->router, identity, identity_len, hdr, payloads, n_payloads, ZMQ_DONTWAIT);
    if (rc != PS_OK) note_dropped(s, request_id, zmq_errno());
    return rc;
}

void ps__pending_answer_error(void *server, ps_pending_pull *p, int code, const char *msg) {
    ps__server_reply_error(server, p->peer->identity, p->peer->identity_len, p->request_id, code,
                           msg);
}

void ps__server_reply_error(ps_server *s, const void *identity, size_t identity_len,
                            uint64_t request_id, int code, const char *msg) {
    Ps__Header h = PS__HEADER__INIT;
    Ps__Error e = PS__ERROR__INIT;
    e.code = code;
    e.code_name = (char *)ps_errname(code);
    /* A reason cut by snprintf may end inside a multibyte character: the reply
     * must still pass the peer's UTF-8 check (ps_header_decode). */
    char text[600];
    e.message = ps_utf8_sanitize(msg, text, sizeof text);
    h.body_case = PS__HEADER__BODY_ERROR;
    h.error = &e;
    ps__server_reply(s, identity, identity_len, request_id, &h, NULL, 0);
}
