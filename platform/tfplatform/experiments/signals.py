"""What the experiments app tells the apps above it (it imports none of them).

`experiment_finished` is sent after the commit that made an experiment completed, failed or
canceled, with `experiment_id`: a search (tfplatform.searches) decides its next step then.
`scheduler_passing` is sent before each pass of the scheduler loop (not robust: a database
error stops the loop's turn as the pass's own would): workspaces stop idle sessions then, so
the pass can give their devices away.
`scheduler_passed` is sent after each pass of the scheduler loop: the safety net for work a
lost broker message left undone.

Receivers only enqueue work or call one service; they hold no business logic.
"""

from django.dispatch import Signal

experiment_finished = Signal()
scheduler_passing = Signal()
scheduler_passed = Signal()
