/* What the test_psd_requests_* files share: one psd started per test, a well-behaved
 * client (the client library) with "w" [2, 3] and "b" [4] under SGD, requests built on a
 * raw DEALER, and the fixtures. */
#ifndef PS_TEST_PSD_REQUESTS_COMMON_H
#define PS_TEST_PSD_REQUESTS_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <check.h>

#include "proc.h"
#include "ps.h"
#include "raw.h"
#include "wire.h"

#define LR 0.1f
#define NW 6 /* "w" is [2, 3] */
#define NB 4 /* "b" is [4] */
#define REPLY_MS 5000

extern const float W0[NW];
extern const float B0[NB];

extern ps_test_psd psd;

/* One plain-SGD update as psd computes it (common/optim.c: float arithmetic). */
float sgd(float w, float g);

typedef struct {
    ps_client *c;
    float w[NW], dw[NW], b[NB], db[NB];
} good_client;

extern good_client good; /* worker 0 of the bad_requests fixture */

/* Opens a client for worker `index` of `workers`, registers "w" and "b" (SGD, LR) and says
 * Hello; with `create` also creates them with W0 and B0. */
void good_open(good_client *g, unsigned index, unsigned workers, int create);
void good_close(good_client *g);
/* Pulls (min_version 0) and checks the values are exactly w and b; returns the version. */
uint64_t expect_values(good_client *g, const float *w, const float *b);
/* The shard still serves the good client, with the initial values at version 0. */
void expect_unchanged(void);

/* A header with the protocol version and request id set. */
Ps__Header req_header(uint64_t request_id);

/* A Push request over the given metas (payloads are sent separately). */
typedef struct {
    Ps__Header h;
    Ps__Push push;
} push_req;
void push_req_init(push_req *q, uint64_t request_id, Ps__TensorMeta **metas, size_t n,
                   uint64_t step, uint32_t worker);
/* One tensor of a hand-built Push: its name and shape. */
typedef struct {
    const char *name;
    size_t rank, shape[2];
} bad_meta;

/* A Push built by hand and the Error psd must answer it with. */
typedef struct {
    uint64_t id;      /* request id (echoed in the Error) */
    size_t n_metas;   /* 0..2 tensors in the header */
    bad_meta meta[2]; /* float32 unless dtype says otherwise */
    int has_dtype;    /* 1: meta[0]'s dtype is dtype (a Ps__DType value) */
    int dtype;
    uint64_t nbytes;     /* when non-zero: meta[0]'s nbytes */
    uint32_t worker;     /* the push's worker_index */
    size_t n_frames;     /* 0..3 payload frames, each frame_len[i] bytes of 1.0f values */
    size_t frame_len[3]; /* at most 64 bytes each */
    int code;            /* the Error's code */
    const char *text;    /* a part of the Error's message */
} bad_push;

/* Sends each push on one raw DEALER, expects its Error (code and text), and then that the
 * shard still serves the good client unchanged. */
void expect_bad_pushes(const bad_push *cases, size_t n);
/* Sends h and its n payload frames on a fresh raw DEALER, expects the Error (code, a message
 * containing text, h's request id echoed), then that the shard still serves the good client
 * unchanged. */
void expect_bad_request(const Ps__Header *h, const void *const *pl, const size_t *lens, size_t n,
                        int code, const char *text);
/* The same for n frames sent as they are (the first is not a header): the Error echoes
 * request id 0. */
void expect_bad_frames(const void *const *data, const size_t *lens, size_t n, int code,
                       const char *text);

/* A Pull request of the given names (borrowed). */
typedef struct {
    Ps__Header h;
    Ps__Pull pull;
} pull_req;
void pull_req_init(pull_req *q, uint64_t request_id, char **names, size_t n, uint64_t min_version);

/* A CreateVars request of one float32 variable `name` [shape] with an SGD optimizer at LR
 * (q->o may be changed before sending; q must not be copied once initialised). */
typedef struct {
    Ps__Header h;
    Ps__CreateVars cv;
    Ps__TensorMeta m, *mp[1];
    uint64_t sb[PS_WIRE_MAX_RANK];
    Ps__Optimizer o, *op[1];
} create_req;
void create_req_init(create_req *q, uint64_t request_id, const char *name, const size_t *shape,
                     size_t rank);

/* Sends a Pull of the given names. */
void raw_pull(raw_conn *r, uint64_t request_id, char **names, size_t n, uint64_t min_version,
              const void *const *pl, const size_t *pl_lens, size_t n_pl);

/* Fixtures: psd with 1 sync worker and `good` open with the variables created; psd with 2
 * sync workers; psd with 2 async workers. The teardown stops psd with SIGTERM and checks
 * it exits 0. */
void setup_sync1(void);
void setup_sync2(void);
/* psd with these flags (NULL-terminated), for a fixture of a test file's own. */
void start_psd_with(const char **args);
void setup_async2(void);
void teardown_psd(void);
/* A TCase of s named name, 30 s per test, with the fixture setup (one of the above) and
 * teardown_psd. */
TCase *requests_tcase(Suite *s, const char *name, void (*setup)(void));

#endif
