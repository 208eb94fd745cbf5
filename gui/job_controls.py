"""What the Sweep, Quality, Profile and Load tabs share about running their job: its runner (from the job
manager), the Run and Cancel buttons, the line saying why Run is off, and a status line that
shows the job's progress and its cancelling."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QPushButton

from .job_manager import JobKind, JobManager
from .job_runner import JobStatus
from .theme import current_theme, icon


class JobControls:
    def __init__(self, jobs: JobManager, kind: JobKind, name: str, run_text: str, status: QLabel,
                 cancelling: str) -> None:
        self.jobs, self.kind = jobs, kind
        self.status, self.cancelling = status, cancelling
        self.runner = jobs.runner(kind, name)
        self.run_button = QPushButton(icon("run"), run_text)
        self.cancel_button = QPushButton(icon("cancel"), " Cancel")
        self.cancel_button.clicked.connect(self.runner.cancel)
        self.cancel_button.setEnabled(False)
        self.reason = QLabel()
        self.reason.setWordWrap(True)
        self.runner.progress.connect(self._on_progress)
        self.runner.status_changed.connect(self._on_status)
        self.runner.running_changed.connect(self.cancel_button.setEnabled)

    def blocker(self) -> str:
        """Why Run cannot start because a job runs, this one included ("" when none does)."""
        return self.kind.reason if self.runner.running else self.jobs.blocker(self.kind)

    def show_problem(self, problem: str) -> None:
        """Run is enabled only without a problem; the reason is shown, except "this job runs"."""
        self.run_button.setEnabled(not problem)
        self.reason.setText("" if problem == self.kind.reason else problem)
        self.reason.setStyleSheet(f"color: {current_theme().error};")

    def _on_progress(self, message: str, fraction: float | None) -> None:
        self.status.setText(message + (f" {fraction * 100:.0f}%" if fraction is not None else ""))

    def _on_status(self, status: JobStatus) -> None:
        if status is JobStatus.CANCELLING:  # the Cancel button or Esc
            self.status.setText(self.cancelling)
