/* Helpers the wire tests (test_wire, test_wire_frames) share (see wire_helpers.h). */
#include "wire_helpers.h"

#include <check.h>

Ps__Header header(uint64_t request_id) {
    Ps__Header h = PS__HEADER__INIT;
    h.protocol_version = PS_PROTOCOL_VERSION;
    h.request_id = request_id;
    return h;
}

void check_meta(const Ps__TensorMeta *m, const char *name, const uint64_t *shape, size_t rank) {
    ck_assert_str_eq(m->name, name);
    ck_assert_int_eq(m->dtype, PS__DTYPE__DT_F32);
    ck_assert_uint_eq(m->n_shape, rank);
    uint64_t bytes = 4;
    for (size_t d = 0; d < rank; d++) {
        ck_assert_uint_eq(m->shape[d], shape[d]);
        bytes *= shape[d];
    }
    ck_assert_uint_eq(m->nbytes, bytes);
}

Ps__Header hello_header(uint64_t request_id) {
    static Ps__Hello hello = PS__HELLO__INIT;
    hello.worker_index = 1;
    hello.num_workers = 2;
    Ps__Header h = header(request_id);
    h.body_case = PS__HEADER__BODY_HELLO;
    h.hello = &hello;
    return h;
}
