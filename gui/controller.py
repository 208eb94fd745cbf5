"""Runs a BenchSession in a Python thread and hands its events to the GUI thread in batches.

`on_event` is called from the session's threads (one per engine in race mode), so it only puts
events into a queue. One QTimer on the GUI thread drains that queue ~30 times a second and
emits everything it found as ONE `events` signal, so widgets are updated once per tick however
fast tokens arrive. The control signals (prepared, finished, failed) are emitted from the same
timer, in order after the events that preceded them.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from dataclasses import dataclass

from PySide6.QtCore import QObject, QTimer, Signal

from backends.errors import UsageError
from backends.sources.model_files import DownloadCancelled
from backends.registry import EngineSpec
from backends.runs.bench import BenchConfig, BenchResult, BenchSession

from .event_queue import CANCELLED, TICK_MS, drain_in_order
from .model_probe import RESOLVE_LOCK, fetch_model

MAX_TICK_MS = 100


@dataclass(frozen=True)
class _PrepareProgress:
    message: str
    fraction: float | None


@dataclass(frozen=True)
class _Prepared:
    model: object
    prompt_ids: list[int]


@dataclass(frozen=True)
class _Finished:
    result: BenchResult


@dataclass(frozen=True)
class _Failed:
    message: str


class BenchController(QObject):
    started = Signal()
    prepare_progress = Signal(str, object)  # message, fraction or None
    prepared = Signal(object, object)  # ModelFiles, prompt ids
    events = Signal(list)  # a batch of session events, in arrival order
    finished = Signal(object)  # BenchResult (cancelled ones too)
    failed = Signal(str)  # nothing ran: bad input, model not found, cancelled while preparing
    running_changed = Signal(bool)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._session: BenchSession | None = None
        self._cancelled = threading.Event()
        self._prepared = False
        self._timer = QTimer(self)
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self.drain)
        self.started_at = 0.0

    # --- public ------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self, config: BenchConfig, specs: dict[str, EngineSpec] | None = None) -> None:
        """Validate and start; UsageError from the config is raised here, before any thread."""
        if self.running:
            raise UsageError("a run is already in progress")
        self._queue = queue.Queue()  # a fresh one: nothing of an earlier (abandoned) run can leak in
        session = BenchSession(config, on_event=self._queue.put, specs=specs)
        self._session = session
        self._cancelled = threading.Event()  # per run: an abandoned thread keeps its own
        self._prepared = False
        self._thread = threading.Thread(target=self._work, args=(session, self._queue, self._cancelled),
                                        name="whistle-stop-session", daemon=True)
        self.started_at = time.monotonic()
        self._thread.start()
        self._timer.start()
        self.started.emit()
        self.running_changed.emit(True)

    def cancel(self) -> None:
        """Stop after the current token of every engine (safe to call at any time).

        While the model is still being resolved (a download), the run ends at once: the download
        stops at its next progress report (DownloadCancelled) and the thread's late results are dropped."""
        self._cancelled.set()
        if self._session is not None:
            self._session.cancel()
        if self._thread is not None and not self._prepared:
            self.drain()  # deliver what came before the cancel (perhaps "prepared" after all)
            if self._thread is not None and not self._prepared:
                self._abandon("cancelled while the model was being prepared")

    def shutdown(self, timeout_s: float = 30.0) -> bool:
        """Cancel, wait for the session thread (it closes its workers), and drop pending events.

        Returns False if the thread is still alive after `timeout_s` (its workers are daemons and
        die with the app)."""
        thread = self._thread
        if thread is None:
            return True
        self.blockSignals(True)  # the window is going away: no more updates or dialogs
        self.cancel()
        thread.join(timeout_s)
        self._timer.stop()
        self._thread = None
        self._session = None
        self.blockSignals(False)
        return not thread.is_alive()

    # --- session thread ------------------------------------------------------------------------
    @staticmethod
    def _work(session: BenchSession, out: queue.Queue, cancelled: threading.Event) -> None:
        def progress(message: str, fraction: float | None = None) -> None:
            if not cancelled.is_set():
                out.put(_PrepareProgress(message, fraction))

        try:
            with RESOLVE_LOCK:
                fetch_model(session.config.model, progress, cancelled)  # the download Cancel can stop
                model, ids = session.prepare(progress)  # finds the files cached
            if cancelled.is_set():
                out.put(_Failed(CANCELLED))
                return
            out.put(_Prepared(model, ids))
            out.put(_Finished(session.run(model, ids)))
        except DownloadCancelled:
            out.put(_Failed(CANCELLED))
        except UsageError as exc:
            out.put(_Failed(CANCELLED if cancelled.is_set() else str(exc)))
        except Exception as exc:  # anything else must still end the run in the window, not the thread
            out.put(_Failed(f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"))

    # --- GUI thread ----------------------------------------------------------------------------
    def drain(self) -> None:
        began = time.perf_counter()
        self._drain()
        # A slow tick (a starved CPU) spaces the next one out, so input and painting still get
        # their turn; a fast one brings the rate back to ~30 per second.
        cost_ms = (time.perf_counter() - began) * 1e3
        interval = TICK_MS if cost_ms < TICK_MS / 2 else min(MAX_TICK_MS, int(2 * cost_ms))
        if self._timer.interval() != interval:
            self._timer.setInterval(interval)

    def _drain(self) -> None:
        drain_in_order(self._queue, (_PrepareProgress, _Prepared, _Finished, _Failed), self.events.emit, self._control)

    def _control(self, item: object) -> bool:
        if isinstance(item, _PrepareProgress):
            self.prepare_progress.emit(item.message, item.fraction)
        elif isinstance(item, _Prepared):
            self._prepared = True
            self.prepared.emit(item.model, item.prompt_ids)
        elif isinstance(item, _Finished):
            self._end()
            self.finished.emit(item.result)
            return True
        elif isinstance(item, _Failed):
            self._end()
            self.failed.emit(item.message)
            return True
        return False

    def _abandon(self, message: str) -> None:
        """End the run now without waiting for its thread (it stops by itself and is dropped)."""
        self._thread = None
        self._session = None
        self._timer.stop()
        self.running_changed.emit(False)
        self.failed.emit(message)

    def _end(self) -> None:
        if self._thread is None:
            return
        self._thread.join(5.0)  # it has put its last item: it is returning
        self._thread = None
        self._session = None
        self._timer.stop()
        self.running_changed.emit(False)
