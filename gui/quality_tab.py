"""The Quality tab: perplexity through each engine's own forward pass, beside its speed.

Engines, model and generation settings come from the setup panel (a short greedy bench gives
tokens/s and the token streams compared with the reference); the text, max length and stride
are here. A `QualitySession` runs in a thread on the tab's job controller, like the bench. Its
results are `quality`'s: the table, the top-5 logits where an engine diverges, speed against
perplexity, and the verdict the command prints under its table.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QFileDialog, QFormLayout, QLabel, QLineEdit, QPushButton, QSplitter, QWidget

from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.report import figures
from whistle_stop.backends.results.verdict import Verdict, verdict
from whistle_stop.backends.runs.bench import BenchResult, RunRecorded
from whistle_stop.backends.runs.perplexity import window_problem
from whistle_stop.backends.runs.quality import (
    DEFAULT_STRIDE,
    DEFAULT_TEXT,
    QualityResult,
    QualitySession,
    QualitySettings,
    quality_rows_as_dicts,
    write_quality,
)
from whistle_stop.backends.sources.model_files import ModelFiles
from whistle_stop.backends.worker.events import BackendEvent, Failed, Progress, ScoreProgress, WorkerLost

from .figure_export import FigureExport
from .figure_view import FigureGrid
from .job_context import JobContext
from .job_controls import JobControls, JobWording
from .job_handlers import EventRoutes, JobHandlers
from .job_manager import JobKind, JobManager
from .quality_view import QualityTable, TopLogitsView
from .settings import Store
from .setup_panel import SetupPanel
from .summary_chart import VerdictPanel
from .theme import Theme, current_theme, engine_colours
from .widgets import controls_column, path_row, set_clamped, spin, stacked, three_panes

WORDING = JobWording(
    "quality evaluation",
    " Run quality",
    "Quality evaluation",
    "cancelling…",
    could_not_run="The quality evaluation could not run",
    cancelled="Quality evaluation cancelled",
)
INTRO = (
    "Perplexity through each engine's own forward pass, beside the tokens/s of a short fair bench with the "
    "setup's settings (agreement needs greedy decoding)."
)
RANDOM_BANNER = "Random weights - timing only: perplexity is meaningless here (the tokens/s are real)."


@dataclass(frozen=True)
class QualityPrepared:
    model: ModelFiles
    text_info: dict


class QualityTab(QWidget):
    message = Signal(str)
    error = Signal(str, str)
    finished = Signal(object)  # (BenchResult, QualityResult)

    def __init__(self, setup: SetupPanel, jobs: JobManager, store: Store, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setup, self.jobs, self.store = setup, jobs, store
        self.result: BenchResult | None = None
        self.quality: QualityResult | None = None
        self.model: ModelFiles | None = None
        self.colours: dict[str, QColor] = {}  # the engines' pane colours
        self._totals = (0, 0)  # runs, windows expected
        self._runs_done = 0
        self._windows_done: dict[str, int] = {}
        self._build()
        self.job.controller.attach(
            JobHandlers(
                events=EventRoutes(
                    {
                        RunRecorded: self._run_recorded,
                        ScoreProgress: self._scoring,
                        Progress: self._engine_progress,
                        (Failed, WorkerLost): self._engine_failed,
                    },
                    after=self._show_progress,
                ),
                ready=self._on_prepared,
                result=self._on_finished,
                failed=self.job.show_failure,
                cancelled=self.job.show_cancelled,
            )
        )
        setup.changed.connect(self.refresh)
        self.refresh()

    def _build(self) -> None:
        self.text_path = QLineEdit()
        self.text_path.setPlaceholderText(f"bundled English text ({DEFAULT_TEXT.name})")
        self.text_path.setToolTip(f"a UTF-8 text file; empty: {DEFAULT_TEXT}")
        self.text_path.textChanged.connect(self.refresh)
        browse = QPushButton("…")
        browse.clicked.connect(self._choose_text)
        self.max_length = spin(0, 4096, 0, "tokens per window; 0 = the model's context", special="model's context")
        self.stride = spin(1, 4096, DEFAULT_STRIDE, "tokens between window starts (HF's strided perplexity)")
        for box in (self.max_length, self.stride):
            box.valueChanged.connect(self.refresh)
        self.job = JobControls(
            self.jobs,
            JobKind.QUALITY,
            WORDING,
            INTRO,
            (self.text_path, self.max_length, self.stride),
            self.refresh,
            self.message.emit,
            self.error.emit,
        )
        self.run_button, self.reason = self.job.run_button, self.job.reason
        self.progress, self.status = self.job.progress, self.job.status
        self.run_button.clicked.connect(self.start)
        self.scatter = FigureGrid(1)
        self.figure_export = FigureExport(self.scatter, self.store, self.message.emit, self.error.emit)
        form = QFormLayout()
        form.addRow("Text", path_row(self.text_path, browse))
        form.addRow("Max length", self.max_length)
        form.addRow("Stride", self.stride)
        controls = controls_column(
            form,
            self.run_button,
            self.job.cancel_button,
            status=(self.reason, self.progress, self.status, self.figure_export.button),
        )

        self.banner = QLabel(RANDOM_BANNER)
        self.banner.setObjectName("notice")
        self.banner.setWordWrap(True)
        self.banner.setVisible(False)
        self.table = QualityTable()
        self.table.itemSelectionChanged.connect(self._show_selected)
        self.top = TopLogitsView()
        results = QSplitter(Qt.Orientation.Vertical)
        results.addWidget(self.table)
        results.addWidget(self.top)
        results.setSizes([120, 170])
        middle = stacked(self.banner, results, stretch=results)
        self.verdict = VerdictPanel()  # the verdict `quality` prints under its table
        figures_and_verdict = QSplitter(Qt.Orientation.Vertical)
        figures_and_verdict.addWidget(self.scatter)
        figures_and_verdict.addWidget(self.verdict)
        figures_and_verdict.setSizes([190, 110])
        three_panes(self, (controls, middle, figures_and_verdict), stretch=1, sizes=(300, 700, 480))

    # --- inputs -------------------------------------------------------------------------------
    def settings(self) -> QualitySettings:
        text = self.text_path.text().strip()
        return QualitySettings(
            text_path=Path(text).expanduser() if text else None,
            max_length=self.max_length.value() or None,
            stride=self.stride.value(),
        )

    def problem(self) -> str:
        blocked = self.job.blocker()
        if blocked:
            return blocked
        problem = self.setup.problem()
        if problem:
            return problem
        text = self.text_path.text().strip()
        if text and not Path(text).expanduser().is_file():
            return f"the text file {text} does not exist"
        context = self.setup.model_info.context
        window = self.max_length.value() or context
        return window_problem(window, self.stride.value(), context) if window is not None else ""

    def refresh(self) -> None:
        self.job.show_problem(self.problem())
        random = self.model.is_random if self.model is not None else bool(self.setup.model_info.is_random)
        self.banner.setVisible(random)

    # --- running ----------------------------------------------------------------------------
    def start(self) -> bool:
        self.setup.flush()
        if self.job.refuse(self.problem()):
            return False
        # tokens/s beside perplexity: uncontended; `quality` runs no harness calibration, nor says it did
        config = replace(self.setup.config(), mode="fair", calibrate_harness=False)
        try:
            session = QualitySession(config, self.settings(), on_event=self.job.controller.sink())
        except UsageError as exc:
            self.error.emit("Cannot run the quality evaluation", str(exc))
            return False
        self.result = self.quality = self.model = None
        self.colours = engine_colours(list(config.backends))
        self._totals = (len(config.backends) * (config.warmup + config.repeats), 0)
        self._runs_done, self._windows_done = 0, {}
        self.table.set_rows([], {}, QColor())
        self.top.show_for(None, None)
        self.scatter.clear_figures()
        self.verdict.set_verdict(None)
        self.progress.setRange(0, 0)
        self.status.setText(f"resolving the model {config.model}…")

        def work(context: JobContext) -> tuple[BenchResult, QualityResult]:
            model, ids = context.prepare(config.model, session.prepare)
            context.ready(QualityPrepared(model, dict(session.text_info)))
            result = session.run(model, ids)
            return result, session.quality

        self.job.controller.start(work, session.cancel)
        self.message.emit("quality evaluation running…")
        return True

    # --- events (GUI thread) ----------------------------------------------------------------------
    def _on_prepared(self, prepared: QualityPrepared) -> None:
        self.model = prepared.model
        info = prepared.text_info
        self._totals = (self._totals[0], info["windows"] * len(self.colours))
        self.status.setText(
            f"{prepared.model.label}: {info['text_tokens']} text tokens, {info['windows']} "
            f"window(s) of {info['max_length']} (stride {info['stride']}); bench first"
        )
        self.refresh()
        self._show_progress()

    def _run_recorded(self, _event: RunRecorded) -> None:
        self._runs_done += 1
        self.status.setText(f"bench: {self._runs_done}/{self._totals[0]} runs")

    def _scoring(self, event: BackendEvent) -> None:
        self._windows_done[event.backend] = event.event.windows_done
        self.status.setText(f"{event.backend}: scoring window {event.event.windows_done}/{event.event.windows_total}")

    def _engine_progress(self, event: BackendEvent) -> None:
        self.status.setText(f"{event.backend}: {event.event.message}")

    def _engine_failed(self, event: BackendEvent) -> None:
        self.status.setText(f"{event.backend}: failed")

    def _show_progress(self) -> None:
        total = sum(self._totals)
        if total and self._totals[1]:
            self.progress.setRange(0, total)
            self.progress.setValue(min(total, self._runs_done + sum(self._windows_done.values())))

    def _on_finished(self, value: tuple[BenchResult, QualityResult]) -> None:
        self.result, self.quality = value
        self.model = self.result.model
        self.progress.setRange(0, 1)
        self.progress.setValue(1)
        self.show_results()
        text, scored = finished_text(self.result, self.quality)
        self.status.setText(f"{text} · {scored}")
        self.message.emit(text)
        self.finished.emit(value)

    # --- results ---------------------------------------------------------------------------------
    def show_results(self) -> None:
        if self.quality is None or self.model is None:
            return
        self.table.set_rows(self.quality.rows, self.colours, QColor(current_theme().error))
        figure = figures.speed_vs_quality(quality_rows_as_dicts(self.quality.rows), self.model.is_random)
        self.scatter.show_figures([figure], self.colours)
        self.verdict.set_verdict(quality_verdict(self.result, self.quality))
        self.refresh()
        diverging = [i for i, r in enumerate(self.quality.rows) if r.first_divergence is not None]
        others = [i for i, r in enumerate(self.quality.rows) if r.backend != r.reference]
        pick = (diverging or others or [0])[0]
        if self.quality.rows:
            self.table.selectRow(pick)

    def _show_selected(self) -> None:
        name = self.table.selected_backend()
        if self.quality is None or name is None:
            self.top.show_for(None, None)
            return
        row = next(r for r in self.quality.rows if r.backend == name)
        self.top.show_for(row, next((d for d in self.quality.divergences if d.backend == name), None))

    def has_results(self) -> bool:
        return self.quality is not None

    def write_results(self, folder: Path) -> Path | None:
        """quality.csv, divergence.json and the session's records (for a report); None if none yet."""
        if self.result is None or self.quality is None:
            return None
        write_quality(folder, self.result, self.quality)
        return folder

    def _choose_text(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Text to compute perplexity on", self.text_path.text(), "Text files (*.txt *.md);;All files (*)"
        )
        if path:
            self.text_path.setText(path)

    # --- preferences and theme ---------------------------------------------------------------
    def prefs(self) -> dict:
        return {"text": self.text_path.text(), "max_length": self.max_length.value(), "stride": self.stride.value()}

    def set_prefs(self, prefs: object) -> None:
        if not isinstance(prefs, dict):
            return
        if isinstance(prefs.get("text"), str):
            self.text_path.setText(prefs["text"])
        for key, box in (("max_length", self.max_length), ("stride", self.stride)):
            if isinstance(prefs.get(key), int) and not isinstance(prefs[key], bool):
                set_clamped(box, prefs[key])

    def apply_theme(self, theme: Theme) -> None:
        self.scatter.apply_theme(theme)
        self.verdict.apply_theme(theme)
        if self.quality is not None:
            self.show_results()


def quality_verdict(result: BenchResult | None, quality: QualityResult) -> Verdict | None:
    """The verdict `quality` prints: the session's runs against its reference, with the perplexity changes."""
    if result is None or not quality.rows:
        return None
    rows = quality_rows_as_dicts(quality.rows)
    return verdict(result.runs, list(result.config.backends), quality.rows[0].reference or None, rows)


def finished_text(result: BenchResult, quality: QualityResult) -> tuple[str, str]:
    """How the evaluation ended, and what it scored: the tokens of every window, or, when cancelled or
    when an engine failed, how many engines have a perplexity (the planned tokens were not all scored)."""
    failed = [r.backend for r in quality.rows if r.status.is_failure]
    scored = sum(1 for r in quality.rows if r.perplexity is not None)
    if result.cancelled:
        return "Quality evaluation cancelled", f"perplexity of {scored} of {len(quality.rows)} engines"
    text = "Quality evaluation finished" + (f"; failed: {', '.join(failed)}" if failed else "")
    if scored < len(quality.rows):
        return text, f"perplexity of {scored} of {len(quality.rows)} engines"
    return text, f"{quality.info.get('scored_tokens', '?')} tokens scored"
