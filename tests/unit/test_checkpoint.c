/* Check tests for psd's checkpoints: a store with every optimizer kind survives
 * save + restore bit for bit; keep-K pruning; a corrupt, truncated or foreign
 * newest file is skipped (and logged) in favour of an older valid one; empty,
 * missing and all-corrupt directories load nothing; a job id round-trips (layout 2). */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "optim.h"
#include "ps_error.h"
#include "store.h"
#include "tensorfile.h"
#include "testutil.h"

/* Creates a variable with seeded values and applies `steps` seeded updates, so
 * its slots and update count are not at their initial values. */
static void add_var(ps_store *st, const char *name, size_t rank, const uint64_t *shape,
                    ps_opt_spec spec, int steps, uint64_t seed) {
    size_t numel = 1;
    for (size_t d = 0; d < rank; d++)
        numel *= (size_t)shape[d];
    float *init = malloc(numel * sizeof(float)), *g = malloc(numel * sizeof(float));
    ps_test_fill_uniform(init, numel, seed, -1, 1);
    ps_var *v;
    ck_assert_int_eq(ps_store_create(st, name, rank, shape, init, &spec, &v), PS_OK);
    for (int s = 0; s < steps; s++) {
        ps_test_fill_uniform(g, numel, seed * 100 + (uint64_t)s, -0.5f, 0.5f);
        ps_var_apply(v, g);
    }
    free(init);
    free(g);
}

/* Six variables: adam, sgd (no slots), nesterov momentum, adagrad, rmsprop, adamw. */
static void build_store(ps_store *st, int steps) {
    ps_store_init(st);
    ps_opt_spec adam = ps_opt_spec_default(PS_OPT_ADAM);
    adam.lr = 0.01f;
    ps_opt_spec sgd = ps_opt_spec_default(PS_OPT_SGD);
    ps_opt_spec mom = ps_opt_spec_default(PS_OPT_MOMENTUM);
    mom.nesterov = true;
    mom.momentum = 0.8f;
    add_var(st, "dense_0/kernel", 2, (uint64_t[]){5, 3}, adam, steps, 1);
    add_var(st, "dense_0/bias", 1, (uint64_t[]){3}, sgd, steps, 2);
    add_var(st, "conv/kernel", 4, (uint64_t[]){3, 3, 2, 4}, mom, steps, 3);
    add_var(st, "emb", 2, (uint64_t[]){4, 2}, ps_opt_spec_default(PS_OPT_ADAGRAD), steps, 4);
    add_var(st, "rms", 1, (uint64_t[]){7}, ps_opt_spec_default(PS_OPT_RMSPROP), steps + 1, 5);
    add_var(st, "w8", 8, (uint64_t[]){1, 2, 1, 2, 1, 2, 1, 2}, ps_opt_spec_default(PS_OPT_ADAMW),
            steps, 6);
}

static void expect_same_store(const ps_store *a, const ps_store *b) {
    ck_assert_uint_eq(b->n, a->n);
    for (size_t i = 0; i < a->n; i++) {
        const ps_var *x = a->vars[i], *y = b->vars[i];
        ck_assert_str_eq(y->name, x->name);
        ck_assert_ptr_eq(ps_store_find(b, x->name), y);
        ck_assert_uint_eq(y->rank, x->rank);
        ck_assert_mem_eq(y->shape, x->shape, x->rank * sizeof(uint64_t));
        ck_assert_uint_eq(y->numel, x->numel);
        ck_assert_mem_eq(y->w, x->w, x->numel * sizeof(float));
        int ns = ps_optim_num_slots(x->opt.kind);
        for (int s = 0; s < ns; s++)
            ck_assert_mem_eq(y->slots[s], x->slots[s], x->numel * sizeof(float));
        for (int s = ns; s < 2; s++)
            ck_assert_ptr_null(y->slots[s]);
        ck_assert_int_eq(y->opt.kind, x->opt.kind);
        const float fx[] = {
            x->opt.lr,      x->opt.momentum, x->opt.beta1,        x->opt.beta2,
            x->opt.epsilon, x->opt.rho,      x->opt.weight_decay, x->opt.initial_accumulator};
        const float fy[] = {
            y->opt.lr,      y->opt.momentum, y->opt.beta1,        y->opt.beta2,
            y->opt.epsilon, y->opt.rho,      y->opt.weight_decay, y->opt.initial_accumulator};
        ck_assert_mem_eq(fy, fx, sizeof fx);
        ck_assert_int_eq(y->opt.nesterov, x->opt.nesterov);
        ck_assert_msg(ps_opt_spec_same(&y->opt, &x->opt), "%s: another optimizer", x->name);
        ck_assert_uint_eq(y->updates, x->updates);
    }
}

