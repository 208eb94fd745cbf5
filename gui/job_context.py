"""A job's own thread: what it gets (`JobContext`), what it posts, and how it ends. No Qt here.

A job is a plain function `work(context) -> value` that runs in a Python thread. It never
touches Qt: it only puts items into its queue (session events through `QuietSink`, the steps
of its life as the items below), and the job controller (`job_controller.py`) reads them on
the GUI thread. `run_job` turns how `work` ended into exactly one `EndItem`: its value, an
error, or a cancel (`JobCancelled` or a stopped download; never an error message).

No observer effect in fair mode: an engine there has the machine to itself, so anything the window draws
while a measured run is timed competes with it. The job's sink (`QuietSink`) therefore holds
each measured fair-mode run until the window has drawn everything before it (a "settle"
barrier), then marks the job quiet: the controller only looks at a flag a few times a second and
draws nothing until the run is recorded; the whole run is then drawn at once, between runs.
Warm-ups and race mode stream live.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.runs.events import HarnessCalibrated, HarnessCalibrating, RunRecorded, SessionStarted
from whistle_stop.backends.sources.model_files import DownloadCancelled, ProgressFn, resolve_model
from whistle_stop.backends.worker.events import BackendEvent, RunRequest

SETTLE_TIMEOUT_S = 10.0  # a window that does not draw within this does not hold the runs up longer
T = TypeVar("T")
# resolve_model may write a random model or download one: never twice at the same time (a job's
# start and the setup panel's folder check share it).
RESOLVE_LOCK = threading.Lock()


class JobCancelled(Exception):
    """Raised in a job's thread to stop it because the user cancelled (it ends as cancelled)."""


class Outcome(Enum):
    RESULT = "result"  # `work` returned (a run cancelled mid-way too: its result keeps what finished)
    FAILED = "failed"  # nothing (more) ran: bad input, model not found, a bug
    CANCELLED = "cancelled"  # stopped by the user before there was a result


@dataclass(frozen=True)
class ProgressItem:
    message: str
    fraction: float | None


@dataclass(frozen=True)
class ReadyItem:
    value: object


@dataclass(frozen=True)
class SettleItem:
    """The job's thread waits until the window has drawn everything before this item."""

    done: threading.Event


@dataclass(frozen=True)
class EndItem:
    """The job's last item: how it ended, with its value (RESULT) or its error text (FAILED)."""

    outcome: Outcome
    value: object = None


CONTROL_ITEMS = (ProgressItem, ReadyItem, SettleItem, EndItem)


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
        self.out.put(SettleItem(done))
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while not done.wait(0.02):
            if self.cancelled.is_set() or time.monotonic() > deadline:
                return

    def end(self) -> None:
        self.quiet.clear()


def _measured_request(event: object) -> bool:
    return (
        isinstance(event, BackendEvent)
        and isinstance(event.event, RunRequest)
        and not (event.context is not None and event.context.is_warmup)
    )


class JobContext:
    """What a job's thread gets: where to post events, a progress callback, the cancel flag."""

    def __init__(self, out: queue.Queue, cancelled: threading.Event, sink: QuietSink | None = None) -> None:
        self.post = out.put
        self.cancelled = cancelled
        self.sink = sink

    def progress(self, message: str, fraction: float | None = None) -> None:
        if not self.cancelled.is_set():
            self.post(ProgressItem(message, fraction))

    def check_cancelled(self) -> None:
        """JobCancelled once the user has cancelled: a job calls it where it may stop early."""
        if self.cancelled.is_set():
            raise JobCancelled()

    def prepare(self, model_spec: str, prepare: Callable[[ProgressFn], T]) -> T:
        """Every job's start: resolve (download if needed) the model, then the session's own
        `prepare`, which finds the files cached. A cancel stops a download (DownloadCancelled:
        `auto` does not fall back to random weights because of it) and ends the job here."""
        with RESOLVE_LOCK:  # resolve_model may write or download a model: never twice at once
            resolve_model(model_spec, self.progress, self.cancelled)
            value = prepare(self.progress)
        self.check_cancelled()
        return value

    def ready(self, value: object) -> None:
        """The engines start: from now on a cancel waits for them to stop."""
        self.post(ReadyItem(value))


def run_job(work: Callable[[JobContext], object], context: JobContext) -> None:
    """The job's thread: run `work` and post how it ended, last (anything it raises must still
    end the job in the window, not the thread)."""
    try:
        end = EndItem(Outcome.RESULT, work(context))
    except (JobCancelled, DownloadCancelled):
        end = EndItem(Outcome.CANCELLED)
    except UsageError as exc:  # bad input, said for the user; after a cancel, how the stop surfaced
        end = EndItem(Outcome.CANCELLED) if context.cancelled.is_set() else EndItem(Outcome.FAILED, str(exc))
    except Exception as exc:
        end = EndItem(Outcome.FAILED, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}")
    if context.sink is not None:
        context.sink.end()  # the end must be drawn whatever happened to the last run
    context.post(end)
