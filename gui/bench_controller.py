"""The Run button's job in the window: it builds the config from the setup panel, starts the bench
on its job controller, and says what each step of the run means on screen.

Each batch of events goes to the live view first (pane text and curves), then to this
controller's routes (the records into the session view and the runs table, the status bar).
The run's end is exactly one of: its result (a cancel mid-run keeps what finished), a failure
(a dialog), or a cancel before the engines started (no dialog). One job at a time, Cancel/Esc and
the running state are the job manager's.
"""

from __future__ import annotations

import time

from PySide6.QtWidgets import QProgressBar

from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.runs.bench import BenchConfig, BenchResult, RunRecorded
from whistle_stop.backends.runs.events import HarnessCalibrating
from whistle_stop.backends.sources.prompts import prompt_text

from .bench_job import BenchPrepared, start_bench
from .job_controller import JobStatus
from .job_handlers import EventRoutes, JobHandlers
from .job_manager import JobKind, JobManager
from .messages import Messages
from .model_probe import from_files
from .session_data import SessionData
from .session_view import SessionView
from .settings import Store
from .setup_panel import SetupPanel

RACE_WARNING = (
    "Race mode: the engines ran at the same time and shared the CPU, so these timings are "
    "contended. Use Fair mode for numbers to compare."
)
NOT_STARTED = "cancelled before the engines started"


class BenchController:
    def __init__(
        self,
        jobs: JobManager,
        setup: SetupPanel,
        view: SessionView,
        messages: Messages,
        prepare_bar: QProgressBar,
        store: Store,
    ) -> None:
        self.jobs, self.setup, self.view, self.messages = jobs, setup, view, messages
        self.prepare_bar, self.store = prepare_bar, store
        self.job = jobs.controller(JobKind.BENCH, "benchmark run")
        self._config = BenchConfig()
        self._started_at = 0.0
        self._runs_added = False  # in the batch being read
        self._calibrating = False
        self.job.attach(JobHandlers(events=view.live.apply))  # the panes and curves, before the records
        self.job.attach(
            JobHandlers(
                events=EventRoutes(
                    {RunRecorded: self._add_run, HarnessCalibrating: self._harness_timed}, after=self._batch_read
                ),
                progress=self._on_progress,
                ready=self._on_prepared,
                result=self._on_result,
                failed=self._on_failed,
                cancelling=self._on_cancelling,
                cancelled=self._on_cancelled,
            )
        )

    def start(self) -> bool:
        """Run what the setup panel says; False (and the reason shown) if it cannot start."""
        self.setup.flush()
        problem = self.setup.problem() or self.jobs.blocker(JobKind.BENCH)
        if problem:
            self.messages.say(problem)
            return False
        config = self._config = self.setup.config()
        view, live = self.view, self.view.live
        view.show_engines(list(config.backends))
        reference = config.reference_backend
        data = SessionData(
            backends=list(config.backends), reference=reference, greedy=config.sampling.is_greedy, mode=config.mode
        )
        live.begin(config.prompt or "", reference, config.sampling.is_greedy, config.repeats)
        live.quiet_measured = config.mode == "fair"
        view.set_live(config.new_tokens)
        view.begin(data)
        view.grid.set_banner(RACE_WARNING if config.mode == "race" else "")
        self._started_at = time.monotonic()
        try:
            start_bench(self.job, config)
        except UsageError as exc:
            self.messages.report("Cannot run", str(exc))
            return False
        self.messages.say(f"resolving the model {config.model}…")
        self.prepare_bar.setRange(0, 0)
        self.prepare_bar.setVisible(True)
        self.store.save_params(self.setup.params())
        return True

    # --- the job's steps ---------------------------------------------------------------------
    def _on_progress(self, message: str, fraction: float | None) -> None:
        self.prepare_bar.setRange(0, 0 if fraction is None else 100)
        if fraction is not None:
            self.prepare_bar.setValue(int(fraction * 100))
        self._say_step(f"{message} (Esc cancels)")

    def _on_prepared(self, prepared: BenchPrepared) -> None:
        model, prompt_ids, data = prepared.model, prepared.prompt_ids, self.view.data
        self.prepare_bar.setVisible(False)
        if model.spec == self.setup.model_spec():
            self.setup.set_model_info(from_files(model))
        data.model_label, data.is_random, data.notice = model.label, model.is_random, model.notice
        data.prompt = prompt_text(prompt_ids)
        self.view.live.prompt = data.prompt
        banner = [model.notice] if model.notice else []
        if data.mode == "race":
            banner.append(RACE_WARNING)
        grid = self.view.grid
        grid.set_banner("\n".join(banner))
        grid.set_info(
            f"{model.label}  ·  {len(prompt_ids)}-token prompt  ·  {self._config.new_tokens} new "
            f"tokens  ·  {'greedy' if data.greedy else 'sampling'}  ·  {data.mode} mode"
        )
        self._say_step("engines starting…")

    def _add_run(self, event: RunRecorded) -> None:
        self.view.add_run(event.record, event.tokens)
        self._runs_added = True

    def _harness_timed(self, _event: HarnessCalibrating) -> None:
        self._calibrating = True

    def _batch_read(self) -> None:
        if self._runs_added:
            self.view.runs_added()
            self._say_step(f"{len(self.view.data.runs)} run(s) recorded…")
        if self._calibrating:
            self._say_step("timing the harness's own cost per token (null engine)…")
        self._runs_added = self._calibrating = False

    def _say_step(self, message: str) -> None:
        """A step of the running job on the status bar. Once Cancel is pressed the line keeps saying
        so until the job ends: the cancelled run's own record arrives right after, and its line
        would read as if the cancel had not been taken."""
        if self.job.status is not JobStatus.CANCELLING:
            self.messages.say(message)

    def _on_cancelling(self) -> None:
        self.messages.say("cancelling: each engine stops after its current token…")

    def _on_result(self, result: BenchResult) -> None:
        self.prepare_bar.setVisible(False)
        self.view.show(SessionData.from_result(result, prompt_text(result.prompt_ids)))
        runs = self.view.data.runs
        took = time.monotonic() - self._started_at
        failed = sorted({r.backend for r in runs if r.status not in ("ok", "cancelled")})
        if result.cancelled:
            self.messages.say(f"Cancelled after {took:.1f} s: the {len(runs)} run(s) recorded so far are kept")
        elif failed:
            self.messages.say(f"Finished in {took:.1f} s; failed: {', '.join(failed)} (see their panes)")
        else:
            self.messages.say(
                f"Finished in {took:.1f} s: {len(runs)} runs"
                + ("  ·  press Replay to race the measured runs" if self.view.data.mode == "fair" else "")
            )

    def _on_failed(self, message: str) -> None:
        self._tag_panes("not run", "error", message.splitlines()[0])
        self.messages.report("The run could not start", message)

    def _on_cancelled(self) -> None:  # the user asked for it: no dialog
        self._tag_panes("cancelled", "warn", NOT_STARTED)
        self.messages.say(f"Cancelled: {NOT_STARTED}")

    def _tag_panes(self, tag: str, tone: str, status: str) -> None:
        self.prepare_bar.setVisible(False)
        for pane in self.view.grid.panes.values():
            pane.set_tag(tag, tone)
            pane.set_status(status)
