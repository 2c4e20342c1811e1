/* Stats of a psd shard for integration tests: one Stats request, its reply checked. */
#ifndef PS_TEST_STATS_H
#define PS_TEST_STATS_H

#include "client.h"
#include "wire.h"

/* Asks c for Stats of shard 0 and checks it answered; returns the reply, which lives in
 * *hold (the caller frees it with ps__header__free_unpacked). */
Ps__StatsReply *ps_test_stats(ps_client *c, Ps__Header **hold);
/* As ps_test_stats, through a client of its own to endpoint that never says Hello (so
 * it joins nothing), closed before returning. */
Ps__StatsReply *ps_test_shard_stats(const char *endpoint, Ps__Header **hold);

#endif
