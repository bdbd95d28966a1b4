"""Every write to experiments and their trials, checkpoints and metrics, by path:

- submission: new experiments, restarts of finished ones, cancellation
- transitions: the experiment's state machine and what a transition records
- scheduling: the scheduler's pass (placement, preemption, pending reasons)
- trials: a trial's life (created, claimed, stopped, finished) and what it reports
- gangs: a multi-node trial's cluster plan
- execution: a worker node running its part of a trial and recording the outcome
- recording: a running trial's events turned into metrics, checkpoints and logs

Views, serializers, tasks and commands call these functions; nothing else writes these rows.
"""
