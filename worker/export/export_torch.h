/* The model's variables as a PyTorch module's state_dict would hold them:
 * torch names and layouts (docs/FORMATS.md, "safetensors export"). Used by
 * export_safetensors.c; reads the graph (model_impl.h). */
#ifndef PS_EXPORT_TORCH_H
#define PS_EXPORT_TORCH_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* One state_dict entry. */
typedef struct {
    char name[112];      /* "dense_0.weight", "bn_Conv1.running_mean" */
    const char *project; /* the model variable it comes from ("dense_0/kernel"); NULL for
                          * what torch wants and the model has not (num_batches_tracked,
                          * the ones/zeros of a BatchNormalization without gamma/beta) */
    const char *layout;  /* how the values were rearranged, one phrase ("transposed") */
    size_t op;           /* the graph op it belongs to */
    int rank;            /* 0..4 */
    size_t shape[4];
    size_t numel;
    bool i64;       /* an I64 scalar (num_batches_tracked) holding i64v; else F32 in f32 */
    float *f32;     /* owned, numel values, torch layout */
    int64_t i64v;
} ps_torch_tensor;

/* The torch module name of op j (its layer's name, characters other than
 * [A-Za-z0-9_] replaced by '_') into out; "" for an op without variables. */
void ps_torch_module_name(const ps_model *m, size_t j, char *out, size_t outlen);

/* Whether Dense op j's input columns are rearranged from the model's NHWC
 * flattening to torch's NCHW one (its input comes from an image larger than 1x1). */
bool ps_torch_dense_permuted(const ps_model *m, size_t j);

/* Every variable in torch form, in op order. *out is malloc'd (free with
 * ps_torch_tensors_free). PS_OK, PS_ENOMEM, or PS_EFORMAT with a reason (two
 * layers whose names map to one torch name; an Add over inputs flattened in
 * different orders). */
int ps_torch_tensors(const ps_model *m, ps_torch_tensor **out, size_t *n, char *err, size_t errlen);
void ps_torch_tensors_free(ps_torch_tensor *t, size_t n);

#endif
