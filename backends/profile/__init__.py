"""Where the time goes: per-engine breakdowns of prefill and decode steps (the `profile` command),
from what the profiler adapters (backends/profilers/) captured.

breakdown.py  a capture + the run's own timers + the memory floor -> one engine's breakdown
files.py      breakdown.csv, top_ops.csv, profile.json (traces are written by the adapters)
table.py      the rows `profile` prints and the window's Profile tab shows
"""
