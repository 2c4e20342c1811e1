/* Relabelling a dataset for the model's outputs: a binary task ("positive
 * classes 5, 7, 9": label 1 for those, 0 for the others) or a general map
 * from each class of the data to an output of the model. Given as psworker
 * --positive-classes / --label-map or as the model spec's "labels" key;
 * checked against the data's classes and the model's outputs before training. */
#ifndef PS_LABELS_H
#define PS_LABELS_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"

#define PS_LABELS_MAX 256 /* classes a map can name: 0..255 (IDX labels are bytes) */

typedef enum { PS_LABELS_NONE = 0, PS_LABELS_POSITIVE, PS_LABELS_MAP } ps_labels_kind;

/* A parsed mapping, not yet checked against a dataset or a model. */
typedef struct {
    ps_labels_kind kind;
    /* POSITIVE: 1 for a positive class, 0 for the others. MAP: the new label
     * of each class, -1 for a class the map does not name. */
    int16_t to[PS_LABELS_MAX];
    int n_named; /* classes named (positive ones, or map entries) */
} ps_label_spec;

struct cJSON;

/* Parses --positive-classes: distinct class numbers 0..255 separated by
 * single commas ("5,7,9"). Returns PS_OK, or PS_EINVAL with a reason. */
int ps_labels_parse_positive(const char *text, ps_label_spec *out, char *err, size_t errlen);
/* Parses --label-map: CLASS:LABEL pairs separated by single commas
 * ("0:0,1:0,5:1"), each class 0..255 at most once, labels 0..255. Returns
 * PS_OK, or PS_EINVAL with a reason. */
int ps_labels_parse_map(const char *text, ps_label_spec *out, char *err, size_t errlen);
/* Parses the model spec's "labels" value: {"positive": [5, 7, 9]} or
 * {"map": {"0": 0, "1": 0, ...}} (exactly one key). Returns PS_OK, or
 * PS_EFORMAT with a reason naming the key. */
int ps_labels_from_json(const struct cJSON *item, ps_label_spec *out, char *err, size_t errlen);

/* Checks spec against a dataset with data_classes classes (0..data_classes-1)
 * and a model whose labels take model_classes values, and fills table[class]
 * with the new label of every class. NONE: the identity, when the data has no
 * more classes than the model. POSITIVE: needs model_classes 2, every named
 * class in range, at least one class left negative. MAP: every class of the
 * data mapped, every label below model_classes and every label used. Returns
 * PS_OK, or PS_EINVAL with a one-line reason (what spells it: `what`, e.g.
 * "--positive-classes"). */
int ps_labels_resolve(const ps_label_spec *spec, const char *what, int data_classes,
                      size_t model_classes, int32_t table[PS_LABELS_MAX], char *err, size_t errlen);

/* Rewrites d's labels through table (from ps_labels_resolve) and sets its
 * num_classes to new_classes. Every label of d must be below PS_LABELS_MAX. */
void ps_labels_apply(ps_dataset *d, const int32_t table[PS_LABELS_MAX], int new_classes);

/* One line describing spec for the log ("binary: classes 5,7,9 -> 1, the
 * other 7 -> 0"; "map 0:0,1:0,..."); data_classes counts the negatives. */
void ps_labels_describe(const ps_label_spec *spec, int data_classes, char *out, size_t outlen);
/* The class balance of d after relabelling: "18000 of 60000 positive (30.0%)"
 * for a binary task, else "label 0: 42000, label 1: 18000, ...". */
void ps_labels_balance(const ps_dataset *d, int binary, char *out, size_t outlen);

#endif
