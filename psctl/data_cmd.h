/* psctl data: inspect, bench and convert what psworker --data reads. */
#ifndef PSCTL_DATA_CMD_H
#define PSCTL_DATA_CMD_H

/* `psctl data inspect|bench|convert ...` (argv[0] == "data"). Returns the
 * exit code: 0 done, 1 the data cannot be read or written, 2 bad usage. */
int psctl_data_main(int argc, char **argv);

#endif
