# Writes residual_cnn_keras.json with Keras 3.15.1 (tensorflow-cpu 2.21.0 in a venv, as
# tests/fixtures/keras/README.md describes): a small residual CNN for 28x28x1 images.
# residual_cnn.json wraps it with the training settings to_json() does not carry.
import keras
from keras import layers
x = inp = keras.Input((28, 28, 1), name="image")
x = layers.Conv2D(16, 3, strides=2, padding="same", name="stem")(x)
x = layers.BatchNormalization(name="stem_bn")(x)
skip = x = layers.ReLU(name="stem_relu")(x)
x = layers.Conv2D(16, 3, padding="same", name="b1_c1")(x)
x = layers.BatchNormalization(name="b1_bn1")(x)
x = layers.ReLU(name="b1_relu1")(x)
x = layers.Conv2D(16, 3, padding="same", name="b1_c2")(x)
x = layers.BatchNormalization(name="b1_bn2")(x)
x = layers.Add(name="b1_add")([x, skip])
x = layers.ReLU(name="b1_out")(x)
x = layers.Conv2D(32, 3, strides=2, padding="same", name="down")(x)
x = layers.BatchNormalization(name="down_bn")(x)
x = layers.ReLU(name="down_relu")(x)
x = layers.GlobalAveragePooling2D(name="gap")(x)
out = layers.Dense(10, activation="softmax", name="probs")(x)
m = keras.Model(inp, out, name="residual_cnn")
open("residual_cnn_keras.json", "w").write(m.to_json(indent=1))
m.summary()
print(keras.__version__)
