"""Transfer learning with a file Keras 3 wrote (keras_roundtrip.sh).

  keras_frozen.py make OUT.keras
      A base (Conv2D, BatchNormalization, Flatten) frozen with base.trainable = False,
      nested in a Sequential with a new Dense head, compiled, saved: Keras' own flags.
  keras_frozen.py check IN.keras OUT.keras
      OUT.keras (psworker trained IN.keras and exported it) loads in Keras; the base's
      weights, BatchNormalization's moving statistics included, are bit-identical to
      IN.keras's, the head's moved, and the base's layers are still frozen (by layer
      name: the export may write the nested base's layers into one Functional model).
Exit 0 ok, 1 failed (the reason on stderr)."""
import sys

import keras
import numpy as np


def make(out):
    keras.utils.set_random_seed(7)
    base = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Conv2D(4, 3, activation="relu"),
                             keras.layers.BatchNormalization(), keras.layers.Flatten()],
                            name="base")
    base.trainable = False
    model = keras.Sequential([keras.Input((28, 28, 1)), base, keras.layers.Dense(10, name="head")])
    model.compile(optimizer=keras.optimizers.Adam(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.save(out)


def leaves(model):
    """The layers with weights, by name, nested models opened."""
    out = {}
    for layer in model.layers:
        if hasattr(layer, "layers"):
            out.update(leaves(layer))
        elif layer.weights:
            out[layer.name] = layer
    return out


def check(src, out):
    a, b = leaves(keras.saving.load_model(src)), leaves(keras.saving.load_model(out))
    ok = True
    for name in ("conv2d", "batch_normalization"):
        la, lb = a[name], b[name]
        if lb.trainable:
            print(f"{name} is trainable in {out}: it was frozen", file=sys.stderr)
            ok = False
        for wa, wb in zip(la.weights, lb.weights):
            if not np.array_equal(np.asarray(wa), np.asarray(wb)):
                print(f"{wa.path}: a frozen weight changed", file=sys.stderr)
                ok = False
    ha, hb = np.asarray(a["head"].kernel), np.asarray(b["head"].kernel)
    if np.max(np.abs(ha - hb)) < 1e-4 or not b["head"].trainable:
        print("the head did not train, or is frozen", file=sys.stderr)
        ok = False
    return ok


if __name__ == "__main__":
    if sys.argv[1:2] == ["make"] and len(sys.argv) == 3:
        make(sys.argv[2])
    elif sys.argv[1:2] == ["check"] and len(sys.argv) == 4:
        sys.exit(0 if check(sys.argv[2], sys.argv[3]) else 1)
    else:
        sys.exit(__doc__)
