/* Keras 3's weights file (model.weights.h5 inside a .keras archive, or a bare
 * .weights.h5): the model's variables read from and written to an open HDF5
 * file. Internal to export/ (keras_file.c, keras_export.c, keras_config.c).
 * docs/FORMATS.md, "Keras 3 files", has the layout as Keras 3.15 writes it. */
#ifndef PS_KERAS_H5_H
#define PS_KERAS_H5_H

#include <hdf5.h>
#include <stdbool.h>
#include <stddef.h>

#include "model.h"

/* One layer of the Keras model the weights belong to, in model.layers order:
 * its group under layers/ (Keras names it after the class: "dense", "dense_1",
 * "conv2d", "batch_normalization"...) and its name (the "name" attribute of
 * the group's vars, and the part of the model's variable names before '/'). */
typedef struct {
    char group[64];
    char name[64];
} ps_keras_layer;

/* Reads every weight under layers/ of f into m's parameters, by layer name
 * (the vars group's "name" attribute, else the group's name) and order (vars/0,
 * vars/1... = the layer's variables in m's order), each shape checked against
 * Keras' shape of the variable. optimizer/ and the model's own vars are not
 * read. file names the file in messages. Returns PS_OK, or PS_EFORMAT with
 * "FILE: layers/G/vars/I: reason" in err for a missing weight, one the model
 * does not have, a wrong shape or type, a link that is not a plain group or
 * dataset (m may then hold some of the values). */
int ps__keras_h5_read(ps_model *m, hid_t f, const char *file, char *err, size_t errlen);

/* Writes m's variables into the new file f: layers/<group>/vars/<i> for each
 * layer of ls (n of them; layers without variables get an empty vars group),
 * the vars group's "name" attribute the layer's name, and an empty vars group
 * at the top named after the model. Returns PS_OK, or PS_EIO / PS_ENOMEM with
 * the reason in err. */
int ps__keras_h5_write(const ps_model *m, const ps_keras_layer *ls, size_t n, hid_t f,
                       const char *file, char *err, size_t errlen);

/* Keras' shape of variable i (Conv2D kernel [kh, kw, in, filters],
 * DepthwiseConv2D [kh, kw, in, multiplier], Dense [in, out], vectors [n]) into
 * d; returns the rank (0: a scalar, Normalization's count). */
int ps__keras_var_dims(const ps_model *m, size_t i, hsize_t d[4]);
/* Whether variable i is an integer scalar in Keras' files (Normalization's
 * count): read from any integer type, written as int64. */
bool ps__keras_var_int_scalar(const ps_model *m, size_t i);

/* Turns off HDF5's printing of its error stack (a library never prints). */
void ps__keras_h5_quiet(void);

#endif
