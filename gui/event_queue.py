"""The GUI's drain tick (the job controller's and the replay's), and emptying a job's queue in order.

A job's threads only put items into a queue; the GUI thread empties it once per tick. Plain
events leave as one batch; a control item (progress, ready, the job's end) is handed on after
the events that preceded it, so widgets see everything in the order it happened.
"""

from __future__ import annotations

import queue
from collections.abc import Callable

TICK_MS = 33  # ~30 updates a second


def drain_in_order(
    source: queue.Queue,
    controls: tuple[type, ...],
    emit_batch: Callable[[list], None],
    handle_control: Callable[[object], bool],
) -> None:
    """Empty `source` now. `handle_control` returns True when the job has ended: nothing is
    read after that (the job's thread posts nothing after its end)."""
    batch: list = []
    while True:
        try:
            item = source.get_nowait()
        except queue.Empty:
            break
        if not isinstance(item, controls):
            batch.append(item)
            continue
        if batch:
            emit_batch(batch)
            batch = []
        if handle_control(item):
            return
    if batch:
        emit_batch(batch)
