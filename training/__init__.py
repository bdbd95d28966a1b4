"""Training engine: runs one Keras model definition on any hardware.

Never imports Django: the platform hands it plain dataclasses and gets plain dataclasses back.
Its modules are grouped by role (docs/development/code-layout.md):

    contract (this folder)  spec, errors, catalog, shard_schema, target, arrays, scaling,
                            precision, board_layout, events, signals, tf_config, exit_codes:
                            TF-free; the platform validates and records with them
    supervisor/             a node running one trial: supervise.trial_supervise(spec=...,
                            on_events=..., should_cancel=...) -> TrialOutcome; task hosts
    isolation/              sandbox, containers, Landlock, seccomp, gang networks, environments
    trial/                  what runs inside a task and loads TensorFlow (through trial.tfenv):
                            host -> worker.main -> run.trial_run: strategy.strategy_build (the
                            one place a strategy is made), modelling, callbacks, export
    data/                   a trial's input pipelines
    workspace/              JupyterLab as a task

The platform imports the contract, supervisor/, isolation/ and workspace/, never trial/ or data/
(import-linter's contracts in pyproject.toml).
"""
