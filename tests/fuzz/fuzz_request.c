/* libFuzzer target for psd's request path: header decode, validation and
 * dispatch against in-memory shards, no network (input format: harness.h).
 * PS_FUZZ_RESET_EVERY=N reopens a shard after N of its inputs (default 1000;
 * 1: every input starts from a fresh shard). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

static ps_fuzz fz;

static void close_all(void) {
    ps_fuzz_close(&fz);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    char err[512];
    if (ps_fuzz_open(&fz, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_request: %s\n", err);
        abort();
    }
    const char *every = getenv("PS_FUZZ_RESET_EVERY");
    fz.reset_every = every && *every ? strtoul(every, NULL, 10) : 1000;
    atexit(close_all);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ps_fuzz_input(&fz, data, size);
    return 0;
}
