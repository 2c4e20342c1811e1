/* Trains a fixed toy model through psd shards with libps alone, for test_identical.py,
 * which does the same through the Python package and compares the bytes.
 *
 * usage: c_steps OUT STEPS OPTIMIZER_JSON ENDPOINT...
 *
 * The variables (shapes in VARS), their initial values and the gradients are fixed
 * functions, written here and in test_identical.py alike in float32 (built with
 * -ffp-contract=off so no multiply-add is fused):
 *   initial param[i] = (float)((i * 37 + 11 * v) % 101) * 0.01f - 0.5f   (v: the variable)
 *   grad[i] at step k = param[i] * 0.01f + (float)((i * 7 + k * 13) % 17) * 0.001f
 * with i the element's index in its whole variable. Placement is ps_place_vars's (the
 * large variable is split across the shards). Each step is psworker's exchange: a pull
 * when the last exchange did not bring the values back, then step_begin, grads_ready,
 * step_end. OUT gets every variable's final values, raw float32, in VARS order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps.h"

typedef struct {
    const char *name;
    size_t rank, shape[2];
} var_def;

static const var_def VARS[] = {
    {"dense/kernel", 2, {300, 400}}, /* 480 000 bytes: split in 2 parts by placement */
    {"dense/bias", 1, {7, 0}},
    {"emb", 2, {5, 3}},
};
#define N_VARS (sizeof VARS / sizeof VARS[0])

static size_t numel(const var_def *v) {
    return v->rank == 1 ? v->shape[0] : v->shape[0] * v->shape[1];
}

static int fail(ps_client *c, const char *what, int rc) {
    fprintf(stderr, "c_steps: %s: %s (%s)\n", what, ps_errname(rc), c ? ps_client_error(c) : "");
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 5 || !strcmp(argv[1], "--help")) {
        fprintf(argc < 5 ? stderr : stdout,
                "usage: c_steps OUT STEPS OPTIMIZER_JSON ENDPOINT...\n"
                "Trains test_identical.py's toy model through the psd shards at ENDPOINT...\n"
                "for STEPS steps and writes the final values to OUT (raw float32).\n");
        return argc < 5;
    }
    const char *out = argv[1];
    long steps = strtol(argv[2], NULL, 10);
    const char *const *eps = (const char *const *)&argv[4];
    unsigned n_shards = (unsigned)(argc - 4);
    char err[512];
    ps_opt_spec opt;
    if (ps_opt_spec_from_json_text(argv[3], &opt, err, sizeof err) != PS_OK) {
        fprintf(stderr, "c_steps: optimizer: %s\n", err);
        return 1;
    }

    float *param[N_VARS], *grad[N_VARS];
    ps_var_desc desc[N_VARS];
    for (size_t v = 0; v < N_VARS; v++) {
        size_t n = numel(&VARS[v]);
        param[v] = malloc(n * sizeof(float));
        grad[v] = calloc(n, sizeof(float));
        if (!param[v] || !grad[v]) return fail(NULL, "malloc", PS_ENOMEM);
        for (size_t i = 0; i < n; i++)
            param[v][i] = (float)((i * 37 + 11 * v) % 101) * 0.01f - 0.5f;
        desc[v] = (ps_var_desc){VARS[v].name, VARS[v].rank, VARS[v].shape};
    }
    ps_piece *pieces = NULL;
    size_t n_pieces = 0;
    if (ps_place_vars(desc, N_VARS, n_shards, &pieces, &n_pieces, err, sizeof err) != PS_OK) {
        fprintf(stderr, "c_steps: placement: %s\n", err);
        return 1;
    }

    ps_client *c = NULL;
    int rc = ps_client_open(&c, eps, n_shards, 0, 1, err, sizeof err);
    if (rc != PS_OK) {
        fprintf(stderr, "c_steps: %s\n", err);
        return 1;
    }
    ps_client_set_timeout(c, 60000);
    for (size_t k = 0; k < n_pieces; k++) {
        const ps_piece *pc = &pieces[k];
        const var_def *v = &VARS[pc->var];
        size_t row = v->rank == 1 ? 1 : v->shape[1];
        ps_client_tensor t = {.shard = pc->shard, .rank = v->rank, .opt = opt};
        snprintf(t.name, sizeof t.name, "%s", pc->name);
        t.shape[0] = pc->row_end - pc->row_begin;
        t.shape[1] = v->rank == 1 ? 0 : v->shape[1];
        t.param = param[pc->var] + pc->row_begin * row;
        t.grad = grad[pc->var] + pc->row_begin * row;
        if ((rc = ps_client_add(c, &t)) != PS_OK) return fail(c, "add", rc);
    }
    ps_pieces_free(pieces);

    uint64_t clock = 0;
    if ((rc = ps_client_hello(c, NULL, &clock)) != PS_OK) return fail(c, "hello", rc);
    if ((rc = ps_client_check_shards(c, NULL, 0, NULL)) != PS_OK) return fail(c, "check", rc);
    if ((rc = ps_client_create_vars(c, NULL)) != PS_OK) return fail(c, "create", rc);
    int fresh = 0;
    for (long k = 0; k < steps; k++, clock++) {
        if (!fresh && (rc = ps_client_pull_next(c, 0, clock, NULL)) != PS_OK)
            return fail(c, "pull_next", rc);
        if ((rc = ps_client_step_begin(c, clock)) != PS_OK) return fail(c, "step_begin", rc);
        for (size_t v = 0; v < N_VARS; v++) {
            size_t n = numel(&VARS[v]);
            for (size_t i = 0; i < n; i++)
                grad[v][i] = param[v][i] * 0.01f + (float)((i * 7 + (size_t)k * 13) % 17) * 0.001f;
            if ((rc = ps_client_grads_ready(c, grad[v], grad[v] + n)) != PS_OK)
                return fail(c, "grads_ready", rc);
        }
        size_t dropped = 0;
        if ((rc = ps_client_step_end(c, &dropped, &fresh)) != PS_OK) return fail(c, "step_end", rc);
        if (dropped) return fail(c, "step_end dropped a push", PS_EINTERNAL);
    }
    if (!fresh && (rc = ps_client_pull_next(c, 0, clock, NULL)) != PS_OK)
        return fail(c, "pull_next", rc);
    if ((rc = ps_client_goodbye(c)) != PS_OK) return fail(c, "goodbye", rc);
    ps_client_close(c);

    FILE *f = fopen(out, "wb");
    if (!f) {
        perror(out);
        return 1;
    }
    for (size_t v = 0; v < N_VARS; v++)
        fwrite(param[v], sizeof(float), numel(&VARS[v]), f);
    if (fclose(f) != 0) {
        perror(out);
        return 1;
    }
    for (size_t v = 0; v < N_VARS; v++) {
        free(param[v]);
        free(grad[v]);
    }
    return 0;
}
