"""How a run ended: one enum for records, events, summaries and the window.

A `str` enum, so a status is written to CSV and JSON as its plain value ("ok", "timeout", ...)
and records read back from older files compare equal to it.
"""

from __future__ import annotations

from enum import Enum


class RunStatus(str, Enum):
    OK = "ok"
    CANCELLED = "cancelled"
    ERROR = "error"  # an exception in the engine (load or run)
    CRASHED = "crashed"  # the worker process died
    TIMEOUT = "timeout"  # no answer for --timeout seconds: killed
    KILLED = "killed"  # did not stop within the cancel grace period

    def __str__(self) -> str:
        return self.value

    @property
    def is_failure(self) -> bool:
        """A failure to report (exit status 1); a cancelled run is not one."""
        return self not in (RunStatus.OK, RunStatus.CANCELLED)

    @classmethod
    def parse(cls, text: str) -> RunStatus:
        """From a CSV cell; an unknown word (a newer file) counts as an error."""
        try:
            return cls(text)
        except ValueError:
            return cls.ERROR
