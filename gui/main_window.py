"""The main window: setup on the left, one pane per engine in the centre, charts, the results
table, the Sweep, Quality, Profile and Load tabs at the bottom. It collects events and draws;
every number comes from the engine room's records and functions."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtGui import QCloseEvent, QGuiApplication
from PySide6.QtWidgets import QApplication, QDockWidget, QLabel, QMainWindow, QProgressBar, QScrollArea, QTabWidget

from whistle_stop.backends import registry
from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.registry import EngineSpec
from whistle_stop.backends.runs.bench import BenchConfig, BenchResult, RunRecorded
from whistle_stop.backends.runs.events import HarnessCalibrating
from whistle_stop.backends.sources.prompts import prompt_text

from . import gc_guard
from .actions import REPLAY_SPEEDS, build_actions
from .bench_job import BenchPrepared, start_bench
from .charts import HistogramChart, LatencyChart, RaceChart
from .job_manager import JobKind, JobManager
from .job_runner import JobStatus
from .live import LiveView
from .load_tab import LoadTab
from .messages import Messages
from .model_probe import from_files
from .profile_tab import ProfileTab
from .quality_tab import QualityTab
from .replay import Replayer
from .reports import ReportsController
from .results_model import RunsTable
from .session_data import SessionData
from .session_files import SessionFiles
from .settings import Store, default_settings
from .setup_panel import SetupPanel
from .streams_grid import StreamsGrid
from .summary_chart import SummaryView
from .sweep_tab import SweepTab
from .theme import Theme, apply_theme as apply_app_theme, current_theme, engine_colours, icon

RACE_WARNING = ("Race mode: the engines ran at the same time and shared the CPU, so these timings are "
                "contended. Use Fair mode for numbers to compare.")


class MainWindow(QMainWindow):
    session_loaded = Signal()

    def __init__(self, extra_specs: dict[str, EngineSpec] | None = None, settings: QSettings | None = None) -> None:
        super().__init__()
        gc_guard.acquire()  # cycles are collected in this thread only while the window lives (gc_guard.py)
        self._gc_guarded = True
        self.extra_specs = dict(extra_specs or {})
        self.store = Store(settings if settings is not None else default_settings())
        self.data = SessionData()
        self._results_dirty = False
        self._cancelling = False
        self._replayable = False  # a finished fair session with measured runs
        self._config = BenchConfig()
        self._started_at = 0.0
        self.colours: dict = {}
        self.setWindowTitle("whistle-stop")
        self.setWindowIcon(icon("app"))
        self.setDockOptions(QMainWindow.DockOption.AnimatedDocks | QMainWindow.DockOption.AllowTabbedDocks)

        # In dependency order: widgets, the jobs (one at a time), the tabs that run them, the
        # layout, then the helpers and actions that act on all of it; signals last.
        self.setup = SetupPanel(self.extra_specs)
        self.grid = StreamsGrid()
        self.latency, self.race, self.histogram = LatencyChart(), RaceChart(), HistogramChart()
        self.summary = SummaryView()
        self.table = RunsTable()
        self.live = LiveView(self.grid, self.latency, self.race)
        self.replayer = Replayer(self.live, self)
        self.jobs = JobManager(self)
        self.bench = self.jobs.runner(JobKind.BENCH, "benchmark run")
        self.jobs.follow(JobKind.REPLAY, lambda: self.replayer.running, self.replayer.stop,
                         self.replayer.started, self.replayer.finished)
        self.sweep_tab = SweepTab(self.setup, self.jobs, self.extra_specs)
        self.quality_tab = QualityTab(self.setup, self.jobs, self.extra_specs)
        self.profile_tab = ProfileTab(self.setup, self.jobs, self.extra_specs)
        self.load_tab = LoadTab(self.setup, self.jobs, self.extra_specs)
        self._build_layout()
        self.state = QLabel("Ready")
        self.prepare_bar = QProgressBar()
        self._build_status_bar()
        self.messages = Messages(self.state, self)
        self.files = SessionFiles(self, self.store, self.messages)
        self.reports = ReportsController(self, self.store, self.messages, lambda: self.data, self.sweep_tab,
                                         self.quality_tab)
        self.actions = build_actions(self, self)
        self.actions.view_menu.addAction(self.setup_dock.toggleViewAction())
        self.actions.view_menu.addAction(self.charts_dock.toggleViewAction())
        self._connect()
        self.apply_theme(current_theme())
        self._restore()
        self._update_actions()

    @property
    def last_error(self) -> str:
        return self.messages.last_error

    # --- building -----------------------------------------------------------------------------
    def _build_layout(self) -> None:
        self.setCentralWidget(self.grid)
        scroll = QScrollArea()
        scroll.setWidget(self.setup)
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setMinimumWidth(345)
        self.setup_dock = QDockWidget("Setup", self)
        self.setup_dock.setObjectName("setupDock")
        self.setup_dock.setWidget(scroll)
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, self.setup_dock)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        for widget, title in [(self.latency, "Latency per token"), (self.race, "Race"), (self.summary, "Summary"),
                              (self.histogram, "ITL histogram"), (self.table, "Runs"), (self.sweep_tab, "Sweep"),
                              (self.quality_tab, "Quality"), (self.profile_tab, "Profile"), (self.load_tab, "Load")]:
            self.tabs.addTab(widget, title)
        self.charts_dock = QDockWidget("Charts and results", self)
        self.charts_dock.setObjectName("chartsDock")
        self.charts_dock.setWidget(self.tabs)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.charts_dock)
        self.resize(1440, 920)
        self.resizeDocks([self.charts_dock], [370], Qt.Orientation.Vertical)

    def _build_status_bar(self) -> None:
        self.prepare_bar.setMaximumWidth(220)
        self.prepare_bar.setVisible(False)
        self.statusBar().addWidget(self.state, 1)
        self.statusBar().addPermanentWidget(self.prepare_bar)

    def _connect(self) -> None:
        self.setup.changed.connect(self._update_actions)
        self.tabs.currentChanged.connect(lambda _index: self._refresh_if_shown())
        self.setup.run_requested.connect(self.start_run)
        bench = self.bench
        bench.progress.connect(self._on_prepare_progress)
        bench.ready.connect(self._on_prepared)
        bench.events.connect(self._on_events)
        bench.finished.connect(self._on_finished)
        bench.failed.connect(self._on_failed)
        bench.status_changed.connect(self._on_bench_status)
        self.jobs.changed.connect(self._on_jobs_changed)
        self.replayer.finished.connect(self._on_replay_finished)
        for tab in (self.sweep_tab, self.quality_tab):
            tab.finished.connect(lambda _result: self._update_actions())  # results to report now
        for tab in (self.sweep_tab, self.quality_tab, self.profile_tab, self.load_tab):
            tab.message.connect(self.messages.say)
            tab.error.connect(self.messages.report)
        hints = QGuiApplication.styleHints()
        hints.colorSchemeChanged.connect(lambda _scheme: self.on_scheme_changed())

    def apply_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.setStyleSheet(
            f"QLabel#randomBadge {{ background: #b5541c; color: white; border-radius: 9px; padding: 2px 9px; "
            f"font-weight: bold; }}"
            f"QLabel#notice {{ background: {theme.warn_bg}; color: {theme.warn_fg}; border-radius: 4px; padding: 6px; }}"
            f"QLabel#muted {{ color: {theme.muted}; }}"
            f"QGroupBox {{ font-weight: bold; }}")
        for widget in (self.grid, self.latency, self.race, self.histogram, self.summary, self.sweep_tab,
                       self.quality_tab, self.profile_tab, self.load_tab):
            widget.apply_theme(theme)

    def on_scheme_changed(self) -> None:
        """The system's colour scheme changed: follow it."""
        app = QApplication.instance()
        self.apply_theme(apply_app_theme(app) if app is not None else current_theme())

    # --- running ------------------------------------------------------------------------------
    def start_run(self) -> bool:
        """Run what the setup panel says; False (and the reason shown) if it cannot start."""
        self.setup.flush()
        problem = self.setup.problem() or self.jobs.blocker(JobKind.BENCH)
        if problem:
            self.messages.say(problem)
            return False
        config = self.setup.config()
        self._config = config
        self._cancelling = False
        self._replayable = False
        specs = {n: self.extra_specs[n] for n in config.backends if n in self.extra_specs}
        self.show_engines(list(config.backends))
        reference = config.reference or ("hf" if "hf" in config.backends else config.backends[0])
        self.data = SessionData(backends=list(config.backends), reference=reference,
                                greedy=config.sampling.is_greedy, mode=config.mode)
        self.live.begin(config.prompt or "", reference, config.sampling.is_greedy, config.repeats)
        self.live.quiet_measured = config.mode == "fair"
        self._set_live(config.new_tokens)
        self.table.runs.set_records([])
        self._refresh_results()
        self.grid.set_banner(RACE_WARNING if config.mode == "race" else "")
        self._started_at = time.monotonic()
        try:
            start_bench(self.bench, config, specs)
        except UsageError as exc:
            self.messages.report("Cannot run", str(exc))
            return False
        self.messages.say(f"resolving the model {config.model}…")
        self.prepare_bar.setRange(0, 0)
        self.prepare_bar.setVisible(True)
        self.store.save_params(self.setup.params())
        return True

    def cancel(self) -> None:
        """Esc: stop whichever job runs (only one can)."""
        self.jobs.cancel()

    def show_engines(self, names: list[str]) -> None:
        """A pane and a curve per engine, each in its colour."""
        colours = engine_colours(names, registry.names() + list(self.extra_specs))
        described = [(n, colours[n], (self.extra_specs.get(n) or registry.get(n)).description) for n in names]
        self.grid.set_engines(described)
        for chart in (self.latency, self.race, self.histogram):
            chart.set_engines(colours)
        self.colours = colours

    def _set_live(self, length: int | None) -> None:
        for chart in (self.latency, self.race):
            chart.set_live(length)

    def _on_bench_status(self, status: JobStatus) -> None:
        if status is JobStatus.CANCELLING:
            self._cancelling = True
            self.messages.say("cancelling: each engine stops after its current token…")

    def _on_prepare_progress(self, message: str, fraction: float | None) -> None:
        self.prepare_bar.setRange(0, 0 if fraction is None else 100)
        if fraction is not None:
            self.prepare_bar.setValue(int(fraction * 100))
        self.messages.say(f"{message} (Esc cancels)")

    def _on_prepared(self, prepared: BenchPrepared) -> None:
        model, prompt_ids = prepared.model, prepared.prompt_ids
        self.prepare_bar.setVisible(False)
        if model.spec == self.setup.model_spec():
            self.setup.set_model_info(from_files(model))
        self.data.model_label, self.data.is_random, self.data.notice = model.label, model.is_random, model.notice
        self.data.prompt = prompt_text(prompt_ids)
        self.live.prompt = self.data.prompt
        banner = [model.notice] if model.notice else []
        if self.data.mode == "race":
            banner.append(RACE_WARNING)
        self.grid.set_banner("\n".join(banner))
        self.grid.set_info(f"{model.label}  ·  {len(prompt_ids)}-token prompt  ·  {self._config.new_tokens} new "
                           f"tokens  ·  {'greedy' if self.data.greedy else 'sampling'}  ·  {self.data.mode} mode")
        self.messages.say("engines starting…")

    def _on_events(self, batch: list) -> None:
        self.live.apply(batch)
        recorded = [e for e in batch if isinstance(e, RunRecorded)]
        for event in recorded:
            self.data.runs.append(event.record)
            self.data.tokens.extend(event.tokens)
            self.table.runs.append(event.record)
        if recorded:
            self._results_dirty = True  # redrawn when its tab is shown, not in the middle of a stream
            self._refresh_if_shown()
            self.messages.say(f"{len(self.data.runs)} run(s) recorded…")
        if any(isinstance(e, HarnessCalibrating) for e in batch):
            self.messages.say("timing the harness's own cost per token (null engine)…")

    def _on_finished(self, result: BenchResult) -> None:
        self.prepare_bar.setVisible(False)
        self.data = SessionData.from_result(result, prompt_text(result.prompt_ids))
        self.table.runs.set_records(self.data.runs)
        self._set_live(None)
        self.live.show_records(self.data.runs, self.data.tokens)
        self._refresh_results()
        self._data_changed()
        took = time.monotonic() - self._started_at
        failed = sorted({r.backend for r in self.data.runs if r.status not in ("ok", "cancelled")})
        if result.cancelled:
            self.messages.say(f"Cancelled after {took:.1f} s: the {len(self.data.runs)} run(s) recorded so far are kept")
        elif failed:
            self.messages.say(f"Finished in {took:.1f} s; failed: {', '.join(failed)} (see their panes)")
        else:
            self.messages.say(f"Finished in {took:.1f} s: {len(self.data.runs)} runs"
                              + ("  ·  press Replay to race the measured runs" if self.data.mode == "fair" else ""))
        self._update_actions()

    def _on_failed(self, message: str) -> None:
        self.prepare_bar.setVisible(False)
        for pane in self.grid.panes.values():
            pane.set_tag("cancelled" if self._cancelling else "not run", "warn" if self._cancelling else "error")
            pane.set_status(message.splitlines()[0])
        if self._cancelling:  # the user asked for it: no dialog
            self.messages.say(f"Cancelled: {message}")
        else:
            self.messages.report("The run could not start", message)
        self._update_actions()

    def _on_jobs_changed(self) -> None:
        self.setup.set_running(self.jobs.busy())
        self._update_actions()

    def replay(self, speed: float | None = None) -> bool:
        if self.jobs.busy() or not self.data.finished:
            return False
        speed = speed or REPLAY_SPEEDS.get(self.actions.replay_speed.currentText(), 1.0)
        self.show_engines(self.data.backends)
        self.live.begin(self.data.prompt, self.data.reference, self.data.greedy, 1)
        self.live.quiet_measured = False
        self._set_live(max((r.new_tokens for r in self.data.runs), default=None))
        started = self.replayer.start(self.data.runs, self.data.tokens, speed)
        lanes = Replayer.lanes_for(self.data.runs, self.data.tokens)
        for name, pane in self.grid.panes.items():
            if name not in lanes:  # failed or cancelled before a measured token: nothing to replay
                pane.set_tag("no measured run", "warn")
                pane.set_status(next((r.error for r in self.data.runs if r.backend == name and r.error), ""))
        self.messages.say("replaying the measured runs on their recorded time axis…" if started
                          else "nothing to replay")
        self._update_actions()
        return started

    def _on_replay_finished(self) -> None:
        self._set_live(None)
        self.messages.say("Replay finished")

    # --- results on screen --------------------------------------------------------------------
    def _refresh_if_shown(self) -> None:
        if self._results_dirty and self.tabs.currentWidget() in (self.summary, self.histogram):
            self._refresh_results()

    def _refresh_results(self) -> None:
        self._results_dirty = False
        colours = self.colours
        self.summary.set_summaries(self.data.summaries(), colours, self.data.reference or None, self.data.concurrent,
                                  self.data.environment.get("harness"))
        self.histogram.set_data(self.data.measured_itl())

    def _data_changed(self) -> None:
        """A finished or opened session is on screen: work out once what can be done with it."""
        self._replayable = (self.data.finished and self.data.mode == "fair"
                            and bool(Replayer.lanes_for(self.data.runs, self.data.tokens)))
        self._update_actions()

    def _update_actions(self) -> None:
        self.actions.set_state(self.jobs.busy(), not self.setup.problem(), bool(self.data.runs) and self.data.finished,
                               self._replayable, self.replayer.running, self.reports.can_report())

    # --- files and reports (the menu asks for a folder; tests and scripts pass one) ------------
    def export_csv(self, folder: Path | None = None) -> bool:
        return self.files.export_csv(self.data, folder)

    def save_session(self, folder: Path | None = None) -> bool:
        saved = self.files.save(self.data, folder)
        if saved is not None:
            self.setWindowTitle(f"whistle-stop — {saved.name}")
        return saved is not None

    def open_session(self, folder: Path | None = None) -> bool:
        if self.jobs.running(JobKind.BENCH):
            return False
        loaded = self.files.load(folder)
        if loaded is None:
            return False
        folder, self.data = loaded
        self.replayer.stop()
        self.show_engines(self.data.backends)
        self.live.begin(self.data.prompt, self.data.reference, self.data.greedy, 1)
        self._set_live(None)
        self.live.show_records(self.data.runs, self.data.tokens)
        self.table.runs.set_records(self.data.runs)
        self._refresh_results()
        self.grid.set_info(self.data.describe())
        self.grid.set_banner(RACE_WARNING if self.data.concurrent else "")
        self.setWindowTitle(f"whistle-stop — {folder.name}")
        self.messages.say(f"Opened {folder}: {len(self.data.runs)} runs, {len(self.data.tokens)} tokens")
        self._data_changed()
        self.session_loaded.emit()
        return True

    def export_charts(self, folder: Path | None = None) -> list[Path]:
        if self._results_dirty:
            self._refresh_results()
        return self.files.export_charts({"latency": self.latency, "race": self.race, "summary": self.summary.bars,
                                         "histogram": self.histogram}, folder)

    def copy_markdown(self) -> str:
        return self.files.copy_markdown(self.data)

    def export_report(self, folder: Path | None = None) -> Path | None:
        return self.reports.export_report(folder)

    def compare_folders(self, folders: list[Path] | None = None, out: Path | None = None) -> Path | None:
        return self.reports.compare_folders(folders, out)

    # --- preferences and closing --------------------------------------------------------------
    def _restore(self) -> None:
        self.setup.set_params(self.store.params())
        prefs = self.store.prefs()
        if prefs.get("replay_speed") in REPLAY_SPEEDS:
            self.actions.replay_speed.setCurrentText(prefs["replay_speed"])
        self.sweep_tab.set_prefs(prefs.get("sweep"))
        self.quality_tab.set_prefs(prefs.get("quality"))
        self.load_tab.set_prefs(prefs.get("load"))
        if isinstance(prefs.get("tab"), int) and 0 <= prefs["tab"] < self.tabs.count():
            self.tabs.setCurrentIndex(prefs["tab"])
        geometry, state = self.store.geometry()
        if geometry is not None:
            self.restoreGeometry(geometry)
        if state is not None:
            self.restoreState(state)

    def closeEvent(self, event: QCloseEvent) -> None:
        """Cancel and wait for the workers so that no engine process outlives the window."""
        if self.jobs.running(JobKind.BENCH):
            self.messages.say("stopping the engines…")
        self.jobs.shutdown()
        self.replayer.stop()
        self.setup.probe.close()
        self.store.save_params(self.setup.params())
        self.store.save_prefs({"replay_speed": self.actions.replay_speed.currentText(), "tab": self.tabs.currentIndex(),
                               "sweep": self.sweep_tab.prefs(), "quality": self.quality_tab.prefs(),
                               "load": self.load_tab.prefs()})
        self.store.save_geometry(self.saveGeometry(), self.saveState())
        self.store.sync()
        super().closeEvent(event)
        if self._gc_guarded:  # once, however often the window is closed
            self._gc_guarded = False
            gc_guard.release()
