/* The shard's log entries on the wire (log_codec.h). */
#include "log_codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_tables.h"
#include "ps_error.h"

static size_t shape_numel(size_t rank, const uint64_t *shape) {
    size_t n = 1;
    for (size_t i = 0; i < rank; i++)
        n *= (size_t)shape[i];
    return n;
}

int ps__log_encode(const ps_shard *sh, const ps_shard_event *e, ps_log_out *o) {
    Ps__LogEntry *m = &o->msg;
    ps__log_entry__init(m);
    o->n = 0;
    m->kind = (uint32_t)e->kind;
    m->worker = e->worker;
    m->step = e->step;
    m->clock = e->clock;
    m->session = e->session;
    m->seq = e->seq;
    m->skipped = e->skipped;
    m->name = (char *)(e->name ? e->name : "");
    m->version = e->version;
    m->n = e->n;
    switch (e->kind) {
    case PS_EV_CREATE_VAR:
        m->n_shape = e->rank;
        m->shape = (uint64_t *)e->shape;
        ps_opt_spec_to_proto(&e->opt, &o->opt);
        m->opt = &o->opt.msg;
        o->data[0] = e->values;
        o->len[0] = shape_numel(e->rank, e->shape) * sizeof(float);
        o->n = 1;
        break;
    case PS_EV_CREATE_TABLE:
        m->num_rows = e->num_rows;
        ps_ckpt_table_attr_encode(o->table, e->num_rows, e->table);
        m->table.data = o->table;
        m->table.len = sizeof o->table;
        break;
    case PS_EV_PUSH:
        if (e->n > PS_LOG_MAX_PAYLOADS) return PS_EINVAL;
        m->n_names = e->n;
        m->names = (char **)e->names;
        for (size_t i = 0; i < e->n && !e->skipped; i++) {
            const ps_var *v = ps_store_find(&sh->store, e->names[i]);
            if (!v) return PS_EINVAL;
            o->data[i] = e->grads[i];
            o->len[i] = v->numel * sizeof(float);
            o->n = i + 1;
        }
        break;
    case PS_EV_PUSH_ROWS: {
        const ps_table_entry *t = ps_tables_find(&sh->tables, e->name);
        if (!t) return PS_EINVAL;
        o->data[0] = e->ids;
        o->len[0] = e->n * sizeof(uint64_t);
        o->data[1] = e->values;
        o->len[1] = e->n * t->cfg.dim * sizeof(float);
        o->n = 2;
        break;
    }
    default:
        break;
    }
    return PS_OK;
}

static int bad(char *err, size_t errlen, const char *what) {
    snprintf(err, errlen, "a log entry from the primary is malformed: %s", what);
    return PS_EPROTO;
}

int ps__log_decode(const ps_shard *sh, const Ps__LogEntry *m, const zmq_msg_t *f, size_t nf,
                   size_t *used, ps_log_in *in, char *err, size_t errlen) {
    memset(in, 0, sizeof *in);
    *used = 0;
    ps_shard_event *e = &in->e;
    e->kind = (ps_shard_event_kind)m->kind;
    e->worker = m->worker;
    e->step = m->step;
    e->clock = m->clock;
    e->session = m->session;
    e->seq = m->seq;
    e->skipped = m->skipped;
    e->name = m->name;
    e->version = m->version;
    e->n = (size_t)m->n;
    switch (e->kind) {
    case PS_EV_CREATE_VAR: {
        if (m->n_shape > 8 || !m->opt || nf < 1) return bad(err, errlen, "a variable");
        memcpy(in->shape, m->shape, m->n_shape * sizeof *m->shape);
        e->rank = m->n_shape;
        e->shape = in->shape;
        e->opt = ps_opt_spec_from_proto(m->opt);
        char why[200];
        if (ps_opt_spec_validate(&e->opt, why, sizeof why) != PS_OK) return bad(err, errlen, why);
        size_t bytes = shape_numel(e->rank, e->shape) * sizeof(float);
        if (zmq_msg_size((zmq_msg_t *)&f[0]) != bytes) return bad(err, errlen, "values' size");
        if (!(in->floats = malloc(bytes ? bytes : 1))) return PS_ENOMEM;
        memcpy(in->floats, zmq_msg_data((zmq_msg_t *)&f[0]), bytes);
        e->values = in->floats;
        *used = 1;
        break;
    }
    case PS_EV_CREATE_TABLE:
        if (m->table.len != PS_CKPT_TABLE_ATTR_BYTES) return bad(err, errlen, "a table");
        ps_ckpt_table_attr_decode(m->table.data, m->name, &e->num_rows, &in->table);
        e->num_rows = m->num_rows;
        e->table = &in->table;
        break;
    case PS_EV_PUSH: {
        size_t n = m->n_names, want = m->skipped ? 0 : n, total = 0;
        if (n > PS_LOG_MAX_PAYLOADS || nf < want) return bad(err, errlen, "a push");
        in->names = calloc(n ? n : 1, sizeof *in->names);
        in->grads = calloc(n ? n : 1, sizeof *in->grads);
        if (!in->names || !in->grads) return PS_ENOMEM;
        for (size_t i = 0; i < n; i++) {
            const ps_var *v = ps_store_find(&sh->store, m->names[i]);
            in->names[i] = m->names[i];
            if (!want) continue;
            if (!v || zmq_msg_size((zmq_msg_t *)&f[i]) != v->numel * sizeof(float))
                return bad(err, errlen, "a gradient's size");
            total += v->numel;
        }
        if (!(in->floats = malloc(total ? total * sizeof(float) : 1))) return PS_ENOMEM;
        size_t at = 0;
        for (size_t i = 0; i < want; i++) {
            size_t len = zmq_msg_size((zmq_msg_t *)&f[i]);
            memcpy(in->floats + at, zmq_msg_data((zmq_msg_t *)&f[i]), len);
            in->grads[i] = in->floats + at;
            at += len / sizeof(float);
        }
        e->n = n;
        e->names = in->names;
        e->grads = in->grads;
        *used = want;
        break;
    }
    case PS_EV_PUSH_ROWS: {
        const ps_table_entry *t = ps_tables_find(&sh->tables, m->name);
        if (!t || nf < 2) return bad(err, errlen, "a row push");
        size_t ids = zmq_msg_size((zmq_msg_t *)&f[0]), vals = zmq_msg_size((zmq_msg_t *)&f[1]);
        if (ids != e->n * sizeof(uint64_t) || vals != e->n * t->cfg.dim * sizeof(float))
            return bad(err, errlen, "a row push's sizes");
        in->ids = malloc(ids ? ids : 1);
        in->floats = malloc(vals ? vals : 1);
        if (!in->ids || !in->floats) return PS_ENOMEM;
        memcpy(in->ids, zmq_msg_data((zmq_msg_t *)&f[0]), ids);
        memcpy(in->floats, zmq_msg_data((zmq_msg_t *)&f[1]), vals);
        e->ids = in->ids;
        e->values = in->floats;
        *used = 2;
        break;
    }
    default:
        break;
    }
    return PS_OK;
}

void ps__log_in_free(ps_log_in *in) {
    free(in->names);
    free(in->grads);
    free(in->floats);
    free(in->ids);
    memset(in, 0, sizeof *in);
}
