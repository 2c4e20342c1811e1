/* Image folders: a tree made here listed as Keras lists it (classes sorted,
 * files found recursively and sorted, case-insensitive extensions, other
 * files ignored and counted), a link loop not followed, and the errors: no
 * directory, no class, a class without images, an unreadable subdirectory. */
#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "folder.h"
#include "ps_error.h"
#include "testutil.h"

static char *tmpdir;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void tmp_setup(void) {
    tmpdir = ps_test_mkdtemp();
}

static void tmp_teardown(void) {
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(tmpdir);
}

static const char *at(const char *rel) {
    static char p[4][4096];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, rel);
    return p[k];
}

static void mkdir_p(const char *rel) {
    ck_assert_int_eq(mkdir(at(rel), 0755), 0);
}

static void touch(const char *rel) {
    FILE *f = fopen(at(rel), "wb");
    ck_assert_ptr_nonnull(f);
    fputs("x", f);
    fclose(f);
}

START_TEST(lists_like_keras) {
    mkdir_p("d");
    mkdir_p("d/dogs");
    mkdir_p("d/cats");
    mkdir_p("d/cats/more");
    touch("d/cats/b.JPG");
    touch("d/cats/a.png");
    touch("d/cats/more/c.jpeg");
    touch("d/cats/notes.txt");
    touch("d/dogs/z.png");
    touch("d/README");
    ck_assert_int_eq(symlink(at("d"), at("d/dogs/loop")), 0); /* a loop, not followed */
    ck_assert_int_eq(symlink(at("d/cats/a.png"), at("d/dogs/link.png")), 0); /* a file: read */
    ps_image_folder f;
    char err[256];
    ck_assert_msg(ps_image_folder_scan(at("d"), &f, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_uint_eq(f.n_classes, 2);
    ck_assert_str_eq(f.classes[0], "cats");
    ck_assert_str_eq(f.classes[1], "dogs");
    ck_assert_uint_eq(f.n, 5);
    const char *want[] = {"d/cats/a.png", "d/cats/b.JPG", "d/cats/more/c.jpeg",
                          "d/dogs/link.png", "d/dogs/z.png"};
    const int32_t labels[] = {0, 0, 0, 1, 1};
    for (size_t i = 0; i < 5; i++) {
        ck_assert_str_eq(f.paths[i], at(want[i]));
        ck_assert_int_eq(f.labels[i], labels[i]);
    }
    ck_assert_uint_eq(f.ignored, 2); /* notes.txt, README */
    ck_assert_uint_eq(f.skipped_links, 1);
    ps_image_folder_free(&f);
}
END_TEST

static void scan_fails(const char *rel, int code, const char *want) {
    ps_image_folder f;
    char err[256] = "";
    ck_assert_int_eq(ps_image_folder_scan(at(rel), &f, err, sizeof err), code);
    ck_assert_ptr_null(f.paths);
    ck_assert_msg(strstr(err, want), "want \"%s\" in \"%s\"", want, err);
}

START_TEST(errors) {
    scan_fails("absent", PS_EIO, "No such file");
    mkdir_p("e");
    touch("e/a.png");
    scan_fails("e", PS_EFORMAT, "no class subdirectories");
    mkdir_p("e/one");
    touch("e/one/a.png");
    mkdir_p("e/two");
    touch("e/two/a.gif");
    scan_fails("e", PS_EFORMAT, "class \"two\" has no .jpg, .jpeg or .png file");
    touch("e/two/b.png");
    mkdir_p("e/two/locked");
    ck_assert_int_eq(chmod(at("e/two/locked"), 0), 0);
    if (geteuid() != 0) /* root reads it anyway */
        scan_fails("e", PS_EIO, "e/two/locked: Permission denied");
    chmod(at("e/two/locked"), 0755);
}
END_TEST

static Suite *folder_suite(void) {
    Suite *s = suite_create("folder");
    TCase *tc = tcase_create("folder");
    tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
    tcase_add_test(tc, lists_like_keras);
    tcase_add_test(tc, errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(folder_suite());
}
