"""The one controller of a job's life on the GUI thread: it starts the job's thread, reads what the
thread posts, and says each step of the job's life with its own signal.

The job's thread never touches Qt (`job_context.py`): it only puts items into a queue. One
QTimer on the GUI thread drains that queue ~30 times a second and emits every session event it
found as ONE `events` batch, so widgets are updated once per tick however fast tokens arrive.
The lifecycle signals come from the same timer, in order after the events that preceded them:
`started`, `progress`, `ready`, then exactly one of `result`, `failed` or `cancelled` (a cancel
is never an error); `cancelling` when Cancel is pressed; `running_changed` on both edges.
Views do not connect these by hand: each declares a `JobHandlers` (`job_handlers.py`) and
`attach` connects it. The running state is `status`/`running` here; `JobManager` reads it.

While a measured fair-mode run is timed the job is quiet (`QuietSink`): the timer then only
reads a flag a few times a second and draws nothing until the run is recorded.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from enum import Enum

from PySide6.QtCore import QObject, QTimer, Signal, SignalInstance

from whistle_stop.backends.errors import UsageError

from .event_queue import TICK_MS, drain_in_order
from .job_context import (
    CONTROL_ITEMS,
    EndItem,
    JobContext,
    Outcome,
    ProgressItem,
    QuietSink,
    ReadyItem,
    SettleItem,
    run_job,
)
from .job_handlers import JobHandlers

MAX_TICK_MS = 100
QUIET_TICK_MS = 250  # while a measured fair-mode run is timed: only a flag is read


class JobStatus(Enum):
    IDLE = "idle"
    PREPARING = "preparing"  # resolving the model: a cancel ends the job at once
    RUNNING = "running"  # engines run: a cancel stops them after their current token
    CANCELLING = "cancelling"


class JobController(QObject):
    started = Signal()
    events = Signal(list)  # a batch of session events, in arrival order
    progress = Signal(str, object)  # message, fraction or None (while the model is prepared)
    ready = Signal(object)  # what the job passed to JobContext.ready
    result = Signal(object)  # what the job returned (runs cancelled mid-way too: it keeps what finished)
    failed = Signal(str)  # nothing (more) ran: bad input, model not found, a bug
    cancelling = Signal()  # Cancel was pressed: the job is stopping
    cancelled = Signal()  # the user stopped the job before there was a result
    running_changed = Signal(bool)

    def __init__(self, name: str, blocker: Callable[[], str] = lambda: "", parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self._blocker = blocker  # why another job keeps this one from starting ("" when none)
        self._status = JobStatus.IDLE
        self._queue: queue.Queue = queue.Queue()  # the running job's
        self._next_queue: queue.Queue | None = None  # the next job's, once `sink` gave it out
        self._sink: QuietSink | None = None  # the running job's
        self._next_sink: QuietSink | None = None
        self._thread: threading.Thread | None = None
        self._cancelled = threading.Event()
        self._ready = False  # the job said "ready": a cancel no longer ends it at once
        self._on_cancel: Callable[[], None] = lambda: None
        # Settle barriers seen by the last drain: released by the next tick, after Qt has painted
        # what that drain updated (no per-barrier timer with a Python callable on the GUI thread).
        self._settled: list[threading.Event] = []
        self._controls = {
            ProgressItem: self._on_progress,
            ReadyItem: self._on_ready,
            SettleItem: self._on_settle,
            EndItem: self._on_end,
        }
        self._timer = QTimer(self)
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self.drain)

    # --- public ------------------------------------------------------------------------------
    @property
    def status(self) -> JobStatus:
        return self._status

    @property
    def running(self) -> bool:
        return self._status is not JobStatus.IDLE

    @property
    def quiet(self) -> bool:
        """A measured fair-mode run is being timed: the window draws nothing until it is recorded."""
        return self._sink is not None and self._sink.quiet.is_set()

    def attach(self, handlers: JobHandlers) -> None:
        """Connect a view's handlers to this job's steps; views attached earlier are called first."""
        steps: tuple[tuple[SignalInstance, Callable | None], ...] = (
            (self.events, handlers.events),
            (self.started, handlers.started),
            (self.progress, handlers.progress),
            (self.ready, handlers.ready),
            (self.result, handlers.result),
            (self.failed, handlers.failed),
            (self.cancelling, handlers.cancelling),
            (self.cancelled, handlers.cancelled),
            (self.running_changed, handlers.running),
        )
        for signal, handler in steps:
            if handler is not None:
                signal.connect(handler)

    def sink(self) -> Callable[[object], None]:
        """A fresh queue for the next job: pass the returned callable to its session as `on_event`
        (nothing of an earlier, abandoned job can leak into the new one). UsageError if a job
        cannot start now."""
        self._check_free()
        self._next_queue = queue.Queue()
        self._next_sink = QuietSink(self._next_queue)
        return self._next_sink

    def start(self, work: Callable[[JobContext], object], on_cancel: Callable[[], None]) -> None:
        """Run `work` in a thread; `on_cancel` (the session's cancel) is called by `cancel`."""
        self._check_free()
        self._queue, self._next_queue = self._next_queue or queue.Queue(), None
        self._sink, self._next_sink = self._next_sink or QuietSink(self._queue), None
        self._cancelled = self._sink.cancelled  # per job: an abandoned thread keeps its own
        self._ready = False
        self._on_cancel = on_cancel
        context = JobContext(self._queue, self._cancelled, self._sink)
        self._thread = threading.Thread(
            target=run_job, args=(work, context), name=f"whistle-stop-{self.name}", daemon=True
        )
        self._thread.start()
        self._timer.setInterval(TICK_MS)
        self._timer.start()
        self._set_status(JobStatus.PREPARING)
        self.started.emit()

    def cancel(self) -> None:
        """Safe at any time. Engines stop after their current token; while the model is still
        being prepared (a download) the job ends at once: the download stops at its next
        progress report and the thread's late results are dropped."""
        if not self.running or self._status is JobStatus.CANCELLING:
            return
        preparing = self._status is JobStatus.PREPARING
        self._cancelled.set()
        self._on_cancel()
        self._set_status(JobStatus.CANCELLING)
        self.cancelling.emit()
        if preparing:
            self.drain()  # deliver what came before the cancel (perhaps "ready" after all)
            if self.running and not self._ready:
                self._end()  # the thread stops by itself; what it posts later goes to a dropped queue
                self.cancelled.emit()

    def shutdown(self, timeout_s: float = 30.0) -> bool:
        """Cancel, wait for the thread (it closes its workers) and drop pending events. False if
        the thread is still alive after `timeout_s` (its workers are daemons and die with the app)."""
        thread = self._thread
        if thread is None:
            return True
        self.blockSignals(True)  # the window is going away: no more updates or dialogs
        self.cancel()
        thread.join(timeout_s)
        self._timer.stop()
        self._thread = None
        self._status = JobStatus.IDLE
        self.blockSignals(False)
        return not thread.is_alive()

    def drain(self) -> None:
        self._release_settled()
        if self.quiet:  # a measured run is timed: nothing is drawn until it is recorded
            if self._timer.interval() != QUIET_TICK_MS:
                self._timer.setInterval(QUIET_TICK_MS)
            return
        began = time.perf_counter()
        drain_in_order(self._queue, CONTROL_ITEMS, self.events.emit, self._control)
        # A slow tick (a starved CPU) spaces the next one out, so input and painting still get
        # their turn; a fast one brings the rate back to ~30 per second.
        cost_ms = (time.perf_counter() - began) * 1e3
        interval = TICK_MS if cost_ms < TICK_MS / 2 else min(MAX_TICK_MS, int(2 * cost_ms))
        if self._timer.interval() != interval:
            self._timer.setInterval(interval)

    # --- GUI thread ----------------------------------------------------------------------------
    def _control(self, item: object) -> bool:
        """Say one step of the job's life; True when the job has ended (nothing is read after that)."""
        self._controls[type(item)](item)
        return isinstance(item, EndItem)

    def _on_progress(self, item: ProgressItem) -> None:
        self.progress.emit(item.message, item.fraction)

    def _on_settle(self, item: SettleItem) -> None:
        self._settled.append(item.done)  # released at the next tick (see __init__)

    def _on_ready(self, item: ReadyItem) -> None:
        self._ready = True
        if self._status is JobStatus.PREPARING:  # a cancel that came first keeps CANCELLING
            self._set_status(JobStatus.RUNNING)
        self.ready.emit(item.value)

    def _on_end(self, item: EndItem) -> None:
        if self._thread is not None:
            self._thread.join(5.0)  # it has posted its last item: it is returning
        self._end()
        if item.outcome is Outcome.RESULT:
            self.result.emit(item.value)
        elif item.outcome is Outcome.FAILED:
            self.failed.emit(str(item.value))
        else:
            self.cancelled.emit()

    def _end(self) -> None:
        self._thread = None
        self._timer.stop()
        self._release_settled()
        self._set_status(JobStatus.IDLE)

    def _release_settled(self) -> None:
        settled, self._settled = self._settled, []
        for done in settled:
            done.set()

    def _check_free(self) -> None:
        if self.running:
            raise UsageError(f"a {self.name} is already running")
        blocked = self._blocker()
        if blocked:
            raise UsageError(blocked)

    def _set_status(self, status: JobStatus) -> None:
        if status is self._status:
            return
        was_running = self.running
        self._status = status
        if self.running != was_running:
            self.running_changed.emit(self.running)
