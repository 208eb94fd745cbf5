"""The job controller on its own, with a fake Qt-free job: the steps of a job's life in order, each
with its own signal (a cancel is never a failure), the running state in one place, and the
routing of events to a view's handlers.

Every wait is on a signal or a condition (never a fixed sleep).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.sources.hub import DownloadCancelled
from whistle_stop.backends.status import RunStatus
from whistle_stop.backends.worker.events import BackendEvent, Failed, Ready, WorkerLost

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from whistle_stop.gui.job_context import JobCancelled, JobContext  # noqa: E402
from whistle_stop.gui.job_controller import JobStatus  # noqa: E402
from whistle_stop.gui.job_handlers import EventRoutes, JobHandlers, event_type  # noqa: E402
from whistle_stop.gui.job_manager import JobKind, JobManager  # noqa: E402

pytestmark = pytest.mark.gui
WAIT_MS = 10_000
READY = Ready(import_s=0.1, load_s=0.2, t_ns=0, device="cpu", dtype="float32", threads=1, weight_bytes_per_token=0)


@dataclass(frozen=True)
class Note:
    text: str


@dataclass(frozen=True)
class LoudNote(Note):
    pass


class FakeJob:
    """A job as the tabs write them, without Qt or engines: it reports progress, says it is ready,
    posts events, then waits until it is let go (or cancelled) and ends as `end` says."""

    def __init__(self, post, end: str = "value") -> None:
        self.post, self.end = post, end
        self.go = threading.Event()
        self.cancel_calls = 0

    def cancel(self) -> None:  # the session's cancel: the engines stop after their token
        self.cancel_calls += 1
        self.go.set()

    def work(self, context: JobContext) -> str:
        context.progress("resolving", 0.5)
        context.ready("prepared")
        self.post(Note("one"))
        self.post(BackendEvent("a", READY))
        assert self.go.wait(30)
        if self.end == "error":
            raise RuntimeError("the engine room broke")
        if self.end == "usage":
            raise UsageError("no such model")
        if self.end == "cancel":
            context.check_cancelled()
        if self.end == "download":
            raise DownloadCancelled("download of 'gpt2' cancelled")
        return "done"


@pytest.fixture
def jobs(qtbot):
    return JobManager()


def record(controller) -> list:
    """Every step the controller says, in order."""
    steps: list = []
    controller.attach(
        JobHandlers(
            events=lambda batch: steps.append(("events", list(batch))),
            started=lambda: steps.append("started"),
            progress=lambda message, fraction: steps.append(("progress", message, fraction)),
            ready=lambda value: steps.append(("ready", value)),
            result=lambda value: steps.append(("result", value)),
            failed=lambda message: steps.append(("failed", message)),
            cancelling=lambda: steps.append("cancelling"),
            cancelled=lambda: steps.append("cancelled"),
            running=lambda running: steps.append(("running", running)),
        )
    )
    return steps


def start(controller, end: str = "value") -> FakeJob:
    job = FakeJob(controller.sink(), end)
    controller.start(job.work, job.cancel)
    return job


def test_started_progress_ready_events_then_result_in_order(qtbot, jobs):
    controller = jobs.controller(JobKind.SWEEP, "sweep")
    steps = record(controller)
    job = start(controller)
    assert steps == [("running", True), "started"]
    qtbot.waitUntil(lambda: controller.status is JobStatus.RUNNING, timeout=WAIT_MS)
    with qtbot.waitSignal(controller.result, timeout=WAIT_MS) as blocker:
        job.go.set()
    assert blocker.args == ["done"]
    events = [e for step in steps if step[0] == "events" for e in step[1]]
    assert [s if isinstance(s, str) else s[0] for s in steps if not (isinstance(s, tuple) and s[0] == "events")] == [
        "running",
        "started",
        "progress",
        "ready",
        "running",
        "result",
    ]
    assert ("progress", "resolving", 0.5) in steps and ("ready", "prepared") in steps
    assert events[0] == Note("one") and isinstance(events[1].event, Ready)
    assert steps.index(("ready", "prepared")) < next(i for i, s in enumerate(steps) if s[0] == "events")
    assert ("running", False) in steps and steps[-1] == ("result", "done")


@pytest.mark.parametrize("end, says", [("error", "RuntimeError: the engine room broke"), ("usage", "no such model")])
def test_an_error_is_failed_with_its_text_and_never_cancelled(qtbot, jobs, end, says):
    controller = jobs.controller(JobKind.QUALITY, "quality evaluation")
    steps = record(controller)
    job = start(controller, end)
    qtbot.waitUntil(lambda: controller.status is JobStatus.RUNNING, timeout=WAIT_MS)
    with qtbot.waitSignal(controller.failed, timeout=WAIT_MS) as blocker:
        job.go.set()
    assert blocker.args[0].startswith(says)
    assert "cancelled" not in steps and not any(s[0] == "result" for s in steps if isinstance(s, tuple))
    assert not controller.running and not jobs.busy()


@pytest.mark.parametrize("end", ["cancel", "download"])
def test_a_cancel_is_its_own_signal_and_never_reaches_failed(qtbot, jobs, end):
    """Cancel while the engines run: the job stops itself (JobCancelled, or a download stopped by
    the cancel) and the controller says `cancelled`, never `failed`."""
    controller = jobs.controller(JobKind.PROFILE, "profile")
    steps = record(controller)
    job = start(controller, end)
    qtbot.waitUntil(lambda: controller.status is JobStatus.RUNNING, timeout=WAIT_MS)
    with qtbot.waitSignal(controller.cancelled, timeout=WAIT_MS):
        assert jobs.cancel()
        assert controller.status is JobStatus.CANCELLING and steps[-1] == "cancelling"
    assert job.cancel_calls == 1
    assert not any(isinstance(s, tuple) and s[0] in ("failed", "result") for s in steps)
    assert steps[-1] == "cancelled" and not controller.running


def test_a_cancel_while_preparing_ends_the_job_at_once(qtbot, jobs):
    """Before "ready" nothing of the engines runs: the job ends now as cancelled, and what its
    thread posts later is dropped (a new job starts clean)."""
    controller = jobs.controller(JobKind.LOAD, "load run")
    steps = record(controller)
    stuck, late = threading.Event(), threading.Event()

    def work(context: JobContext) -> str:
        assert stuck.wait(30)
        context.progress("too late")
        late.set()
        raise RuntimeError("never shown")

    controller.sink()
    controller.start(work, lambda: None)
    with qtbot.waitSignal(controller.cancelled, timeout=1_000):
        controller.cancel()
    assert controller.status is JobStatus.IDLE and not jobs.busy()
    stuck.set()
    assert late.wait(10)
    job = start(controller)  # the next job's queue is its own
    with qtbot.waitSignal(controller.result, timeout=WAIT_MS):
        job.go.set()
    assert not any(isinstance(s, tuple) and s[0] == "failed" for s in steps)
    assert not any(isinstance(s, tuple) and s[1] == "too late" for s in steps if s[0] == "progress")


def test_the_running_state_is_read_from_the_manager_and_its_controllers(qtbot, jobs):
    bench, sweep = jobs.controller(JobKind.BENCH, "benchmark run"), jobs.controller(JobKind.SWEEP, "sweep")
    changes: list[bool] = []
    jobs.changed.connect(lambda: changes.append(jobs.busy()))
    assert not jobs.busy() and bench.status is JobStatus.IDLE and jobs.blocker(JobKind.SWEEP) == ""
    job = start(bench)
    assert bench.running and jobs.running(JobKind.BENCH) and jobs.busy() and changes == [True]
    assert not jobs.running(JobKind.SWEEP) and jobs.blocker(JobKind.SWEEP) == JobKind.BENCH.reason
    with pytest.raises(UsageError, match="benchmark run is in progress"):
        sweep.sink()
    with qtbot.waitSignal(bench.result, timeout=WAIT_MS):
        job.go.set()
    assert not bench.running and not jobs.busy() and changes == [True, False]


def test_events_are_routed_by_type_once_per_batch(qtbot, jobs):
    """A view declares a table; an engine's event is routed by what it carries, a tuple shares a
    handler, a subclass takes its base's route, and `after` runs once per batch."""
    controller = jobs.controller(JobKind.SWEEP, "sweep")
    seen: list = []
    controller.attach(
        JobHandlers(
            events=EventRoutes(
                {
                    Note: lambda e: seen.append(("note", e.text)),
                    Ready: lambda e: seen.append(("ready", e.backend)),
                    (Failed, WorkerLost): lambda e: seen.append(("failed", e.backend)),
                },
                after=lambda: seen.append("batch"),
            )
        )
    )
    post = controller.sink()

    def work(context: JobContext) -> None:
        for event in (
            Note("a"),
            LoudNote("b"),
            BackendEvent("x", READY),
            BackendEvent("y", Failed("boom")),
            BackendEvent("z", WorkerLost(RunStatus.CRASHED, "SIGSEGV")),
            42,
        ):
            post(event)

    with qtbot.waitSignal(controller.result, timeout=WAIT_MS):
        controller.start(work, lambda: None)
    assert [s for s in seen if s != "batch"] == [
        ("note", "a"),
        ("note", "b"),
        ("ready", "x"),
        ("failed", "y"),
        ("failed", "z"),
    ]
    assert seen[-1] == "batch" and seen.count("batch") >= 1


