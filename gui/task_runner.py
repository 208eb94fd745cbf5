"""Runs one long job (a sweep, a quality evaluation) in a Python thread, like BenchController.

The job's session calls `sink` from its threads; that only puts events into a queue. A QTimer
on the GUI thread drains the queue and emits what it found as ONE `events` batch per tick, so
widgets are touched only on the GUI thread. `progress`, `finished` and `failed` are emitted
from the same timer, in order after the events that preceded them.
"""

from __future__ import annotations

import queue
import threading
import traceback
from dataclasses import dataclass
from typing import Callable

from PySide6.QtCore import QObject, QTimer, Signal

from backends.errors import UsageError
from backends.sources.model_files import DownloadCancelled

from .event_queue import CANCELLED, TICK_MS, drain_in_order


@dataclass(frozen=True)
class _Progress:
    message: str
    fraction: float | None


@dataclass(frozen=True)
class _Finished:
    value: object


@dataclass(frozen=True)
class _Failed:
    message: str


class JobContext:
    """What a job's thread gets: where to post events, a progress callback, the cancel flag."""

    def __init__(self, out: queue.Queue, cancelled: threading.Event) -> None:
        self.post = out.put
        self.cancelled = cancelled

    def progress(self, message: str, fraction: float | None = None) -> None:
        if not self.cancelled.is_set():
            self.post(_Progress(message, fraction))


class TaskRunner(QObject):
    events = Signal(list)  # a batch of session events, in arrival order
    progress = Signal(str, object)  # message, fraction or None (while the model is prepared)
    finished = Signal(object)  # what the job returned
    failed = Signal(str)  # it raised (a cancel while preparing ends here too)
    running_changed = Signal(bool)

    def __init__(self, name: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._cancelled = threading.Event()
        self._on_cancel: Callable[[], None] = lambda: None
        self._timer = QTimer(self)
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self.drain)

    @property
    def running(self) -> bool:
        return self._thread is not None

    @property
    def cancelling(self) -> bool:
        return self.running and self._cancelled.is_set()

    def sink(self) -> Callable[[object], None]:
        """A fresh queue for the next job: pass the returned callable to its session as `on_event`
        (nothing of an earlier, abandoned job can leak into the new one)."""
        self._queue = queue.Queue()
        return self._queue.put

    def start(self, work: Callable[[JobContext], object], on_cancel: Callable[[], None]) -> None:
        if self.running:
            raise UsageError(f"a {self.name} is already running")
        self._cancelled = threading.Event()
        self._on_cancel = on_cancel
        context = JobContext(self._queue, self._cancelled)
        self._thread = threading.Thread(target=self._work, args=(work, context), name=f"whistle-stop-{self.name}",
                                        daemon=True)
        self._thread.start()
        self._timer.start()
        self.running_changed.emit(True)

    def cancel(self) -> None:
        """Safe at any time: a download stops at its next progress report, runs after their token."""
        if self.running:
            self._cancelled.set()
            self._on_cancel()

    def shutdown(self, timeout_s: float = 30.0) -> bool:
        """Cancel and wait for the thread (it closes its workers); False if it is still alive."""
        thread = self._thread
        if thread is None:
            return True
        self.blockSignals(True)  # the window is going away: no more updates
        self.cancel()
        thread.join(timeout_s)
        self._timer.stop()
        self._thread = None
        self.blockSignals(False)
        return not thread.is_alive()

    @staticmethod
    def _work(work: Callable[[JobContext], object], context: JobContext) -> None:
        try:
            context.post(_Finished(work(context)))
        except DownloadCancelled:
            context.post(_Failed(CANCELLED))
        except UsageError as exc:
            context.post(_Failed(CANCELLED if context.cancelled.is_set() else str(exc)))
        except Exception as exc:  # anything else must still end the job in the window
            context.post(_Failed(f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"))

    def drain(self) -> None:
        drain_in_order(self._queue, (_Progress, _Finished, _Failed), self.events.emit, self._control)

    def _control(self, item: object) -> bool:
        if isinstance(item, _Progress):
            self.progress.emit(item.message, item.fraction)
            return False
        self._end()
        if isinstance(item, _Finished):
            self.finished.emit(item.value)
        else:
            self.failed.emit(item.message)
        return True  # nothing comes after the end

    def _end(self) -> None:
        if self._thread is not None:
            self._thread.join(5.0)  # it has posted its last item: it is returning
        self._thread = None
        self._timer.stop()
        self.running_changed.emit(False)