static ps_ckpt_meta meta_v(uint64_t version, uint64_t ms) {
    return (ps_ckpt_meta){.version = version,
                          .updates_applied = version * 3,
                          .shard = 1,
                          .num_shards = 2,
                          .mode = 1,
                          .incarnation = 77,
                          .unix_ms = ms};
}

/* Saves st as version v at time ms into dir; returns the path (malloc'd). */
static char *save(const char *dir, int keep, const ps_store *st, uint64_t v, uint64_t ms) {
    ps_ckpt_meta m = meta_v(v, ms);
    char path[4096], err[256];
    int rc = ps_ckpt_save(dir, keep, st, NULL, &m, path, sizeof path, NULL, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "save: %s", err);
    return strdup(path);
}

static int count_ckpts(const char *dir) {
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static int exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Runs restore with stderr sent to a file; the log text goes to log (NUL-terminated). */
static int restore_logged(const char *dir, ps_store *st, ps_ckpt_meta *m, char *path,
                          size_t path_len, char *err, size_t errlen, char *log, size_t loglen) {
    char logpath[4096];
    snprintf(logpath, sizeof logpath, "%s.log", dir);
    fflush(stderr);
    int saved = dup(2), fd = open(logpath, O_CREAT | O_TRUNC | O_RDWR, 0644);
    ck_assert_int_ge(fd, 0);
    dup2(fd, 2);
    int rc = ps_ckpt_restore(dir, st, NULL, m, path, path_len, err, errlen);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t k = pread(fd, log, loglen - 1, 0);
    log[k > 0 ? k : 0] = '\0';
    close(fd);
    unlink(logpath);
    fputs(log, stderr);
    return rc;
}

static void flip_byte(const char *path, long off) {
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    if (off < 0) {
        fseek(f, 0, SEEK_END);
        off += ftell(f);
    }
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x20, f);
    fclose(f);
}

