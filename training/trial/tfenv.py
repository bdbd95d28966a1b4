"""The only place TensorFlow is imported: selects tf-keras (Keras 2) before TF loads.

Keras 3 `fit` does not work with MultiWorkerMirroredStrategy (keras-team/keras#20585), so every
trial uses tf-keras, and TF_USE_LEGACY_KERAS must be set before the first `import tensorflow` for
TF's own references to Keras to agree. Modules needing TF do
`from training.trial.tfenv import tf, keras`.
"""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf
import tf_keras as keras

__all__ = ["keras", "tf"]
