/* psd's HTTP endpoint (see metrics.h): renders the server's counters in the
 * Prometheus text exposition format (0.0.4) and answers health checks. */
#include "metrics.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "log.h"
#include "ps_error.h"
#include "server.h"

#define PROM_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define TEXT_TYPE "text/plain; charset=utf-8"

struct ps_metrics {
    ps__http_server *http; /* frees itself once its handles are closed */
};

/* A growing text buffer; on allocation failure it stays marked failed. */
typedef struct {
    char *p;
    size_t len, cap;
    int failed;
} buf;

__attribute__((format(printf, 2, 3))) static void add(buf *b, const char *fmt, ...) {
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap - b->len <= (size_t)n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

/* # HELP and # TYPE lines of one metric family. */
static void family(buf *b, const char *name, const char *type, const char *help) {
    add(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample with the shard label and optionally one more (lname="lvalue"). */
static void sample_u(buf *b, long shard, const char *name, const char *lname, const char *lvalue,
                     unsigned long long v) {
    if (lname)
        add(b, "%s{shard=\"%ld\",%s=\"%s\"} %llu\n", name, shard, lname, lvalue, v);
    else
        add(b, "%s{shard=\"%ld\"} %llu\n", name, shard, v);
}

static void sample_f(buf *b, long shard, const char *name, double v) {
    add(b, "%s{shard=\"%ld\"} %.9g\n", name, shard, v);
}

static void counter(buf *b, long shard, const char *name, const char *help, uint64_t v) {
    family(b, name, "counter", help);
    sample_u(b, shard, name, NULL, NULL, v);
}

static void gauge(buf *b, long shard, const char *name, const char *help, uint64_t v) {
    family(b, name, "gauge", help);
    sample_u(b, shard, name, NULL, NULL, v);
}

/* The message name of a Header body case ("Pull", "CreateVars"), from the
 * protobuf descriptor; "invalid" for 0 (undecodable), NULL when unknown. */
static const char *body_name(unsigned bc) {
    if (bc == 0) return "invalid";
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field(&ps__header__descriptor, bc);
    if (!f || f->type != PROTOBUF_C_TYPE_MESSAGE || !f->descriptor) return NULL;
    return ((const ProtobufCMessageDescriptor *)f->descriptor)->short_name;
}

/* Request types always listed (with 0); others appear once counted. */
static const unsigned served_types[] = {
    PS__HEADER__BODY_HELLO,          PS__HEADER__BODY_CREATE_VARS,   PS__HEADER__BODY_PULL,
    PS__HEADER__BODY_PUSH,           PS__HEADER__BODY_STATS,         PS__HEADER__BODY_SHUTDOWN,
    PS__HEADER__BODY_GOODBYE,        PS__HEADER__BODY_CHECKPOINT,    PS__HEADER__BODY_PUSH_PULL,
    PS__HEADER__BODY_REPORT_METRICS, PS__HEADER__BODY_QUERY_METRICS,
};

static int is_served(unsigned bc) {
    for (size_t i = 0; i < sizeof served_types / sizeof served_types[0]; i++)
        if (served_types[i] == bc) return 1;
    return 0;
}

static void render_requests(buf *b, const ps_server *s) {
    long sh = s->cfg.shard;
    family(b, "psd_requests_total", "counter",
           "Requests received, by type (invalid: no decodable header).");
    for (unsigned bc = 0; bc < PS_BODY_CASES; bc++) {
        uint64_t v = s->stats.by_type[bc];
        if (bc == PS__HEADER__BODY_HEARTBEAT || (!v && bc != 0 && !is_served(bc))) continue;
        const char *name = body_name(bc);
        char other[32];
        if (!name) {
            snprintf(other, sizeof other, "case_%u", bc);
            name = other;
        }
        sample_u(b, sh, "psd_requests_total", "type", name, v);
    }
    counter(b, sh, "psd_heartbeats_total", "Worker heartbeats received (not answered).",
            s->stats.heartbeats);
    counter(b, sh, "psd_loop_stalls_total",
            "Membership checks that ran late by more than a tick (psd's own stall; the time "
            "was not held against the workers).",
            s->shard.members.stalls);
    family(b, "psd_errors_total", "counter", "Error replies sent, by error code.");
    for (int i = 1; i < PS_ERR_CODES; i++) {
        const char *name = ps_errname(-i);
        if (strcmp(name, "EUNKNOWN") != 0 || s->stats.by_error[i])
            sample_u(b, sh, "psd_errors_total", "code", name, s->stats.by_error[i]);
    }
    if (s->stats.by_error[0])
        sample_u(b, sh, "psd_errors_total", "code", "EUNKNOWN", s->stats.by_error[0]);
}

static void render_histogram(buf *b, const ps_server *s) {
    const char *h = "psd_apply_latency_seconds";
    long sh = s->cfg.shard;
    family(b, h, "histogram", "Time to apply one update to the shard's variables.");
    uint64_t cum = 0;
    for (int i = 0; i < PS_LAT_BUCKETS; i++) {
        cum += s->shard.stats.lat_buckets[i];
        add(b, "%s_bucket{shard=\"%ld\",le=\"%g\"} %llu\n", h, sh, ps_shard_lat_bounds[i],
            (unsigned long long)cum);
    }
    cum += s->shard.stats.lat_buckets[PS_LAT_BUCKETS];
    add(b, "%s_bucket{shard=\"%ld\",le=\"+Inf\"} %llu\n", h, sh, (unsigned long long)cum);
    add(b, "%s_sum{shard=\"%ld\"} %.9g\n", h, sh, s->shard.stats.lat_sum);
    add(b, "%s_count{shard=\"%ld\"} %llu\n", h, sh, (unsigned long long)s->shard.stats.lat_count);
}

/* A label value as the text format wants it: backslash, quote and newline escaped. */
static const char *label_escape(const char *in, char *out, size_t cap) {
    size_t o = 0;
    for (const char *p = in; *p && o + 3 < cap; p++) {
        if (*p == '\\' || *p == '"') out[o++] = '\\', out[o++] = *p;
        else if (*p == '\n') out[o++] = '\\', out[o++] = 'n';
        else out[o++] = *p;
    }
    out[o] = 0;
    return out;
}

/* The embedding tables' counts, one sample per table (label table="NAME"). */
static void render_tables(buf *b, const ps_server *s) {
    static const struct {
        const char *name, *type, *help;
        size_t off;
    } fam[] = {
        {"psd_table_rows", "gauge", "Rows of the embedding table stored on the shard.",
         offsetof(ps_table_counts, rows)},
        {"psd_table_rows_admitted_total", "counter",
         "Rows stored since the start (first push, or min_count reached).",
         offsetof(ps_table_counts, admitted)},
        {"psd_table_rows_evicted_total", "counter",
         "Rows removed at the shard's cap (least recently pushed).",
         offsetof(ps_table_counts, evicted)},
        {"psd_table_rows_expired_total", "counter", "Rows removed for the table's TTL.",
         offsetof(ps_table_counts, expired)},
        {"psd_table_rows_refused_total", "counter",
         "New rows refused at the shard's cap (refuse_when_full).",
         offsetof(ps_table_counts, refused)},
        {"psd_table_gradients_dropped_total", "counter",
         "Row gradients not applied: the row not admitted yet, or refused.",
         offsetof(ps_table_counts, dropped)},
        {"psd_table_bytes", "gauge", "Memory of the table's rows, their state and index.",
         offsetof(ps_table_counts, bytes)},
    };
    if (!s->shard.tables.n) return;
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        family(b, fam[f].name, fam[f].type, fam[f].help);
        for (size_t i = 0; i < s->shard.tables.n; i++) {
            const ps_table_entry *e = s->shard.tables.v[i];
            ps_table_counts c;
            ps_table_stats_get(e->t, &c);
            uint64_t v;
            memcpy(&v, (const char *)&c + fam[f].off, sizeof v);
            char esc[2 * PS_WIRE_MAX_NAME + 4];
            sample_u(b, s->cfg.shard, fam[f].name, "table", label_escape(e->name, esc, sizeof esc),
                     (unsigned long long)v);
        }
    }
    family(b, "psd_table_max_rows", "gauge", "Rows the table stores on the shard at most: its max_rows, or less by --max-table-mb.");
    for (size_t i = 0; i < s->shard.tables.n; i++) {
        char esc[2 * PS_WIRE_MAX_NAME + 4];
        sample_u(b, s->cfg.shard, "psd_table_max_rows", "table",
                 label_escape(s->shard.tables.v[i]->name, esc, sizeof esc),
                 (unsigned long long)ps_table_limit(s->shard.tables.v[i]->t));
    }
}

/* One gauge sample per limit flag, so a dashboard can show use against limit. */
static void render_limits(buf *b, const ps_server *s) {
    static const struct {
        const char *flag;
        size_t off;
    } lim[] = {
        {"max-pending-pulls", offsetof(ps_server_config, max_pending_pulls)},
        {"max-pending-per-peer", offsetof(ps_server_config, max_pending_per_peer)},
        {"max-pending-mb", offsetof(ps_server_config, max_pending_mb)},
        {"max-pull-wait-ms", offsetof(ps_server_config, max_pull_wait_ms)},
        {"zmq-rcvhwm", offsetof(ps_server_config, zmq_rcvhwm)},
        {"zmq-sndhwm", offsetof(ps_server_config, zmq_sndhwm)},
        {"turn-messages", offsetof(ps_server_config, turn_messages)},
        {"max-message-mb", offsetof(ps_server_config, max_message_mb)},
        {"max-tensor-mb", offsetof(ps_server_config, max_tensor_mb)},
        {"max-vars", offsetof(ps_server_config, max_vars)},
    };
    family(b, "psd_limit", "gauge", "psd's configured limits, by flag.");
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++) {
        long v;
        memcpy(&v, (const char *)&s->cfg + lim[i].off, sizeof v);
        sample_u(b, s->cfg.shard, "psd_limit", "flag", lim[i].flag, (unsigned long long)v);
    }
}

/* The deferred pulls, the loop's turns and the HTTP connections: what peers can make
 * psd hold, against its limits. */
static void render_queues(buf *b, const ps_server *s) {
    long sh = s->cfg.shard;
    const ps_pending *q = &s->shard.pending;
    gauge(b, sh, "psd_pending_pulls", "Pulls waiting for a version that does not exist yet.", q->n);
    gauge(b, sh, "psd_pending_pull_bytes", "Memory held by waiting pulls (--max-pending-mb).",
          q->bytes);
    gauge(b, sh, "psd_pending_peers", "Connections with waiting pulls.", q->n_peers);
    counter(b, sh, "psd_pending_pulls_refused_total",
            "Pulls refused with EBUSY: a --max-pending-* limit was reached.", q->refused);
    counter(b, sh, "psd_pending_pulls_timed_out_total",
            "Waiting pulls answered ETIMEDOUT after --max-pull-wait-ms.", q->timed_out);
    counter(b, sh, "psd_pending_pulls_released_total",
            "Waiting pulls released: their connection closed or their worker was removed.",
            q->released);
    counter(b, sh, "psd_loop_turns_cut_total",
            "Loop turns that stopped reading requests at --turn-messages or 10 ms.",
            s->stats.turns_cut);
    counter(b, sh, "psd_http_connections_evicted_total",
            "HTTP connections closed to make room for a new one.",
            s->metrics ? ps__http_server_evicted(s->metrics->http) : 0);
    render_limits(b, s);
}

/* The whole exposition; returns a malloc'd text (length in *len) or NULL. */
static char *render(const ps_server *s, size_t *len) {
    buf b = {0};
    const ps_server_stats *st = &s->stats;
    long sh = s->cfg.shard;
    uint64_t now = ps__now_ns();
    render_requests(&b, s);
    counter(&b, sh, "psd_bytes_received_total", "Bytes of requests received (all frames).",
            st->bytes_in);
    counter(&b, sh, "psd_push_bytes_received_total",
            "Gradient payload bytes of pushes received, as sent (encoded with --compression).",
            st->push_bytes);
    counter(&b, sh, "psd_bytes_sent_total", "Bytes of payload frames sent in replies.",
            st->bytes_out);
    counter(&b, sh, "psd_replies_dropped_total",
            "Replies dropped because the peer was gone or not reading.", st->dropped_replies);
    counter(&b, sh, "psd_pushes_applied_total", "Pushes accepted into a step or applied.",
            s->shard.stats.pushes_applied);
    counter(&b, sh, "psd_stale_pushes_dropped_total",
            "Pushes dropped: for a closed step or a second one from the same worker.",
            s->shard.stats.dropped_pushes);
    counter(&b, sh, "psd_retried_pushes_total",
            "Pushes that repeated one already applied (same session and seq): answered, not "
            "applied again.",
            s->shard.stats.retried_pushes);
    counter(&b, sh, "psd_updates_applied_total", "Optimizer updates applied to the variables.",
            s->shard.stats.updates_applied);
    gauge(&b, sh, "psd_version", "The shard's version (sync: completed steps; async: applies).",
          s->shard.step.version);
    gauge(&b, sh, "psd_live_workers", "Workers in the expected set.", s->shard.members.live);
    gauge(&b, sh, "psd_workers", "Workers in the job (--workers).", (uint64_t)s->cfg.workers);
    counter(&b, sh, "psd_workers_removed_total", "Workers removed after --worker-timeout.",
            s->shard.members.removed);
    counter(
        &b, sh, "psd_auth_denied_total",
        "Connections refused by CurveZMQ authentication (unknown key, plaintext, bad handshake).",
        st->auth_denied);
    render_queues(&b, s);
    gauge(&b, sh, "psd_max_staleness", "Async: the largest push staleness seen (clocks).",
          s->shard.stats.max_staleness);
    counter(&b, sh, "psd_staleness_waits_total", "Async: pulls deferred by --staleness.",
            s->shard.stats.staleness_waits);
    counter(&b, sh, "psd_checkpoints_total", "Checkpoints written.", st->checkpoints);
    counter(&b, sh, "psd_checkpoint_failures_total",
            "Checkpoints that could not be written (timer, request or shutdown).",
            st->checkpoint_failures);
    if (s->ckpt_ns) {
        family(&b, "psd_checkpoint_age_seconds", "gauge",
               "Time since the newest checkpoint was written or restored.");
        sample_f(&b, sh, "psd_checkpoint_age_seconds", (double)(now - s->ckpt_ns) / 1e9);
    }
    family(&b, "psd_uptime_seconds", "gauge", "Time since psd started.");
    sample_f(&b, sh, "psd_uptime_seconds", (double)(now - s->start_ns) / 1e9);
    uint64_t params = 0;
    for (size_t i = 0; i < s->shard.store.n; i++)
        params += s->shard.store.vars[i]->numel;
    gauge(&b, sh, "psd_variables", "Variables held by the shard.", s->shard.store.n);
    gauge(&b, sh, "psd_parameters", "Float values held by the shard (sum over its variables).",
          params);
    family(&b, "psd_mode", "gauge", "The shard's mode (sync or async); always 1.");
    sample_u(&b, sh, "psd_mode", "mode", ps_mode_name(s->cfg.mode), 1);
    render_tables(&b, s);
    render_histogram(&b, s);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

static void handle(void *ctx, const char *path, ps__http_response *r) {
    ps_server *s = ctx;
    const char *text = NULL;
    if (strcmp(path, "/metrics") == 0) {
        r->status = 200;
        r->content_type = PROM_TYPE;
        r->body = render(s, &r->body_len);
        if (!r->body) r->body_len = 1; /* the server answers 500 */
        return;
    }
    if (strcmp(path, "/healthz") == 0) {
        r->status = s->stopping ? 503 : 200;
        text = s->stopping ? "stopping\n" : "ok\n";
    } else {
        r->status = 404;
        text = "not found\n";
    }
    r->content_type = TEXT_TYPE;
    r->body_len = strlen(text);
    r->body = malloc(r->body_len);
    if (r->body) memcpy(r->body, text, r->body_len);
}

int ps__metrics_start(struct ps_server *s, char *err, size_t errlen) {
    if (s->cfg.metrics_port < 0) return PS_OK;
    struct ps_metrics *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    int rc = ps__http_server_start(s->loop, s->cfg.metrics_bind, (int)s->cfg.metrics_port, handle,
                                   s, &m->http, err, errlen);
    if (rc != PS_OK) {
        free(m);
        return rc;
    }
    s->metrics = m;
    char addr[128];
    if (ps__http_server_address(m->http, addr, sizeof addr) == PS_OK)
        PS_INFO("metrics on http://%s/metrics", addr);
    return PS_OK;
}

void ps__metrics_stop(struct ps_server *s) {
    if (!s->metrics) return;
    ps__http_server_stop(s->metrics->http);
    free(s->metrics);
    s->metrics = NULL;
}
