"""Training engine: runs one Keras model definition on any hardware.

Never imports Django: the platform hands it plain dataclasses and gets plain dataclasses back.
Importing this package (and spec, catalog, arrays, cluster, scaling, strategy.strategy_plan,
supervisor) does not load TensorFlow; only trial processes (`python -m training.trial.worker`) do,
through `training.trial.tfenv`.

    web process        catalog.spec_validate(spec=...)               -> 400 on InvalidInput
    job runner         supervisor.trial_supervise(spec=..., on_events=..., should_cancel=...)
                           -> TrialOutcome, streaming TrialEvents to on_events
    trial processes    worker.main -> trial.trial_run: strategy.strategy_build (the one place a
                       strategy is made), modelling, datasets, callbacks, checkpoints, export, pi
"""
# written by a trial