def test_event_routes_without_qt():
    calls: list = []
    routes = EventRoutes({Note: calls.append, (Ready,): calls.append}, after=lambda: calls.append("after"))
    wrapped = BackendEvent("a", READY)
    routes([Note("n"), 7, wrapped])
    assert calls == [Note("n"), wrapped, "after"]
    assert event_type(wrapped) is Ready and event_type(Note("n")) is Note
    assert routes.handler(LoudNote) is routes.handler(Note) and routes.handler(int) is None


def test_the_job_thread_never_needs_qt():
    """A job's side and the handler tables import no Qt; a job ends as exactly one item, its outcome."""
    import queue
    import subprocess
    import sys

    code = (
        "import sys, whistle_stop.gui.job_context, whistle_stop.gui.job_handlers; "
        "print(sorted(m for m in sys.modules if m.startswith(('PySide6', 'pyqtgraph'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr

    from whistle_stop.gui.job_context import EndItem, Outcome, run_job

    def outcome(work) -> EndItem:
        out: queue.Queue = queue.Queue()
        cancelled = threading.Event()
        run_job(work, JobContext(out, cancelled))
        items = [out.get_nowait() for _ in range(out.qsize())]
        assert isinstance(items[-1], EndItem) and not any(isinstance(i, EndItem) for i in items[:-1])
        return items[-1]

    assert outcome(lambda context: 3) == EndItem(Outcome.RESULT, 3)
    assert outcome(lambda context: (_ for _ in ()).throw(JobCancelled())) == EndItem(Outcome.CANCELLED)
    failed = outcome(lambda context: 1 / 0)
    assert failed.outcome is Outcome.FAILED and failed.value.startswith("ZeroDivisionError")
