"""What runs inside a task: the host waiting for its order, the worker, the trial itself.
Loads TensorFlow (through tfenv), so the platform never imports it."""
