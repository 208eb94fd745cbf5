"""The Sweep tab: every selected engine over a grid of (prompt tokens, new tokens), resumable.

Engines, model and generation settings come from the setup panel; the grid, the output folder
and the run controls are here. A `SweepSession` runs in a thread (the tab's job controller); after each cell
it writes the folder, so running again into the same folder continues where a cancel stopped.
The three sweep plots are `whistle_stop.backends.report.sweep_figures`, drawn with
`whistle_stop.backends.report.plots.draw`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QWidget,
)

from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.report.sweep_figures import sweep_figures
from whistle_stop.backends.results.export import RUNS_CSV
from whistle_stop.backends.runs.bench import BenchResult, RunRecorded
from whistle_stop.backends.runs.sweep import CellDone, CellStarted, SweepGrid, SweepNote, SweepPlan, SweepSession
from whistle_stop.backends.runs.sweep_grid import GRIDS
from whistle_stop.backends.storage.atomic import check_writable_dir
from whistle_stop.backends.worker.events import BackendEvent, Failed, Ready, WorkerLost

from .figure_export import FigureExport
from .figure_view import FigureGrid
from .job_context import JobContext
from .job_controls import JobControls, JobWording
from .job_handlers import EventRoutes, JobHandlers
from .job_manager import JobKind, JobManager
from .settings import Store
from .setup_panel import SetupPanel
from .sweep_grid import CellGrid, SweepPlanned, folder_finished, parse_lengths
from .theme import Theme, engine_colours
from .widgets import controls_column, path_row, results_root, three_panes

WORDING = JobWording(
    "sweep", " Run sweep", "Sweep", "cancelling: the current run stops after its token; finished cells are kept"
)
PROMPT_SOURCES = ["bundled text, cut to each length", "the setup prompt, repeated to each length"]


class SweepTab(QWidget):
    message = Signal(str)  # a status-bar line
    error = Signal(str, str)  # title, message: the window shows it
    finished = Signal(object)  # the BenchResult (cancelled ones too)

    def __init__(self, setup: SetupPanel, jobs: JobManager, store: Store, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setup, self.jobs, self.store = setup, jobs, store
        self.result: BenchResult | None = None
        self.runs: list = []
        self.tokens: list = []
        self.last_folder: Path | None = None
        self._session: SweepSession | None = None
        self._plan: SweepPlan | None = None
        self._colours: dict = {}
        self._preview_key: tuple = ()
        self._cells_done = False  # in the batch being read: the plots are redrawn after it
        self._build()
        self.job.controller.attach(
            JobHandlers(
                events=EventRoutes(
                    {
                        CellStarted: self._cell_started,
                        CellDone: self._cell_done,
                        SweepNote: self._note,
                        RunRecorded: self._run_recorded,
                        Ready: self._engine_loaded,
                        (Failed, WorkerLost): self._engine_failed,
                    },
                    after=self._redraw_if_cells_done,
                ),
                ready=self._on_planned,
                result=self._on_finished,
                failed=self._on_failed,
                cancelled=self._on_cancelled,
            )
        )
        setup.changed.connect(self.refresh)
        self.refresh()

    # --- building -----------------------------------------------------------------------------
    def _build(self) -> None:
        self.prompt_lengths = QLineEdit("16, 64, 256, 512")
        self.new_lengths = QLineEdit("16, 64, 256")
        self.grid_choice = QComboBox()
        self.grid_choice.addItem("custom")
        for name, named in GRIDS.items():
            self.grid_choice.addItem(name)
            self.grid_choice.setItemData(self.grid_choice.count() - 1, named.help, Qt.ItemDataRole.ToolTipRole)
        self.grid_choice.setToolTip("a named grid fills the lengths (as `sweep --grid NAME`)")
        self.grid_choice.currentTextChanged.connect(self._grid_chosen)
        for edit, what in ((self.prompt_lengths, "prompt"), (self.new_lengths, "generated")):
            edit.setToolTip(f"{what} lengths in tokens, separated by commas")
            edit.textChanged.connect(self.refresh)
        self.prompt_source = QComboBox()
        self.prompt_source.addItems(PROMPT_SOURCES)
        self.prompt_source.currentIndexChanged.connect(self.refresh)
        self.folder = QLineEdit(str(results_root() / "sweep"))
        self.folder.setToolTip("the sweep writes here after every cell; running again into it resumes")
        self.folder.textChanged.connect(self.refresh)
        browse = QPushButton("…")
        browse.setToolTip("choose the output folder")
        browse.clicked.connect(self._choose_folder)
        self.restart = QCheckBox("Start over (discard the sweep in this folder)")
        self.restart.toggled.connect(self.refresh)
        self.measure = QCheckBox("Measure bandwidth and peaks (once per machine)")
        self.measure.setToolTip(
            "the memory bandwidth and the CPU's arithmetic peaks that the charts' limit lines (decode's floor, "
            "prefill's roofline) are drawn from; measured once per machine and thread count, then cached"
        )
        self.measure.setChecked(True)
        self.job = JobControls(
            self.jobs,
            JobKind.SWEEP,
            WORDING,
            "",
            (
                self.grid_choice,
                self.prompt_lengths,
                self.new_lengths,
                self.prompt_source,
                self.folder,
                self.restart,
                self.measure,
            ),
            self.refresh,
            self.message.emit,
            self.error.emit,
            "%v / %m cells",
        )
        self.run_button, self.reason = self.job.run_button, self.job.reason
        self.progress, self.current = self.job.progress, self.job.status
        self.progress.setTextVisible(False)  # "0 / 1 cells" beside a grid of four: no count until a plan
        self.run_button.clicked.connect(self.start)
        self.figures = FigureGrid(3)
        self.figure_export = FigureExport(self.figures, self.store, self.message.emit, self.error.emit)

        form = QFormLayout()
        form.addRow("Grid", self.grid_choice)
        form.addRow("Prompt tokens", self.prompt_lengths)
        form.addRow("New tokens", self.new_lengths)
        form.addRow("Prompt text", self.prompt_source)
        form.addRow("Output folder", path_row(self.folder, browse))
        controls = controls_column(
            form,
            self.run_button,
            self.job.cancel_button,
            (self.restart, self.measure),
            (self.reason, self.progress, self.current, self.figure_export.button),
        )

        self.grid = CellGrid()
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setPlaceholderText("what the sweep did: resumed cells, skipped cells, notes")
        middle = QSplitter(Qt.Orientation.Vertical)
        middle.addWidget(self.grid)
        middle.addWidget(self.log)
        middle.setSizes([170, 120])
        three_panes(self, (controls, middle, self.figures), stretch=2, sizes=(330, 250, 1000))

    def _grid_chosen(self, name: str) -> None:
        """A named grid's lengths into the fields (they stay editable: an edit makes it custom)."""
        named = GRIDS.get(name)
        if named is None:
            return
        self.prompt_lengths.setText(", ".join(map(str, named.grid.prompt_tokens)))
        self.new_lengths.setText(", ".join(map(str, named.grid.new_tokens)))

    # --- reading the inputs ---------------------------------------------------------------------
    def lengths(self) -> tuple[tuple[int, ...], tuple[int, ...], str]:
        prompts, why = parse_lengths(self.prompt_lengths.text(), "prompt lengths")
        news, why_new = parse_lengths(self.new_lengths.text(), "new-token lengths")
        return prompts, news, why or why_new

    def problem(self) -> str:
        """Why Run sweep cannot start now, or ""."""
        blocked = self.job.blocker()
        if blocked:
            return blocked
        prompts, news, why = self.lengths()
        problem = why or self.setup.settings_problem()
        if problem:
            return problem
        if self.prompt_source.currentIndex() == 1 and not self.setup.prompt.toPlainText().strip():
            return "the setup prompt is empty"
        if not self.folder.text().strip():
            return "choose an output folder"
        if self.grid.states and self.grid.count("skipped") == len(self.grid.states):
            return f"every cell exceeds the model's context of {self.setup.model_info.context} tokens"
        return ""

    def refresh(self, replan: bool = False) -> None:
        """Say what is wrong; re-plan the preview when an input changed (a finished sweep's
        states stay on screen until then)."""
        key = (
            self.prompt_lengths.text(),
            self.new_lengths.text(),
            self.setup.model_info.context,
            self.folder.text(),
            self.restart.isChecked(),
        )
        if not self.job.controller.running and (replan or key != self._preview_key):
            self._preview_key = key
            self._preview()
        self.job.show_problem(self.problem())

    def _preview(self) -> None:
        """Cells beyond the context are skipped; cells finished in the folder are kept by a resume."""
        prompts, news, why = self.lengths()
        self.grid.set_grid(*(((), (), None) if why else (prompts, news, self.setup.model_info.context)))
        folder = self.folder.text().strip()
        if folder and not self.restart.isChecked():
            for key in folder_finished(Path(folder).expanduser()):
                if self.grid.states.get(key) == "to run":
                    self.grid.set_state(key, "earlier", "finished in this folder: kept if the settings match")

    # --- running ----------------------------------------------------------------------------------
    def start(self) -> bool:
        """Start the sweep; False (and the reason shown) if it cannot."""
        self.setup.flush()
        self.refresh(replan=True)
        if self.job.refuse(self.problem()):
            return False
        prompts, news, _ = self.lengths()
        setup_prompt = self.setup.prompt.toPlainText() if self.prompt_source.currentIndex() == 1 else None
        config = replace(
            self.setup.config(), mode="fair", prompt=setup_prompt, prompt_tokens=prompts[0], new_tokens=news[0]
        )
        folder = Path(self.folder.text().strip()).expanduser()
        try:
            check_writable_dir(folder)
            session = SweepSession(
                config,
                SweepGrid(prompts, news),
                folder,
                restart=self.restart.isChecked(),
                on_event=self.job.controller.sink(),
                measure_bandwidth=self.measure.isChecked(),
            )
        except (UsageError, OSError) as exc:
            why = str(exc) if isinstance(exc, UsageError) else f"cannot write to {folder}: {exc.strerror or exc}"
            self.error.emit("Cannot run the sweep", why)
            return False
        self._session, self._plan, self.result, self.last_folder = session, None, None, folder
        self.runs, self.tokens = [], []
        self._colours = engine_colours(list(config.backends))
        self.restart.setChecked(False)  # one-shot: running again resumes
        self.figures.clear_figures()
        self.log.clear()
        self.progress.setRange(0, 0)
        self.current.setText(f"resolving the model {config.model}…")

        def work(context: JobContext) -> BenchResult:
            plan = context.prepare(config.model, session.prepare)
            context.ready(SweepPlanned(plan))
            return session.run(plan)

        self.job.controller.start(work, session.cancel)
        self.message.emit(f"sweep into {folder}…")
        return True

    # --- events (GUI thread) ----------------------------------------------------------------------
    def _cell_started(self, event: CellStarted) -> None:
        self.grid.set_state((event.prompt_tokens, event.new_tokens), "running")
        self.current.setText(f"cell {event.index}/{event.total}: prompt {event.prompt_tokens} · new {event.new_tokens}")

    def _cell_done(self, event: CellDone) -> None:
        self.grid.set_state((event.prompt_tokens, event.new_tokens), "done")
        self.progress.setValue(event.index)
        self._cells_done = True

    def _note(self, event: SweepNote) -> None:
        self._log(event.message)

    def _run_recorded(self, event: RunRecorded) -> None:
        self.runs.append(event.record)
        self.tokens.extend(event.tokens)
        if event.record.status not in ("ok", "cancelled"):
            self._log(f"{event.record.run_id}: {event.record.status}: {event.record.error}")

    def _engine_loaded(self, event: BackendEvent) -> None:
        self._log(f"{event.backend}: loaded ({event.event.load_s:.2f} s)")

    def _engine_failed(self, event: BackendEvent) -> None:
        self.current.setText(f"{event.backend}: failed (see the log)")

    def _redraw_if_cells_done(self) -> None:
        if self._cells_done:
            self._cells_done = False
            self.draw()

    def _on_planned(self, planned: SweepPlanned) -> None:
        if self._planned(planned.plan):
            self.draw()

    def _planned(self, plan: SweepPlan) -> bool:
        self._plan = plan
        prompts, news, _ = self.lengths()
        self.grid.set_grid(prompts, news, None)
        for cell in plan.skipped:
            self.grid.set_state((cell.prompt_tokens, cell.new_tokens), "skipped", cell.reason)
            self._log(f"skipped: prompt {cell.prompt_tokens}, new {cell.new_tokens}: {cell.reason}")
        for key in plan.completed:
            self.grid.set_state(key, "earlier", "finished by an earlier run into this folder")
        if plan.model.notice:
            self._log(plan.model.notice)
        if plan.completed:
            self._log(
                f"resuming: {len(plan.completed)} cell(s) already complete in {self.last_folder}, "
                f"{len(plan.cells)} to run"
            )
        self._log(f"{plan.model.label}: {len(plan.cells)} cell(s) to run")
        self.runs, self.tokens = list(plan.previous_runs), list(plan.previous_tokens)
        self.progress.setRange(0, max(1, len(plan.cells)))
        self.progress.setValue(0 if plan.cells else 1)
        self.progress.setTextVisible(True)
        return bool(self.runs)

    def _on_finished(self, result: BenchResult) -> None:
        self.result = result
        self.runs, self.tokens = list(result.runs), list(result.tokens)
        self._stop_running_cells()
        self.draw(result.environment)
        done = self.grid.count("done", "earlier")
        total = done + self.grid.count("to run", "stopped")
        failed = sorted({r.backend for r in result.runs if r.status not in ("ok", "cancelled")})
        if result.cancelled:
            text = (
                f"Sweep cancelled: {done} of {total} cells are saved in {self.last_folder}; Run sweep again to resume"
            )
        else:
            text = f"Sweep finished: {done} cells in {self.last_folder}" + (
                f"; failed: {', '.join(failed)}" if failed else ""
            )
        self.current.setText(text)
        self._log(text)
        self.message.emit(text)
        self.finished.emit(result)

    def _on_failed(self, message: str) -> None:
        self._stop_running_cells()
        self.progress.setRange(0, 1)
        # The engine room's advice names CLI flags: say it with this tab's words.
        for cli, gui in (
            ("use --restart to discard", 'tick "Start over" to discard'),
            ("choose another --out", "choose another output folder"),
            ("run the same command to resume it", "use the same settings to resume it"),
        ):
            message = message.replace(cli, gui)
        self.current.setText(message.splitlines()[0])
        self.error.emit("The sweep could not run", message)

    def _on_cancelled(self) -> None:
        self._stop_running_cells()
        self.progress.setRange(0, 1)
        self.current.setText("Sweep cancelled before the engines started")
        self.message.emit("Sweep cancelled")

    def _stop_running_cells(self) -> None:
        for key, state in list(self.grid.states.items()):
            if state == "running":
                self.grid.set_state(key, "stopped", "cancelled mid-cell: a resume runs it again")

    # --- drawing -------------------------------------------------------------------------------
    def draw(self, environment: dict | None = None) -> None:
        """The three sweep figures from the records so far (each cell adds its points)."""
        bandwidth = environment.get("bandwidth") if environment else None
        if bandwidth is None and self._session is not None and self._session.bandwidth is not None:
            bandwidth = self._session.bandwidth.as_dict()
        if bandwidth is None and self._plan is not None:
            bandwidth = self._plan.previous_bandwidth
        gb_s = (bandwidth or {}).get("gb_s")
        self.figures.show_figures(sweep_figures(self.runs, self.tokens, environment, gb_s), self._colours)

    def results_folder(self) -> Path | None:
        """The folder of the last sweep, if it holds records (for reports)."""
        folder = self.last_folder
        return folder if folder is not None and (folder / RUNS_CSV).exists() and self.runs else None

    def _log(self, text: str) -> None:
        self.log.appendPlainText(text)

    def _choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(
            self, "Sweep output folder (an existing sweep there is resumed)", self.folder.text()
        )
        if folder:
            self.folder.setText(folder)

    # --- preferences and theme ---------------------------------------------------------------
    def prefs(self) -> dict:
        return {
            "prompt_lengths": self.prompt_lengths.text(),
            "new_lengths": self.new_lengths.text(),
            "prompt_source": self.prompt_source.currentIndex(),
            "folder": self.folder.text(),
            "measure": self.measure.isChecked(),
        }

    def set_prefs(self, prefs: object) -> None:
        if not isinstance(prefs, dict):
            return
        for key, edit in (
            ("prompt_lengths", self.prompt_lengths),
            ("new_lengths", self.new_lengths),
            ("folder", self.folder),
        ):
            if isinstance(prefs.get(key), str) and prefs[key].strip():
                edit.setText(prefs[key])
        if prefs.get("prompt_source") in (0, 1):
            self.prompt_source.setCurrentIndex(prefs["prompt_source"])
        if isinstance(prefs.get("measure"), bool):
            self.measure.setChecked(prefs["measure"])

    def apply_theme(self, theme: Theme) -> None:
        self.figures.apply_theme(theme)
        self.grid.apply_theme(theme)
        self.refresh()
