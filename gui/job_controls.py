"""What the Sweep, Quality, Profile and Load tabs share about running their job: its controller (from
the job manager), the Run and Cancel buttons, the line saying why Run is off, the inputs locked
while it runs, a progress bar, a status line that shows the job's progress and its cancelling,
and how a job that ended without a result is shown."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from PySide6.QtWidgets import QLabel, QProgressBar, QPushButton, QWidget

from .job_handlers import JobHandlers
from .job_manager import JobKind, JobManager
from .theme import current_theme, icon


@dataclass(frozen=True)
class JobWording:
    """How a tab names its job on screen."""

    name: str  # "load run": "a load run is already running"
    run: str  # the Run button's text
    title: str  # "Load run": the status line's subject
    cancelling: str  # the status line while the job stops
    could_not_run: str = ""  # the dialog's title when the job fails
    cancelled: str = ""  # the status bar's line when the job is cancelled before a result ("": none)


class JobControls:
    def __init__(
        self,
        jobs: JobManager,
        kind: JobKind,
        wording: JobWording,
        intro: str,
        inputs: Sequence[QWidget],
        refresh: Callable[[], None],
        say: Callable[[str], None],
        report: Callable[[str, str], None],
        progress_format: str = "",
    ) -> None:
        """`refresh`: the tab's, which enables Run or says why not; called whenever a job starts or ends."""
        self.jobs, self.kind, self.wording, self.inputs = jobs, kind, wording, tuple(inputs)
        self._say, self._report = say, report
        self.progress = QProgressBar()
        if progress_format:
            self.progress.setFormat(progress_format)
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.status = QLabel(intro)  # what the job does, until it runs
        self.status.setObjectName("muted")
        self.status.setWordWrap(True)
        self.controller = jobs.controller(kind, wording.name)
        self.run_button = QPushButton(icon("run"), wording.run)
        self.cancel_button = QPushButton(icon("cancel"), " Cancel")
        self.cancel_button.clicked.connect(self.controller.cancel)
        self.cancel_button.setEnabled(False)
        self.reason = QLabel()
        self.reason.setWordWrap(True)
        self.controller.attach(
            JobHandlers(progress=self._on_progress, cancelling=self._on_cancelling, running=self._on_running)
        )
        jobs.changed.connect(refresh)  # this job or another started or ended

    def blocker(self) -> str:
        """Why Run cannot start because a job runs, this one included ("" when none does)."""
        return self.kind.reason if self.controller.running else self.jobs.blocker(self.kind)

    def show_problem(self, problem: str) -> None:
        """Run is enabled only without a problem; the reason is shown, except "this job runs"."""
        self.run_button.setEnabled(not problem)
        self.reason.setText("" if problem == self.kind.reason else problem)
        self.reason.setStyleSheet(f"color: {current_theme().error};")

    def refuse(self, problem: str) -> bool:
        """Run was pressed: True (and the reason shown) if `problem` keeps the job from starting."""
        if problem:
            self.reason.setText(problem)
        return bool(problem)

    # --- a job that ended without a result (a tab's `failed` and `cancelled` handlers) ----------
    def show_failure(self, message: str) -> None:
        """Reset the bar, say the error's first line in the status line and the whole in a dialog."""
        self._reset_progress()
        self.status.setText(message.splitlines()[0])
        self._report(self.wording.could_not_run, message)

    def show_cancelled(self) -> None:
        self._reset_progress()
        self.status.setText(f"{self.wording.title} cancelled before the engines started")
        if self.wording.cancelled:
            self._say(self.wording.cancelled)

    # --- the job's steps ---------------------------------------------------------------------
    def _reset_progress(self) -> None:
        self.progress.setRange(0, 1)
        self.progress.setValue(0)

    def _on_progress(self, message: str, fraction: float | None) -> None:
        self.status.setText(message + (f" {fraction * 100:.0f}%" if fraction is not None else ""))

    def _on_cancelling(self) -> None:  # the Cancel button or Esc
        self.status.setText(self.wording.cancelling)

    def _on_running(self, running: bool) -> None:
        self.cancel_button.setEnabled(running)
        for widget in self.inputs:
            widget.setEnabled(not running)
