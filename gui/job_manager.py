"""One job at a time: the bench, a sweep, a quality evaluation, a profile, a load run and a replay exclude each other
(each spawns engines that would contend for the cores, and Cancel/Esc must mean one thing). A server
(the Serve tab) is not one of them: it runs beside them (the Load tab may measure it through the
`remote` engine), Esc does not stop it, and only closing the window or its own Stop button does.

The manager creates each kind's job controller, follows the replay, says which job runs
(`running`, `busy`: the one place the window reads it), why a job may not start now (`blocker`)
and cancels whichever job runs. Widgets listen to `changed` to enable their Run buttons with the
reason shown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from PySide6.QtCore import QObject, Signal, SignalInstance

from .job_controller import JobController


class JobKind(Enum):
    BENCH = "a benchmark run is in progress"
    REPLAY = "a replay is running"
    SWEEP = "a sweep is running"
    QUALITY = "a quality evaluation is running"
    PROFILE = "a profile is running"
    LOAD = "a load run is in progress"
    SERVE = "a server is running"

    @property
    def reason(self) -> str:
        """Why another job cannot start while this one runs."""
        return self.value

    @property
    def exclusive(self) -> bool:
        """Excludes the other exclusive jobs and is stopped by Esc (every kind but a server)."""
        return self is not JobKind.SERVE


@dataclass(frozen=True)
class _Job:
    is_running: Callable[[], bool]
    stop: Callable[[], None]
    controller: JobController | None  # None: followed only (the replay has no thread)


class JobManager(QObject):
    changed = Signal()  # a job started or ended

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._jobs: dict[JobKind, _Job] = {}

    def controller(self, kind: JobKind, name: str) -> JobController:
        """The controller of `kind`'s jobs; its `start` refuses while another job runs."""
        controller = JobController(name, lambda: self.blocker(kind), self)
        self._add(kind, _Job(lambda: controller.running, controller.cancel, controller), controller.running_changed)
        return controller

    def follow(
        self, kind: JobKind, is_running: Callable[[], bool], stop: Callable[[], None], *signals: SignalInstance
    ) -> None:
        """A job that is not a thread (the replay): `signals` say that it started or ended."""
        self._add(kind, _Job(is_running, stop, None), *signals)

    def running(self, kind: JobKind) -> bool:
        job = self._jobs.get(kind)
        return job is not None and job.is_running()

    def busy(self) -> bool:
        """An engine job runs (any but the replay and a server)."""
        return any(
            job.controller is not None and kind.exclusive and job.is_running() for kind, job in self._jobs.items()
        )

    def blocker(self, kind: JobKind) -> str:
        """Why a `kind` job cannot start now because another one runs ("" when it may)."""
        if not kind.exclusive:
            return ""
        return next(
            (other.reason for other in JobKind if other is not kind and other.exclusive and self.running(other)), ""
        )

    def cancel(self) -> bool:
        """Stop whichever exclusive job runs (only one can); False if none does."""
        for kind in JobKind:
            if kind.exclusive and self.running(kind):
                self._jobs[kind].stop()
                return True
        return False

    def shutdown(self) -> None:
        """Cancel every job controller and wait for its thread (it closes its workers)."""
        for job in self._jobs.values():
            if job.controller is not None:
                job.controller.shutdown()

    def _add(self, kind: JobKind, job: _Job, *signals: SignalInstance) -> None:
        self._jobs[kind] = job
        for signal in signals:
            signal.connect(lambda *_args: self.changed.emit())
