"""Python's cycle collector runs in the GUI thread only, while a window lives.

Left automatic, a collection can start in any thread that allocates: in a job thread it can free a
PySide object whose Qt connections PySide then disconnects there, holding Qt's connection lock
while it waits for the GIL, while the GUI thread holds the GIL and waits for that lock. Both
freeze for good (seen on 2026-11-25: the window hung in a sweep test, the job thread inside
QObject::disconnect under gc, the GUI thread inside QObject::connect). pyqtgraph's
GarbageCollector turns automatic collection off and collects on a QTimer in the GUI thread
(gen 0 every second when over its threshold: microseconds, in the window's process, never in an
engine's). Counted, so automatic collection comes back when the last window closes.
"""

from __future__ import annotations

import gc

from pyqtgraph.util.garbage_collector import GarbageCollector

INTERVAL_S = 1.0

_collector: GarbageCollector | None = None
_users = 0
_was_enabled = True


def acquire() -> None:
    """A window opens (call in the GUI thread, with a QApplication)."""
    global _collector, _users, _was_enabled
    _users += 1
    if _collector is None:
        _was_enabled = gc.isenabled()
        _collector = GarbageCollector(interval=INTERVAL_S)  # disables automatic collection


def release() -> None:
    """A window closed: the last one stops the timer and gives collection back to Python."""
    global _collector, _users
    _users = max(0, _users - 1)
    if _users == 0 and _collector is not None:
        _collector.timer.stop()
        _collector = None
        gc.collect()  # what accumulated since the last tick, here in the GUI thread
        if _was_enabled:
            gc.enable()


def active() -> bool:
    return _collector is not None
