"""Runs one long job (a bench run, a sweep, a quality evaluation) in a Python thread and hands
its events to the GUI thread in batches.

The job's thread never touches Qt: it only puts items into a queue (the session's `on_event`
is `sink()`; progress, "ready" and the end go through its JobContext). One QTimer on the GUI
thread drains that queue ~30 times a second and emits everything it found as ONE `events`
signal, so widgets are updated once per tick however fast tokens arrive. The control signals
(progress, ready, finished, failed) come from the same timer, in order after the events that
preceded them.

No observer effect in fair mode: an engine there gets every core, so anything the window draws
while a measured run is timed competes with it. The job's sink (`QuietSink`) therefore holds
each measured fair-mode run until the window has drawn everything before it (a "settle"
barrier), then marks the job quiet: the timer only looks at a flag a few times a second and
draws nothing until the run is recorded; the whole run is then drawn at once, between runs.
Warm-ups and race mode stream live.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from dataclasses import dataclass
from enum import Enum
from typing import Callable, TypeVar

from PySide6.QtCore import QObject, QTimer, Signal

from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.runs.events import HarnessCalibrated, HarnessCalibrating, RunRecorded, SessionStarted
from whistle_stop.backends.worker.events import BackendEvent, RunRequest
from whistle_stop.backends.sources.model_files import DownloadCancelled, ProgressFn, resolve_model

from .event_queue import CANCELLED, TICK_MS, drain_in_order
from .model_probe import RESOLVE_LOCK

MAX_TICK_MS = 100
QUIET_TICK_MS = 250  # while a measured fair-mode run is timed: only a flag is read
SETTLE_TIMEOUT_S = 10.0  # a window that does not draw within this does not hold the runs up longer
T = TypeVar("T")


class JobStatus(Enum):
    IDLE = "idle"
    PREPARING = "preparing"  # resolving the model: a cancel ends the job at once
    RUNNING = "running"  # engines run: a cancel stops them after their current token
    CANCELLING = "cancelling"


@dataclass(frozen=True)
class _Progress:
    message: str
    fraction: float | None


@dataclass(frozen=True)
class _Ready:
    value: object


@dataclass(frozen=True)
class _Finished:
    value: object


@dataclass(frozen=True)
class _Failed:
    message: str


@dataclass(frozen=True)
class _Settle:
    """The job's thread waits until the window has drawn everything before this item."""

    done: threading.Event


_CONTROLS = (_Progress, _Ready, _Finished, _Failed, _Settle)


class QuietSink:
    """A session's `on_event`: puts every event into the job's queue, and keeps the window still
    while a measured fair-mode run is timed (see the module's docstring). Runs on the job's
    threads; never touches Qt."""

    def __init__(self, out: queue.Queue) -> None:
        self.out = out
        self.quiet = threading.Event()  # a measured run is in flight: the GUI does not draw
        self.cancelled = threading.Event()  # the job's cancel flag
        self._fair = False

    def __call__(self, event: object) -> None:
        if isinstance(event, SessionStarted):
            self._fair = event.config.mode == "fair"
        self.out.put(event)
        if isinstance(event, (RunRecorded, HarnessCalibrated)):
            self.quiet.clear()
        elif (self._fair and _measured_request(event)) or isinstance(event, HarnessCalibrating):
            self.settle()  # the harness calibration is timed in every mode: the engines are closed by then
            self.quiet.set()

    def settle(self) -> None:
        """Wait (bounded, and never after a cancel) until the GUI has drawn what was posted."""
        done = threading.Event()
        self.out.put(_Settle(done))
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while not done.wait(0.02):
            if self.cancelled.is_set() or time.monotonic() > deadline:
                return

    def end(self) -> None:
        self.quiet.clear()


def _measured_request(event: object) -> bool:
    return (isinstance(event, BackendEvent) and isinstance(event.event, RunRequest)
            and not (event.context is not None and event.context.is_warmup))


class JobContext:
    """What a job's thread gets: where to post events, a progress callback, the cancel flag."""

    def __init__(self, out: queue.Queue, cancelled: threading.Event, sink: QuietSink | None = None) -> None:
        self.post = out.put
        self.cancelled = cancelled
        self.sink = sink

    def progress(self, message: str, fraction: float | None = None) -> None:
        if not self.cancelled.is_set():
            self.post(_Progress(message, fraction))

    def prepare(self, model_spec: str, prepare: Callable[[ProgressFn], T]) -> T:
        """Every job's start: resolve (download if needed) the model, then the session's own
        `prepare`, which finds the files cached. A cancel stops a download (DownloadCancelled:
        `auto` does not fall back to random weights because of it) and ends the job here."""
        with RESOLVE_LOCK:  # resolve_model may write or download a model: never twice at once
            resolve_model(model_spec, self.progress, self.cancelled)
            value = prepare(self.progress)
        if self.cancelled.is_set():
            raise UsageError(CANCELLED)
        return value

    def ready(self, value: object) -> None:
        """The engines start: from now on a cancel waits for them to stop."""
        self.post(_Ready(value))


