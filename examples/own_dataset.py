"""A user module that brings its own data and its own compile (see digits_convnet.py for the
whole contract): two interleaved spirals, generated from the experiment's `seed`."""

import numpy as np
import tf_keras as keras


def build_dataset(hparams):
    rng = np.random.default_rng(hparams["seed"])
    points = hparams.get("points_per_class", 400)
    radius = rng.uniform(0.1, 1.0, size=2 * points)
    label = np.repeat([0, 1], points)
    angle = 3 * np.pi * radius + np.pi * label + rng.normal(scale=0.15, size=2 * points)
    x = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1).astype("float32")
    order = rng.permutation(len(x))
    x, label = x[order], label[order]
    cut = int(0.8 * len(x))
    return {"x_train": x[:cut], "y_train": label[:cut], "x_test": x[cut:], "y_test": label[cut:]}


def build_model(hparams):
    model = keras.Sequential(
        [
            keras.Input(shape=hparams["input_shape"]),
            keras.layers.Dense(hparams["hidden_units"], activation="relu"),
            keras.layers.Dense(hparams["hidden_units"], activation="relu"),
            keras.layers.Dense(hparams["num_classes"]),
        ]
    )
    # Compiled here, so the platform keeps this optimizer, loss and metric as they are.
    model.compile(
        optimizer=keras.optimizers.Adam(hparams["learning_rate"]),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model
