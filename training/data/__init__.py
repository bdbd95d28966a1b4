"""A trial's input as tf.data: arrays, a module's build_dataset, registered sharded datasets.
Loads TensorFlow, so the platform never imports it."""