def _failure(exc: BaseException, cancelled: bool) -> str:
    """The message a job's exception ends it with."""
    if isinstance(exc, DownloadCancelled) or (isinstance(exc, UsageError) and cancelled):
        return CANCELLED
    if isinstance(exc, UsageError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"


class JobRunner(QObject):
    events = Signal(list)  # a batch of session events, in arrival order
    progress = Signal(str, object)  # message, fraction or None (while the model is prepared)
    ready = Signal(object)  # what the job passed to JobContext.ready
    finished = Signal(object)  # what the job returned (cancelled runs too)
    failed = Signal(str)  # nothing (more) ran: bad input, model not found, cancelled while preparing
    status_changed = Signal(object)  # JobStatus
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

    def sink(self) -> Callable[[object], None]:
        """A fresh queue for the next job: pass the returned callable to its session as `on_event`
        (nothing of an earlier, abandoned job can leak into the new one). UsageError if a job
        cannot start now."""
        self._check_free()
        self._next_queue = queue.Queue()
        self._next_sink = QuietSink(self._next_queue)
        return self._next_sink

    @property
    def quiet(self) -> bool:
        """A measured fair-mode run is being timed: the window draws nothing until it is recorded."""
        return self._sink is not None and self._sink.quiet.is_set()

    def start(self, work: Callable[[JobContext], object], on_cancel: Callable[[], None]) -> None:
        """Run `work` in a thread; `on_cancel` (the session's cancel) is called by `cancel`."""
        self._check_free()
        self._queue, self._next_queue = self._next_queue or queue.Queue(), None
        self._sink, self._next_sink = self._next_sink or QuietSink(self._queue), None
        self._cancelled = self._sink.cancelled  # per job: an abandoned thread keeps its own
        self._ready = False
        self._on_cancel = on_cancel
        context = JobContext(self._queue, self._cancelled, self._sink)
        self._thread = threading.Thread(target=self._work, args=(work, context), name=f"whistle-stop-{self.name}",
                                        daemon=True)
        self._thread.start()
        self._timer.setInterval(TICK_MS)
        self._timer.start()
        self._set_status(JobStatus.PREPARING)

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
        if preparing:
            self.drain()  # deliver what came before the cancel (perhaps "ready" after all)
            if self.running and not self._ready:
                self._abandon()

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
        drain_in_order(self._queue, _CONTROLS, self.events.emit, self._control)
        # A slow tick (a starved CPU) spaces the next one out, so input and painting still get
        # their turn; a fast one brings the rate back to ~30 per second.
        cost_ms = (time.perf_counter() - began) * 1e3
        interval = TICK_MS if cost_ms < TICK_MS / 2 else min(MAX_TICK_MS, int(2 * cost_ms))
        if self._timer.interval() != interval:
            self._timer.setInterval(interval)

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

    # --- job thread ----------------------------------------------------------------------------
    @staticmethod
    def _work(work: Callable[[JobContext], object], context: JobContext) -> None:
        try:
            value = work(context)
        except Exception as exc:  # anything must still end the job in the window, not the thread
            if context.sink is not None:
                context.sink.end()
            context.post(_Failed(_failure(exc, context.cancelled.is_set())))
            return
        if context.sink is not None:
            context.sink.end()  # the end must be drawn whatever happened to the last run
        context.post(_Finished(value))

    # --- GUI thread ----------------------------------------------------------------------------
    def _control(self, item: object) -> bool:
        """Emit one control item; True when the job has ended (nothing is read after that)."""
        if isinstance(item, _Progress):
            self.progress.emit(item.message, item.fraction)
            return False
        if isinstance(item, _Settle):
            self._settled.append(item.done)  # released at the next tick (see __init__)
            return False
        if isinstance(item, _Ready):
            self._ready = True
            if self._status is JobStatus.PREPARING:  # a cancel that came first keeps CANCELLING
                self._set_status(JobStatus.RUNNING)
            self.ready.emit(item.value)
            return False
        self._end()
        if isinstance(item, _Finished):
            self.finished.emit(item.value)
        elif isinstance(item, _Failed):
            self.failed.emit(item.message)
        return True

    def _abandon(self) -> None:
        """End the job now without waiting for its thread (it stops by itself and is dropped)."""
        self._thread = None
        self._timer.stop()
        self._release_settled()
        self._set_status(JobStatus.IDLE)
        self.failed.emit(CANCELLED)

    def _end(self) -> None:
        if self._thread is not None:
            self._thread.join(5.0)  # it has posted its last item: it is returning
        self._thread = None
        self._timer.stop()
        self._release_settled()
        self._set_status(JobStatus.IDLE)

    def _set_status(self, status: JobStatus) -> None:
        if status is self._status:
            return
        was_running = self.running
        self._status = status
        self.status_changed.emit(status)
        if self.running != was_running:
            self.running_changed.emit(self.running)
