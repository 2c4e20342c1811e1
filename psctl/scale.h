/* psctl scale: changes the number of workers of a running elastic `psctl local` job
 * through its control socket (control.h). */
#ifndef PSCTL_SCALE_H
#define PSCTL_SCALE_H

/* argv[0] is "scale". Returns 0 (done), 1 (the job refused, or could not be reached) or
 * 2 (bad usage). */
int psctl_scale_main(int argc, char **argv);

#endif
