/* psctl data: inspect, bench and convert what psworker --data reads; synth-clicks
 * writes a synthetic click log. */
#ifndef PSCTL_DATA_CMD_H
#define PSCTL_DATA_CMD_H

/* `psctl data inspect|bench|convert|synth-clicks ...` (argv[0] == "data"). Returns the
 * exit code: 0 done, 1 the data cannot be read or written, 2 bad usage. */
int psctl_data_main(int argc, char **argv);

/* `psctl data synth-clicks` (data_synth.c): rows rows of seed into the TSV out and its
 * parameters into out.json. Returns the exit code: 0, 1 (a write failed), 2 (no out). */
int psctl_data_synth_clicks(long rows, long seed, const char *out);

#endif
