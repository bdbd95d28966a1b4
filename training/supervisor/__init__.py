"""A node running one trial: the supervisor, the task hosts it starts (warm or cold), the
outcome it folds from their events and exit codes, and the relay to the platform's API."""