START_TEST(round_trip_restores_everything_bit_identical) {
    char *dir = ps_test_mkdtemp(), path[4096], err[256];
    ps_store st, back;
    build_store(&st, 3);
    ps_ckpt_meta m = meta_v(12345, 1700000000123ull);
    uint64_t bytes = 0;
    ck_assert_int_eq(
        ps_ckpt_save(dir, 3, &st, NULL, &m, path, sizeof path, &bytes, err, sizeof err), PS_OK);
    char want[4096];
    snprintf(want, sizeof want, "%s/ckpt-00000000000000012345-1700000000123.pstf", dir);
    ck_assert_str_eq(path, want);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_uint_eq(bytes, (uint64_t)sb.st_size);
    ck_assert_int_eq(count_ckpts(dir), 1);

    ps_store_init(&back);
    ps_ckpt_meta got;
    char got_path[4096];
    ck_assert_int_eq(
        ps_ckpt_restore(dir, &back, NULL, &got, got_path, sizeof got_path, err, sizeof err), PS_OK);
    ck_assert_str_eq(got_path, path);
    ck_assert_mem_eq(&got, &m, sizeof m);
    expect_same_store(&st, &back);

    /* the restored store keeps training exactly like the original */
    float g[15];
    ps_test_fill_uniform(g, 15, 99, -1, 1);
    ps_var_apply(ps_store_find(&st, "dense_0/kernel"), g);
    ps_var_apply(ps_store_find(&back, "dense_0/kernel"), g);
    expect_same_store(&st, &back);

    /* the file is a plain tensor file: one tensor per variable and per slot */
    ps_tf_file f;
    ck_assert_int_eq(ps_tf_read(path, &f, err, sizeof err), PS_OK);
    ck_assert_uint_eq(f.h.kind, PS_TF_CHECKPOINT);
    ck_assert_uint_eq(f.h.meta[7], PS_CKPT_LAYOUT_VERSION);
    ck_assert_uint_eq(f.n, 6 + 2 + 0 + 1 + 1 + 1 + 2);
    ck_assert_str_eq(f.t[0].name, "dense_0/kernel");
    ck_assert_str_eq(f.t[1].name, "dense_0/kernel@slot0");
    ck_assert_str_eq(f.t[2].name, "dense_0/kernel@slot1");
    ck_assert_str_eq(f.t[3].name, "dense_0/bias");
    ps_tf_file_free(&f);

    ps_store_free(&st);
    ps_store_free(&back);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* A schedule and the clipping round-trip (attribute version 2); a checkpoint whose
 * attributes are version 1 (56 bytes, before schedules: written by hand here from
 * docs/FORMATS.md) still restores, with the same store. */
START_TEST(attribute_version_1_still_restores) {
    char *dir = ps_test_mkdtemp(), err[256];
    ps_store st, back;
    build_store(&st, 2);
    ps_opt_spec sch = ps_opt_spec_default(PS_OPT_MOMENTUM);
    sch.schedule.kind = PS_LR_COSINE;
    sch.schedule.decay_steps = 100;
    sch.schedule.warmup_target = 0.5f;
    sch.schedule.warmup_steps = 10;
    sch.clipnorm = 2;
    add_var(&st, "scheduled", 1, (uint64_t[]){4}, sch, 3, 7);
    char *v2 = save(dir, 10, &st, 5, 1);
    ps_store_init(&back);
    ps_ckpt_meta m;
    ck_assert_int_eq(ps_ckpt_restore(dir, &back, NULL, &m, NULL, 0, err, sizeof err), PS_OK);
    expect_same_store(&st, &back);
    ck_assert_float_eq(ps_store_find(&back, "scheduled")->opt.schedule.warmup_target, 0.5f);
    ck_assert_float_eq(ps_store_find(&back, "scheduled")->opt.clipnorm, 2);
    ps_store_free(&back);
    ps_store_free(&st);

    /* the same store without the scheduled variable, as version 1 wrote it */
    build_store(&st, 2);
    ps_test_rmdir(dir);
    free(dir);
    dir = ps_test_mkdtemp();
    free(v2);
    v2 = save(dir, 10, &st, 6, 1);
    ps_tf_file f;
    ck_assert_int_eq(ps_tf_read(v2, &f, err, sizeof err), PS_OK);
    ps_tf_tensor *t = calloc(f.n, sizeof *t);
    uint8_t (*a1)[56] = calloc(f.n, sizeof *a1);
    for (size_t i = 0; i < f.n; i++) {
        const ps_tf_owned *o = &f.t[i];
        t[i] = (ps_tf_tensor){.name = o->name, .rank = o->rank, .data = o->data,
                              .numel = o->numel, .attr = o->attr, .attr_len = o->attr_len};
        memcpy(t[i].shape, o->shape, sizeof o->shape);
        if (o->attr_len != 4 + PS_OPT_ATTR_BYTES + 12) continue; /* slots, @job */
        const uint8_t *a = o->attr;
        a1[i][0] = 1; /* version 1 */
        memcpy(a1[i] + 4, a + 4, 40);                      /* kind and the 9 fields */
        memcpy(a1[i] + 44, a + 4 + PS_OPT_ATTR_BYTES, 12); /* slot count, updates */
        t[i].attr = a1[i];
        t[i].attr_len = 56;
    }
    char v1[4200];
    snprintf(v1, sizeof v1, "%s/ckpt-00000000000000000007-1.pstf", dir);
    ck_assert_int_eq(ps_tf_write(v1, &f.h, t, f.n, err, sizeof err), PS_OK);
    ps_tf_file_free(&f);
    free(t);
    free(a1);
    unlink(v2);
    char path[4096];
    ps_store_init(&back);
    ck_assert_msg(ps_ckpt_restore(dir, &back, NULL, &m, path, sizeof path, err, sizeof err) ==
                      PS_OK,
                  "%s", err);
    ck_assert_str_eq(path, v1);
    expect_same_store(&st, &back);
    ps_store_free(&back);
    ps_store_free(&st);
    free(v2);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(empty_store_round_trips) {
    char *dir = ps_test_mkdtemp(), err[256];
    ps_store st, back;
    ps_store_init(&st);
    free(save(dir, 1, &st, 0, 5));
    ps_store_init(&back);
    ps_ckpt_meta m;
    ck_assert_int_eq(ps_ckpt_restore(dir, &back, NULL, &m, NULL, 0, err, sizeof err), PS_OK);
    ck_assert_uint_eq(back.n, 0);
    ck_assert_uint_eq(m.unix_ms, 5);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* A job id is kept as layout 2 (a last "@job" tensor) and comes back; a file whose
 * "@job" tensor is malformed is skipped for the older valid one. */
START_TEST(job_id_round_trips_as_layout_2) {
    char *dir = ps_test_mkdtemp(), err[256], path[4096];
    ps_store st, back;
    build_store(&st, 2);
    ps_ckpt_meta m = {.version = 7, .shard = 1, .num_shards = 2, .unix_ms = 1000};
    snprintf(m.job_id, sizeof m.job_id, "mnist-run.3_a");
    ck_assert_int_eq(ps_ckpt_save(dir, 3, &st, NULL, &m, path, sizeof path, NULL, err, sizeof err),
                     PS_OK);
    ps_tf_file f;
    ck_assert_int_eq(ps_tf_read(path, &f, err, sizeof err), PS_OK);
    ck_assert_uint_eq(f.h.meta[7], PS_CKPT_LAYOUT_JOB);
    ck_assert_str_eq(f.t[f.n - 1].name, PS_CKPT_JOB_TENSOR);
    ck_assert_uint_eq(f.t[f.n - 1].attr_len, strlen("mnist-run.3_a"));
    ps_tf_file_free(&f);
    ps_store_init(&back);
    ps_ckpt_meta got;
    ck_assert_int_eq(ps_ckpt_restore(dir, &back, NULL, &got, NULL, 0, err, sizeof err), PS_OK);
    ck_assert_mem_eq(&got, &m, sizeof m);
    expect_same_store(&st, &back);
    ps_store_free(&back);

    /* a newer file with a job id that is not one: skipped, the valid one loads */
    ps_ckpt_meta bad = m;
    bad.version = 8;
    snprintf(bad.job_id, sizeof bad.job_id, "no spaces");
    ck_assert_int_eq(
        ps_ckpt_save(dir, 3, &st, NULL, &bad, path, sizeof path, NULL, err, sizeof err), PS_OK);
    ps_store_init(&back);
    ck_assert_int_eq(ps_ckpt_restore(dir, &back, NULL, &got, NULL, 0, err, sizeof err), PS_OK);
    ck_assert_uint_eq(got.version, 7);
    ck_assert_str_eq(got.job_id, "mnist-run.3_a");
    ps_store_free(&back);
    ps_store_free(&st);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(keep_k_deletes_the_oldest) {
    char *dir = ps_test_mkdtemp();
    ps_store st;
    build_store(&st, 1);
    char *p[6];
    for (int v = 1; v <= 5; v++)
        p[v] = save(dir, 3, &st, (uint64_t)v * 10, 1000 + (uint64_t)v);
    ck_assert_int_eq(count_ckpts(dir), 3);
    ck_assert(!exists(p[1]) && !exists(p[2]));
    ck_assert(exists(p[3]) && exists(p[4]) && exists(p[5]));
    /* same version, later time: newer */
    char *q = save(dir, 2, &st, 50, 2000);
    ck_assert_int_eq(count_ckpts(dir), 2);
    ck_assert(exists(q) && exists(p[5]) && !exists(p[4]));
    /* the file just written is kept even when older ones sort newer (e.g. after
     * restarting from an older checkpoint because the newest was corrupt) */
    char *r = save(dir, 1, &st, 7, 3000);
    ck_assert_int_eq(count_ckpts(dir), 1);
    ck_assert(exists(r));
    free(q);
    free(r);
    for (int v = 1; v <= 5; v++)
        free(p[v]);
    ps_store_free(&st);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(stale_temp_files_are_removed_and_others_ignored) {
    char *dir = ps_test_mkdtemp(), path[4096], err[256];
    ps_store st;
    build_store(&st, 0);
    char mine[4096], dead[4096], live[4096], other[4096];
    snprintf(mine, sizeof mine, "%s/ckpt-00000000000000000001-1.pstf.tmp.%ld", dir, (long)getpid());
    snprintf(dead, sizeof dead, "%s/ckpt-00000000000000000001-1.pstf.tmp.2147483647", dir);
    snprintf(live, sizeof live, "%s/ckpt-00000000000000000001-1.pstf.tmp.%ld", dir,
             (long)getppid());
    snprintf(other, sizeof other, "%s/notes.txt", dir);
    const char *all[] = {mine, dead, live, other};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(ps_test_write_file(all[i], "junk", 4), 0);
    ps_ckpt_meta m = meta_v(1, 2);
    ck_assert_int_eq(ps_ckpt_save(dir, 1, &st, NULL, &m, path, sizeof path, NULL, err, sizeof err),
                     PS_OK);
    ck_assert(!exists(mine) && !exists(dead));
    ck_assert(exists(live) && exists(other) && exists(path));
    ps_store_free(&st);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(save_creates_missing_directory_and_rejects_bad_arguments) {
    char *dir = ps_test_mkdtemp(), sub[4096], err[256];
    snprintf(sub, sizeof sub, "%s/ckpts", dir);
    ps_store st;
    build_store(&st, 0);
    free(save(sub, 2, &st, 3, 4));
    ck_assert_int_eq(count_ckpts(sub), 1);
    ps_ckpt_meta m = meta_v(1, 1);
    ck_assert_int_eq(ps_ckpt_save(sub, 0, &st, NULL, &m, NULL, 0, NULL, err, sizeof err),
                     PS_EINVAL);
    snprintf(sub, sizeof sub, "%s/no/such/dir", dir);
    ck_assert_int_eq(ps_ckpt_save(sub, 1, &st, NULL, &m, NULL, 0, NULL, err, sizeof err), PS_EIO);
    ps_store_free(&st);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* Newest corrupt (a flipped data byte), next truncated, next not a checkpoint
 * at all (a model file): the fourth is loaded, each skip is logged. */
START_TEST(restore_skips_corrupt_truncated_and_foreign_files) {
    char *dir = ps_test_mkdtemp(), path[4096], err[256], log[16384];
    ps_store st1, st2;
    build_store(&st1, 1);
    build_store(&st2, 4);
    char *good = save(dir, 10, &st1, 10, 1);
    char *foreign = malloc(4096);
    snprintf(foreign, 4096, "%s/ckpt-00000000000000000020-2.pstf", dir);
    ps_tf_header h = {.kind = PS_TF_MODEL};
    ck_assert_int_eq(ps_tf_write(foreign, &h, NULL, 0, err, sizeof err), PS_OK);
    char *trunc = save(dir, 10, &st2, 30, 3);
    char *corrupt = save(dir, 10, &st2, 40, 4);
    ck_assert_int_eq(truncate(trunc, 300), 0);
    flip_byte(corrupt, 200);

    ps_store back;
    ps_store_init(&back);
    ps_ckpt_meta m;
    int rc = restore_logged(dir, &back, &m, path, sizeof path, err, sizeof err, log, sizeof log);
    ck_assert_msg(rc == PS_OK, "%s", err);
    ck_assert_str_eq(path, good);
    ck_assert_uint_eq(m.version, 10);
    expect_same_store(&st1, &back);
    const char *skipped[] = {corrupt, trunc, foreign};
    const char *reason[] = {"bad CRC in tensor", "truncated at byte", "not a checkpoint"};
    for (int i = 0; i < 3; i++) {
        char line[8192];
        snprintf(line, sizeof line, "checkpoint %s skipped: ", skipped[i]);
        const char *at = strstr(log, line);
        ck_assert_msg(at, "no skip line for %s in:\n%s", skipped[i], log);
        ck_assert_msg(strstr(at, reason[i]), "want '%s' after '%s'", reason[i], line);
    }
    ck_assert_ptr_null(strstr(log, good)); /* the good one is not "skipped" */
    /* nothing was changed on disk */
    ck_assert_int_eq(count_ckpts(dir), 4);

    /* not into a store that already has variables */
    ck_assert_int_eq(ps_ckpt_restore(dir, &back, NULL, &m, NULL, 0, err, sizeof err), PS_EINVAL);
    ps_store_free(&back);
    ps_store_free(&st1);
    ps_store_free(&st2);
    free(good);
    free(foreign);
    free(trunc);
    free(corrupt);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* Same version: the later time is newer, compared as numbers (a name written
 * by hand with fewer digits still sorts right). */
START_TEST(same_version_later_time_wins) {
    char *dir = ps_test_mkdtemp(), path[4096], err[256], a2[4096], b2[4096];
    ps_store st1, st2, back;
    build_store(&st1, 1);
    build_store(&st2, 2);
    char *a = save(dir, 5, &st1, 9, 999);
    char *b = save(dir, 5, &st2, 9, 1000);
    snprintf(a2, sizeof a2, "%s/ckpt-00000000000000000009-999.pstf", dir);
    snprintf(b2, sizeof b2, "%s/ckpt-00000000000000000009-1000.pstf", dir);
    ck_assert_int_eq(rename(a, a2), 0);
    ck_assert_int_eq(rename(b, b2), 0);
    ps_store_init(&back);
    ps_ckpt_meta m;
    ck_assert_int_eq(ps_ckpt_restore(dir, &back, NULL, &m, path, sizeof path, err, sizeof err),
                     PS_OK);
    ck_assert_str_eq(path, b2);
    ck_assert_uint_eq(m.unix_ms, 1000);
    expect_same_store(&st2, &back);
    ps_store_free(&st1);
    ps_store_free(&st2);
    ps_store_free(&back);
    free(a);
    free(b);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(missing_or_empty_directory_is_enoent) {
    char *dir = ps_test_mkdtemp(), sub[4096], err[256];
    ps_store back;
    ps_store_init(&back);
    ps_ckpt_meta m;
    ck_assert_int_eq(ps_ckpt_restore(dir, &back, NULL, &m, NULL, 0, err, sizeof err), PS_ENOENT);
    snprintf(sub, sizeof sub, "%s/missing", dir);
    ck_assert_int_eq(ps_ckpt_restore(sub, &back, NULL, &m, NULL, 0, err, sizeof err), PS_ENOENT);
    /* files that are not named like checkpoints are not looked at */
    snprintf(sub, sizeof sub, "%s/ckpt-1-2.pstf", dir);
    ck_assert_int_eq(ps_test_write_file(sub, "x", 1), 0);
    snprintf(sub, sizeof sub, "%s/ckpt-00000000000000000001-2.pstf.tmp.5", dir);
    ck_assert_int_eq(ps_test_write_file(sub, "x", 1), 0);
    ck_assert_int_eq(ps_ckpt_restore(dir, &back, NULL, &m, NULL, 0, err, sizeof err), PS_ENOENT);
    ck_assert_uint_eq(back.n, 0);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(only_corrupt_files_is_enoent_and_loads_nothing) {
    char *dir = ps_test_mkdtemp(), err[256], log[16384];
    ps_store st;
    build_store(&st, 2);
    char *a = save(dir, 10, &st, 1, 1);
    char *b = save(dir, 10, &st, 2, 2);
    char *c = save(dir, 10, &st, 3, 3);
    flip_byte(a, -1); /* footer CRC */
    ck_assert_int_eq(truncate(b, 0), 0);
    flip_byte(c, 0); /* magic */
    ps_store back;
    ps_store_init(&back);
    ps_ckpt_meta m = {0};
    int rc = restore_logged(dir, &back, &m, NULL, 0, err, sizeof err, log, sizeof log);
    ck_assert_int_eq(rc, PS_ENOENT);
    ck_assert_msg(strstr(err, "3 skipped"), "%s", err);
    ck_assert_uint_eq(back.n, 0);
    ck_assert_ptr_null(back.vars);
    ck_assert_uint_eq(m.version, 0);
    ck_assert_ptr_nonnull(strstr(log, "bad footer CRC"));
    ck_assert_ptr_nonnull(strstr(log, "bad magic"));
    free(a);
    free(b);
    free(c);
    ps_store_free(&st);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* A checkpoint name that cannot be read (here a directory) is not "no
 * checkpoint": the caller must not start afresh. */
START_TEST(only_unreadable_files_is_eio) {
    char *dir = ps_test_mkdtemp(), sub[4096], err[256];
    snprintf(sub, sizeof sub, "%s/ckpt-00000000000000000001-2.pstf", dir);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    ps_store back;
    ps_store_init(&back);
    ck_assert_int_eq(ps_ckpt_restore(dir, &back, NULL, NULL, NULL, 0, err, sizeof err), PS_EIO);
    ck_assert_uint_eq(back.n, 0);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

static Suite *checkpoint_suite(void) {
    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_create("save");
    tcase_add_test(tc, round_trip_restores_everything_bit_identical);
    tcase_add_test(tc, empty_store_round_trips);
    tcase_add_test(tc, attribute_version_1_still_restores);
    tcase_add_test(tc, job_id_round_trips_as_layout_2);
    tcase_add_test(tc, keep_k_deletes_the_oldest);
    tcase_add_test(tc, stale_temp_files_are_removed_and_others_ignored);
    tcase_add_test(tc, save_creates_missing_directory_and_rejects_bad_arguments);
    suite_add_tcase(s, tc);

    tc = tcase_create("restore");
    tcase_add_test(tc, restore_skips_corrupt_truncated_and_foreign_files);
    tcase_add_test(tc, same_version_later_time_wins);
    tcase_add_test(tc, missing_or_empty_directory_is_enoent);
    tcase_add_test(tc, only_corrupt_files_is_enoent_and_loads_nothing);
    tcase_add_test(tc, only_unreadable_files_is_eio);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(checkpoint_suite());
}
