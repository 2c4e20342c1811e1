/* psctl data synth-clicks: a synthetic Criteo-like click log (clicks.h) written as a TSV
 * a row at a time (constant memory whatever the row count), its parameters, click rate
 * and AUC ceiling beside it in FILE.json, and a line saying what was written. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clicks.h"
#include "data_cmd.h"

static int write_params(const char *path, const ps_clicks *g, const ps_clicks_stats *st) {
    FILE *f = fopen(path, "w");
    int rc = f ? ps_clicks_write_params(g, st, f) : -2;
    if (f && fclose(f) != 0) rc = -2;
    if (rc != 0) fprintf(stderr, "psctl data synth-clicks: %s: %s\n", path, strerror(errno));
    return rc;
}

int psctl_data_synth_clicks(long rows, long seed, const char *out) {
    if (!out || !out[0]) {
        fprintf(stderr, "psctl data synth-clicks: --out FILE.tsv is needed\n");
        return 2;
    }
    FILE *f = fopen(out, "w");
    if (!f) {
        fprintf(stderr, "psctl data synth-clicks: %s: %s\n", out, strerror(errno));
        return 1;
    }
    static char buf[1 << 20];
    setvbuf(f, buf, _IOFBF, sizeof buf);
    ps_clicks g;
    ps_clicks_init(&g, (uint64_t)seed);
    ps_clicks_stats st;
    int rc = ps_clicks_write(&g, (uint64_t)rows, f, &st);
    int saved = errno;
    if (fclose(f) != 0 && rc == 0) rc = -2, saved = errno;
    if (rc != 0) {
        fprintf(stderr, "psctl data synth-clicks: %s: %s\n", out,
                rc == -1 ? "out of memory" : strerror(saved));
        return 1;
    }
    size_t n = strlen(out);
    char *side = malloc(n + 6);
    if (!side) {
        fprintf(stderr, "psctl data synth-clicks: out of memory\n");
        return 1;
    }
    memcpy(side, out, n);
    memcpy(side + n, ".json", 6);
    rc = write_params(side, &g, &st);
    if (rc == 0)
        printf("wrote %llu rows to %s (label, %d numeric, %d categorical fields; seed %ld): "
               "click rate %.4f; AUC ceiling %.4f (+-%.1g; the true probabilities against the "
               "drawn labels); parameters in %s\n",
               (unsigned long long)st.rows, out, PS_CLICKS_NUM, PS_CLICKS_CAT, seed,
               st.rows ? (double)st.clicks / (double)st.rows : 0.0, st.auc, st.auc_bound,
               side);
    free(side);
    return rc == 0 ? 0 : 1;
}
