"""Built-in models. Each starts with its own preprocessing so it accepts raw stored inputs.

- mlp: flat/tabular features, standardised by a Normalization layer whose mean/variance are the
  training set's (constants in the graph, so the export needs no side files).
- cifar10_cnn: the classic Keras CIFAR-10 convnet (the one in TF's multi-GPU benchmarks).
- resnet20: He et al. 2016 CIFAR ResNet (3 stages × 3 basic blocks, 16/32/64 filters).
- gru: a (stacked) recurrent classifier that reads each example as a sequence along its first
  axis: a flat vector one value per step (the sequential-MNIST setting), an image one row per step.

Image models rescale uint8 pixels by 1/255 in-graph. All end in a float32 softmax.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from training.data.inputs import Data
from training.trial.tfenv import keras

layers = keras.layers


def mlp_build(*, hparams: dict[str, Any], data: Data) -> Any:
    sample = data.feature_sample
    features: np.ndarray = sample.reshape(len(sample), -1).astype(np.float64)
    inputs = keras.Input(shape=data.input_shape, name="inputs")
    x = layers.Flatten()(inputs) if len(data.input_shape) > 1 else inputs
    x = layers.Normalization(mean=features.mean(axis=0), variance=features.var(axis=0))(x)
    x = layers.Dense(hparams["hidden_units"], activation="relu")(x)
    if hparams["dropout"]:
        x = layers.Dropout(hparams["dropout"])(x)
    x = layers.Dense(hparams["hidden_units"], activation="relu")(x)
    outputs = layers.Dense(data.num_classes, activation="softmax", dtype="float32")(x)
    return keras.Model(inputs, outputs, name="mlp")


def cifar10_cnn_build(*, hparams: dict[str, Any], data: Data) -> Any:
    dropout = hparams["dropout"]
    inputs = keras.Input(shape=data.input_shape, name="inputs")
    x = layers.Rescaling(1.0 / 255)(inputs)
    for filters in (32, 64):
        x = layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
        x = layers.Conv2D(filters, 3, activation="relu")(x)
        x = layers.MaxPooling2D()(x)
        x = layers.Dropout(dropout)(x)
    x = layers.Flatten()(x)
    x = layers.Dense(512, activation="relu")(x)
    x = layers.Dropout(dropout * 2)(x)
    outputs = layers.Dense(data.num_classes, activation="softmax", dtype="float32")(x)
    return keras.Model(inputs, outputs, name="cifar10_cnn")


def _conv(filters: int, strides: int = 1) -> Any:
    return layers.Conv2D(
        filters, 3, strides=strides, padding="same", use_bias=False,
        kernel_initializer="he_normal", kernel_regularizer=keras.regularizers.l2(1e-4),
    )


def _residual_block(x: Any, *, filters: int, strides: int) -> Any:
    shortcut = x
    y = layers.ReLU()(layers.BatchNormalization()(_conv(filters, strides)(x)))
    y = layers.BatchNormalization()(_conv(filters)(y))
    if strides != 1 or shortcut.shape[-1] != filters:
        shortcut = layers.Conv2D(filters, 1, strides=strides, use_bias=False)(shortcut)
        shortcut = layers.BatchNormalization()(shortcut)
    return layers.ReLU()(layers.Add()([y, shortcut]))


def resnet20_build(*, hparams: dict[str, Any], data: Data) -> Any:
    del hparams  # the architecture is fixed; depth is what makes it ResNet-20
    inputs = keras.Input(shape=data.input_shape, name="inputs")
    x = layers.Rescaling(1.0 / 255)(inputs)
    x = layers.ReLU()(layers.BatchNormalization()(_conv(16)(x)))
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(3):
            strides = 2 if stage > 0 and block == 0 else 1
            x = _residual_block(x, filters=filters, strides=strides)
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(data.num_classes, activation="softmax", dtype="float32")(x)
    return keras.Model(inputs, outputs, name="resnet20")


def gru_build(*, hparams: dict[str, Any], data: Data) -> Any:
    steps = data.input_shape[0]
    width = int(np.prod(data.input_shape[1:], dtype=np.int64))
    inputs = keras.Input(shape=data.input_shape, name="inputs")
    x = layers.Reshape((steps, width))(inputs)
    if data.feature_sample.dtype == np.uint8:
        x = layers.Rescaling(1.0 / 255)(x)
    else:
        # One mean/variance per step feature, over every step: the same scaling at every step.
        values: np.ndarray = data.feature_sample.reshape(-1, width).astype(np.float64)
        x = layers.Normalization(mean=values.mean(axis=0), variance=values.var(axis=0))(x)
    for index in range(hparams["recurrent_layers"]):
        last = index == hparams["recurrent_layers"] - 1
        x = layers.GRU(hparams["hidden_units"], return_sequences=not last)(x)
    outputs = layers.Dense(data.num_classes, activation="softmax", dtype="float32")(x)
    return keras.Model(inputs, outputs, name="gru")


ZOO_BUILDERS = {"mlp": mlp_build, "cifar10_cnn": cifar10_cnn_build, "resnet20": resnet20_build,
                "gru": gru_build}
