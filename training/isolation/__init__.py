"""The walls around a task: the runtime (sandbox, containers or processes), seccomp, Landlock,
the gang's network, mounts and environments. Independent of the trial code it walls in."""
