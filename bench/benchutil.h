/* Small helpers the benchmarks share: a monotonic clock, medians of reps,
 * strict integer parsing for their flags. */
#ifndef PS_BENCHUTIL_H
#define PS_BENCHUTIL_H

#include <stdbool.h>

/* Seconds on a monotonic clock. */
double ps_bench_now_s(void);
/* The median of v[0..n) (n >= 1); sorts v in place. */
double ps_bench_median(double *v, int n);
/* Parses a whole decimal integer in [lo, hi]; false on anything else. */
bool ps_bench_parse_long(const char *s, long lo, long hi, long *out);

#endif
