/* Stats of a psd shard for integration tests: one Stats request, its reply checked. */
#ifndef PS_TEST_STATS_H
#define PS_TEST_STATS_H

#include "ps.h"

/* Asks c for Stats of shard 0 and checks it answered; fills *hold (the caller frees it
 * with ps_stats_free) and returns hold. */
ps_stats *ps_test_stats(ps_client *c, ps_stats *hold);
/* As ps_test_stats, through a client of its own to endpoint that never says Hello (so
 * it joins nothing), closed before returning. */
ps_stats *ps_test_shard_stats(const char *endpoint, ps_stats *hold);

#endif
