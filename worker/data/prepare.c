/* The prepare step (prepare.h). */
#include "prepare.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapt.h"
#include "augment.h"
#include "ps_error.h"

struct ps_prep {
    size_t out_h, out_w, out_c;
    bool has_plan; /* the data spec's "preprocess" */
    ps_aug_plan plan;
    int rgb_to_gray;
};

static int grow(float **scratch, size_t *cap, size_t need) {
    if (*cap >= need) return PS_OK;
    float *b = realloc(*scratch, need * sizeof *b);
    if (!b) return PS_ENOMEM;
    *scratch = b, *cap = need;
    return PS_OK;
}

int ps_prep_new(const struct cJSON *preprocess, size_t out_h, size_t out_w, size_t out_c,
                int rgb_to_gray, ps_prep **out, char *err, size_t errlen) {
    *out = NULL;
    ps_prep *p = calloc(1, sizeof *p);
    if (!p) return PS_ENOMEM;
    p->out_h = out_h, p->out_w = out_w, p->out_c = out_c;
    p->rgb_to_gray = rgb_to_gray;
    if (preprocess) {
        int rc = ps_aug_plan_parse(preprocess, &p->plan, err, errlen);
        if (rc != PS_OK) {
            free(p);
            return rc;
        }
        p->has_plan = true;
    }
    *out = p;
    return PS_OK;
}

void ps_prep_free(ps_prep *p) {
    free(p);
}

void ps_prep_describe(const ps_prep *p, char *out, size_t outlen) {
    if (p->has_plan) {
        ps_aug_describe(&p->plan, out, outlen);
        return;
    }
    snprintf(out, outlen, "none; images of another size resized (bilinear) to %zux%zux%zu",
             p->out_h, p->out_w, p->out_c);
}

int ps_prep_shape(const ps_prep *p, size_t h, size_t w, size_t c, size_t *oh, size_t *ow,
                  size_t *oc, char *err, size_t errlen) {
    if (p->has_plan) {
        int rc = ps_aug_plan_shape(&p->plan, h, w, c, oh, ow, oc, err, errlen);
        if (rc != PS_OK || !p->out_h) return rc;
    } else if (!p->out_h) {
        *oh = h, *ow = w, *oc = c;
        return PS_OK;
    }
    bool flat = (*oh == 1 && *ow == 1) || (p->out_h == 1 && p->out_w == 1);
    bool same = *oh == p->out_h && *ow == p->out_w && *oc == p->out_c;
    if (p->has_plan && !same && !(flat && *oh * *ow * *oc == p->out_h * p->out_w * p->out_c)) {
        snprintf(err, errlen,
                 "%zux%zux%zu after the data spec's \"preprocess\" (from %zux%zux%zu), the model "
                 "takes %zux%zux%zu",
                 *oh, *ow, *oc, h, w, c, p->out_h, p->out_w, p->out_c);
        return PS_ESHAPE;
    }
    *oh = p->out_h, *ow = p->out_w, *oc = p->out_c;
    return PS_OK;
}

int ps_prep_run(void *ctx, const ps_sample *s, float *out, float **scratch, size_t *cap,
                uint64_t seed, bool training, char *err, size_t errlen) {
    const ps_prep *p = ctx;
    if (p->has_plan) {
        size_t oh, ow, oc;
        int rc = ps_prep_shape(p, s->h, s->w, s->c, &oh, &ow, &oc, err, errlen);
        if (rc != PS_OK) return rc == PS_EINVAL ? PS_ESHAPE : rc;
        if (grow(scratch, cap, ps_aug_scratch_floats(&p->plan, s->h, s->w, s->c) + 1) != PS_OK)
            return PS_ENOMEM;
        ps_aug_apply(&p->plan, s->x, s->h, s->w, s->c, out, *scratch, seed, training);
        return PS_OK;
    }
    size_t dim = p->out_h * p->out_w * p->out_c, n = s->h * s->w * s->c;
    bool flat = (s->h == 1 && s->w == 1) || (p->out_h == 1 && p->out_w == 1);
    if ((s->h == p->out_h && s->w == p->out_w && s->c == p->out_c) || (flat && n == dim)) {
        memcpy(out, s->x, dim * sizeof *out);
        return PS_OK;
    }
    ps_adapt_plan plan;
    char why[256];
    if (flat || ps_adapt_plan_make(s->h, s->w, s->c, p->out_h, p->out_w, p->out_c,
                                   PS_ADAPT_RESIZE, p->rgb_to_gray, &plan, why,
                                   sizeof why) != PS_OK) {
        snprintf(err, errlen,
                 "%zux%zux%zu, the model takes %zux%zux%zu (the data spec's \"preprocess\" "
                 "makes records fit)",
                 s->h, s->w, s->c, p->out_h, p->out_w, p->out_c);
        return PS_ESHAPE;
    }
    if (grow(scratch, cap, s->h * s->w * p->out_c) != PS_OK) return PS_ENOMEM;
    ps_adapt_image(&plan, s->x, out, *scratch);
    return PS_OK;
}
