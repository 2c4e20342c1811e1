/* Stats of a psd shard for integration tests (see stats.h). */
#include "stats.h"

#include <check.h>

#include "ps_error.h"

ps_stats *ps_test_stats(ps_client *c, ps_stats *hold) {
    int rc = ps_client_stats(c, 0, hold);
    ck_assert_msg(rc == PS_OK, "stats: %s", ps_client_error(c));
    return hold;
}

ps_stats *ps_test_shard_stats(const char *endpoint, ps_stats *hold) {
    ps_client *c;
    char err[256];
    const char *eps[1] = {endpoint};
    ck_assert_msg(ps_client_open(&c, eps, 1, 0, 1, err, sizeof err) == PS_OK, "open: %s", err);
    ps_client_set_timeout(c, 10000);
    ps_test_stats(c, hold);
    ps_client_close(c);
    return hold;
}
