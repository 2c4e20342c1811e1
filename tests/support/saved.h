/* A model saved by psworker --save (common/tensorfile.h), for tests that compare
 * trained values. */
#ifndef PS_TEST_SAVED_H
#define PS_TEST_SAVED_H

#include <stddef.h>

/* The saved model's tensors at path, concatenated in file order (malloc'd; the
 * caller frees), *n floats. Fails the test when the file cannot be read. */
float *ps_test_read_saved(const char *path, size_t *n);

#endif
