/* A shard's version and open sync step (see step.h). */
#include "step.h"

#include <stdlib.h>
#include <string.h>

#include "ps_error.h"

int ps_step_init(ps_step *st, uint32_t n) {
    memset(st, 0, sizeof *st);
    st->pushed = calloc(n ? n : 1, 1);
    st->n = n;
    return st->pushed ? PS_OK : PS_ENOMEM;
}

void ps_step_free(ps_step *st) {
    free(st->pushed);
    st->pushed = NULL;
}

ps_step_verdict ps_step_admit(const ps_step *st, uint32_t w, uint64_t step) {
    if (step > st->version) return PS_STEP_AHEAD;
    if (step < st->version || st->pushed[w]) return PS_STEP_DROP;
    return PS_STEP_ADMIT;
}

uint32_t ps_step_needed(const ps_step *st, uint32_t to_aggregate, uint32_t live) {
    uint32_t need = to_aggregate ? to_aggregate : st->n;
    if (need > live) need = live;
    return need ? need : 1;
}

void ps_step_count(ps_step *st, uint32_t w) {
    st->pushed[w] = 1;
    st->pushes++;
}

int ps_step_ready(const ps_step *st, uint32_t needed) {
    return st->pushes > 0 && st->pushes >= needed;
}

void ps_step_close(ps_step *st) {
    st->version++;
    st->pushes = 0;
    memset(st->pushed, 0, st->n);
}
