/* psworker --evaluate FILE: a model saved with --save (the tensor file,
 * docs/FORMATS.md), its architecture from --model, evaluated on the test set
 * as the chief does after training (the same data loading, input adaptation
 * and labels), without psd or other workers. The test set is --test-data,
 * else --data (its test files for IDX and CIFAR-10; any other form whole,
 * through the input pipeline with the spec's deterministic preprocessing). Optionally the model's outputs on
 * the test set (--predictions) and a summary (--summary). */
#ifndef PS_EVALUATE_H
#define PS_EVALUATE_H

#include <stddef.h>

#include "train.h"

/* Uses cfg's model_path, loss, data_dir, dataset, device, max_test,
 * input_adapt, rgb_to_gray, positive_classes, label_map, dtype_policy and
 * summary_path. predictions (may be NULL): written as n x classes float32,
 * little-endian, row-major, no header (docs/FORMATS.md). Prints the line
 * "test accuracy: A  test loss: L  (...)" as training's last; res gets them.
 * Returns PS_OK, or an error with a one-line reason (PS_EIO: a file could not
 * be read or written; PS_EFORMAT: not a saved model of this architecture). */
int ps_evaluate_run(const ps_train_config *cfg, const char *model_file, const char *predictions,
                    ps_train_result *res, char *err, size_t errlen);

#endif
