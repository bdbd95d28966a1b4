"""A model module whose training is paced by the clock, not the CPU, for tests that need a run
to outlive an outage, a timeout or a preemption: each training step sleeps PACE_SECONDS (a
`tf.py_function`, traced only when training, so the export has none). The batch-1 `mlp` runs
they used before spent about 5 CPU-seconds an epoch here just to pass the time."""

from django.core.files.uploadedfile import SimpleUploadedFile

# 42 steps of 32 digits: about 4 s an epoch, under load as on a quiet machine.
PACE_SECONDS = 0.1

PACED_MODULE = f'''
import time

import tensorflow as tf
import tf_keras as keras


class Paced(keras.layers.Layer):
    def call(self, inputs, training=None):
        if training:
            tf.py_function(func=lambda: time.sleep({PACE_SECONDS}), inp=[], Tout=[])
        return inputs


def build_model(hparams):
    return keras.Sequential([
        keras.Input(shape=hparams["input_shape"]),
        Paced(),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(hparams["num_classes"], activation="softmax"),
    ])
'''


def paced_upload() -> SimpleUploadedFile:
    """The module as the API's `model_file` (with `model: upload`)."""
    return SimpleUploadedFile("paced.py", PACED_MODULE.encode())
