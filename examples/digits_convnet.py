"""A complete user model module: upload it as the experiment's model (`model: upload`).

The contract, all of it:

* `build_model(hparams)` returns a tf-keras model (`import tf_keras as keras`; `tf.keras`
  works too, the trial maps it to tf-keras). It never mentions devices or strategies: the
  platform calls it inside the strategy it picked for the resources you asked for (CPU, one or
  several GPUs, several workers, parameter servers), and once more outside it to export.
* `hparams` holds the experiment's hyperparameters, every platform default filled in
  (`epochs`, `batch_size`, `learning_rate`, `optimizer`, `from_logits`, ...; see
  `GET /api/schema/`), any key of your own passed through untouched, and two facts about the
  dataset: `input_shape` (one row's shape, a list) and `num_classes`.
* The last layer must output one score per class, shape (batch, num_classes).
* Leave the model uncompiled and the platform compiles it: its optimizer (`optimizer`,
  `learning_rate` scaled to the global batch with `warmup_epochs`), sparse categorical
  cross-entropy (`from_logits` for a model that ends without softmax) and an `accuracy`
  metric. Compile it yourself and your optimizer, loss and metrics are kept as they are.
* Optionally `build_dataset(hparams)` returns `(x_train, y_train, x_test, y_test)` (or a dict
  with those keys) of numeric arrays with integer labels 0..num_classes-1; the experiment's
  `dataset` is then ignored. Without it, the experiment's dataset (built-in or uploaded
  .npz/.csv) is used. This module uses the built-in `digits` (8x8 images flattened to 64
  values from 0 to 16).
* The module runs inside the trial's sandbox or container: no platform files or secrets,
  network only among the trial's own tasks (download nothing), only its work directory
  writable. Anything it raises fails the experiment at once
  (never retried), with the traceback in its logs.
"""

import tf_keras as keras


def build_model(hparams):
    side = round(hparams["input_shape"][0] ** 0.5)  # digits: 64 values, an 8x8 image
    return keras.Sequential(
        [
            keras.Input(shape=hparams["input_shape"]),
            keras.layers.Rescaling(1.0 / 16),
            keras.layers.Reshape((side, side, 1)),
            keras.layers.Conv2D(hparams.get("filters", 16), 3, activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dropout(hparams["dropout"]),
            keras.layers.Dense(hparams["num_classes"], activation="softmax"),
        ]
    )
