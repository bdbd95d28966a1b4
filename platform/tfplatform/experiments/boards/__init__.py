"""TensorBoard for experiments: the boards the web app runs (registry), the requests it
passes them (proxy), the process itself (host: `python -m tfplatform.experiments.boards.host`)
and its Profile tab (profile)."""
