"""The Profile tab: where each engine's time goes, as `main.py profile` prints and writes it.

Engines, model and generation settings come from the setup panel; a `ProfileSession` runs in a
thread on the tab's job controller like every job, engine by engine. The tab shows the same table rows as the
command (profile/table.py) and the lines it prints under them (why an engine failed...), stacked bars
per phase with the memory floor, the selected engine's most expensive operations in that phase, and
the folder with the command's files: CSVs, traces (Chrome trace format) and the charts as PNGs.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QWidget,
)

from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.profile.files import write_profile
from whistle_stop.backends.profile.table import HEADERS, NOTE, UNITS, engine_lines, headers, profile_row
from whistle_stop.backends.report import figures
from whistle_stop.backends.report.plots import render_png
from whistle_stop.backends.results.export import write_results
from whistle_stop.backends.runs.profile import ProfileEngineDone, ProfileResult, ProfileSession, ProfileStarted
from whistle_stop.backends.status import RunStatus
from whistle_stop.backends.storage.atomic import check_writable_dir
from whistle_stop.backends.worker.events import BackendEvent, Progress

from .figure_export import FigureExport
from .figure_view import FigureGrid
from .job_context import JobContext
from .job_controls import JobControls, JobWording
from .job_handlers import EventRoutes, JobHandlers
from .job_manager import JobKind, JobManager
from .settings import Store
from .setup_panel import SetupPanel
from .theme import Theme
from .widgets import controls_column, read_only_table, results_and_note, results_root, three_panes

WORDING = JobWording("profile", " Run profile", "Profile", "cancelling…", could_not_run="The profile could not run")
INTRO = (
    "Each engine alone: warm-up, the measured runs (ms/token, as bench), then one run under its own profiler "
    "(torch.profiler, ORT profiling, timers...)."
)
OPS_HEADERS = ["phase", "operation", "category", "ms / step", "calls / step", "share"]
PHASES = ("decode", "prefill")


class ProfileTab(QWidget):
    message = Signal(str)
    error = Signal(str, str)
    finished = Signal(object)  # ProfileResult

    def __init__(self, setup: SetupPanel, jobs: JobManager, store: Store, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setup, self.jobs, self.store = setup, jobs, store
        self.result: ProfileResult | None = None
        self.folder: Path | None = None
        self._engines = 0
        self._build()
        self.job.controller.attach(
            JobHandlers(
                events=EventRoutes(
                    {
                        ProfileStarted: self._engine_started,
                        ProfileEngineDone: self._engine_done,
                        Progress: self._engine_progress,
                    }
                ),
                result=self._on_finished,
                failed=self.job.show_failure,
                cancelled=self.job.show_cancelled,
            )
        )
        setup.changed.connect(self.refresh)
        self.refresh()

    def _build(self) -> None:
        self.out = QLineEdit()
        self.out.setPlaceholderText(str(results_root() / "profile-<time>"))
        self.out.setToolTip("folder for breakdown.csv, top_ops.csv, profile.json, the traces and charts")
        self.job = JobControls(
            self.jobs, JobKind.PROFILE, WORDING, INTRO, (self.out,), self.refresh, self.message.emit, self.error.emit
        )
        self.run_button, self.reason = self.job.run_button, self.job.reason
        self.progress, self.status = self.job.progress, self.job.status
        self.run_button.clicked.connect(self.start)
        self.charts = FigureGrid(1)
        self.figure_export = FigureExport(self.charts, self.store, self.message.emit, self.error.emit)
        self.open_folder = QPushButton("Open traces folder")
        self.open_folder.setEnabled(False)
        self.open_folder.clicked.connect(self._open_folder)
        self.phase = QComboBox()
        self.phase.addItems(list(PHASES))
        self.phase.setToolTip("which step the table and the chart break down")
        self.phase.currentTextChanged.connect(self._phase_changed)
        self.caption = QLabel(UNITS["decode"])  # the unit of the table's figures, as the command's title says
        form = QFormLayout()
        form.addRow("Folder", self.out)
        form.addRow("Step", self.phase)
        form.addRow("Figures", self.caption)
        controls = controls_column(
            form,
            self.run_button,
            self.job.cancel_button,
            options=(self.open_folder,),
            status=(self.reason, self.progress, self.status, self.figure_export.button),
        )
        self.table = QTableWidget(0, len(HEADERS))
        read_only_table(self.table, HEADERS, select_rows=True)
        self.table.itemSelectionChanged.connect(self._show_ops)
        self.ops = read_only_table(QTableWidget(0, len(OPS_HEADERS)), OPS_HEADERS)
        self.note = QLabel(NOTE)
        self.note.setObjectName("muted")
        self.note.setWordWrap(True)
        middle = results_and_note(self.table, self.ops, note=self.note, sizes=(150, 150, 100))
        three_panes(self, (controls, middle, self.charts), stretch=1, sizes=(260, 700, 600))

    # --- inputs -------------------------------------------------------------------------------
    def problem(self) -> str:
        return self.job.blocker() or self.setup.problem()

    def refresh(self) -> None:
        self.job.show_problem(self.problem())

    def target_folder(self) -> Path:
        text = self.out.text().strip()
        return Path(text).expanduser() if text else results_root() / time.strftime("profile-%Y%m%d-%H%M%S")

    # --- running ----------------------------------------------------------------------------
    def start(self) -> bool:
        self.setup.flush()
        if self.job.refuse(self.problem()):
            return False
        config = replace(self.setup.config(), mode="fair", calibrate_harness=False)
        folder = self.target_folder()
        try:
            check_writable_dir(folder)  # now, not after every engine has been profiled
            session = ProfileSession(config, folder, on_event=self.job.controller.sink())
        except (UsageError, OSError) as exc:
            why = str(exc) if isinstance(exc, UsageError) else f"cannot write to {folder}: {exc.strerror or exc}"
            self.error.emit("Cannot profile", why)
            return False
        self.result, self.folder, self._engines = None, folder, len(config.backends)
        self.table.setRowCount(0)
        self.ops.setRowCount(0)
        self.charts.clear_figures()
        self.open_folder.setEnabled(False)
        self.progress.setRange(0, 0)
        self.status.setText(f"resolving the model {config.model}…")

        def work(context: JobContext) -> ProfileResult:
            model, ids = context.prepare(config.model, session.prepare)
            context.ready(None)
            result = session.run(model, ids)
            write_results(folder, result.bench.runs, result.bench.tokens, result.bench.environment)
            write_profile(
                folder,
                result.profiles,
                {
                    **config.as_dict(),
                    "prompt_tokens": len(ids),
                    "model": model.label,
                    "threads_resolved": session.threads,
                },
            )
            return result

        self.job.controller.start(work, session.cancel)
        self.message.emit("profiling…")
        return True

    def _engine_started(self, event: ProfileStarted) -> None:
        self.progress.setRange(0, event.total)
        self.progress.setValue(event.index - 1)
        self.status.setText(
            f"profiling {event.engine} ({event.index}/{event.total}): load, warm-up, "
            "measured runs, then the profiled run"
        )

    def _engine_done(self, event: ProfileEngineDone) -> None:
        # every row again: a faster probe of the peaks moves the earlier rows' rooflines too
        self.table.setRowCount(0)
        for profile in event.so_far:
            self._add_row(profile)

    def _engine_progress(self, event: BackendEvent) -> None:
        self.status.setText(f"{event.backend}: {event.event.message}")

    def _add_row(self, profile) -> None:
        row = self.table.rowCount()
        self.table.insertRow(row)
        for column, cell in enumerate(profile_row(profile, self.phase.currentText())):
            item = QTableWidgetItem(cell)
            if column == 0 and profile.error:
                item.setToolTip(profile.error)
            self.table.setItem(row, column, item)

    def _on_finished(self, result: ProfileResult) -> None:
        self.result = result
        self.progress.setRange(0, 1)
        self.progress.setValue(1)
        self.show_results()
        failed = [p.engine for p in result.profiles if p.status.is_failure]  # a cancelled engine did not fail
        text = "Profile cancelled" if result.cancelled else "Profile finished"
        if failed:
            text += f"; failed: {', '.join(failed)}"
        charts = self._write_charts(result) if self.folder is not None else ""
        self.status.setText(f"{text} · files in {self.folder}" + (f" ({charts})" if charts else ""))
        self.open_folder.setEnabled(self.folder is not None)
        self.message.emit(text)
        self.finished.emit(result)

    def _write_charts(self, result: ProfileResult) -> str:
        """`profile`'s charts beside its files, drawn here (a PNG is drawn on the GUI thread); "" or why not."""
        assert self.folder is not None
        pngs = {phase: self.folder / f"profile_{phase}.png" for phase in PHASES}
        try:
            for phase, png in pngs.items():
                render_png(figures.profile_breakdown(result.profiles, phase), png)
        except Exception as exc:  # noqa: BLE001 - said, not fatal: the records are written
            for png in pngs.values():
                png.unlink(missing_ok=True)  # a chart drawn before the failure would stand alone
            return "charts not written: " + (" ".join(str(exc).split()) or type(exc).__name__)
        return ""

    # --- results ---------------------------------------------------------------------------------
    def _phase_changed(self, phase: str) -> None:
        self.caption.setText(UNITS[phase])
        self.table.setHorizontalHeaderLabels(headers(phase))  # prefill's columns: its roofline
        self.show_results()
        self._show_ops()

    def show_results(self) -> None:
        if self.result is None:
            return
        self.table.setRowCount(0)
        for profile in self.result.profiles:
            self._add_row(profile)
        self.charts.show_figures([figures.profile_breakdown(self.result.profiles, self.phase.currentText())])
        # what `profile` prints under its tables before the note, which scrolls: why an engine did not finish first
        unfinished = sorted(self.result.profiles, key=lambda p: p.status == RunStatus.OK)
        lines = [line for p in unfinished for line in engine_lines(p, top_ops=False)]
        self.note.setText("\n".join([*lines, NOTE]))
        if self.result.profiles:
            self.table.selectRow(0)

    def _show_ops(self) -> None:
        rows = {index.row() for index in self.table.selectedIndexes()}
        if self.result is None or not rows:
            return
        profile = self.result.profiles[min(rows)]
        ops = [op for op in profile.top_ops if op.phase == self.phase.currentText()]  # the step shown
        self.ops.setRowCount(len(ops))
        for r, op in enumerate(ops):
            cells = [
                op.phase,
                op.name,
                op.category,
                f"{op.ms_per_step:.3f}",
                f"{op.calls_per_step:.1f}",
                f"{100 * op.share:.1f}%",
            ]
            for c, cell in enumerate(cells):
                self.ops.setItem(r, c, QTableWidgetItem(cell))

    def _open_folder(self) -> None:
        if self.folder is not None:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(self.folder)))

    def apply_theme(self, theme: Theme) -> None:
        self.charts.apply_theme(theme)
        if self.result is not None:
            self.show_results()
