"""GPU-hour showback (reads only): device-seconds per user, team, experiment and UTC day.

Totals are derived from the allocation records themselves (started_at → released_at, or now
for running ones), never from a second counter that could drift. It lives here, not in
cluster: grouping by experiment needs experiments, which sit above cluster.
"""
