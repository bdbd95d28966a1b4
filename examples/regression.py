"""A regression module: its own data, its own loss and metrics, judged by val_mae.

Submit it with a target on a metric Keras reports for it, minimised:

    tfp submit ... --model examples/regression.py  (or the API: "model": "upload",
    "target": {"metric": "val_mae", "mode": "min", "value": 0.5})

The exported signature is the model's own: input `inputs` float32 (-1, 8), output `outputs`
float32 (-1, 1). `tests/training/test_training_tasks.py` and
`tests/tfplatform/modelregistry/test_deploy_regression.py` train, deploy and query it.
"""

import numpy as np
import tf_keras as keras

WEIGHTS = np.linspace(-1.0, 1.0, 8)


def build_dataset(hparams):
    """A noiseless linear target of 8 features: 1,000 rows to train on, 200 to validate."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1200, 8)).astype("float32")
    y = (x @ WEIGHTS + 3.0).astype("float32")[:, None]
    return x[:1000], y[:1000], x[1000:], y[1000:]


def build_model(hparams):
    model = keras.Sequential([
        keras.Input(shape=hparams["input_shape"]),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(1),
    ])
    # Compiled here, so the platform keeps this loss and these metrics (and this rate).
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse", metrics=["mae"])
    return model
