"""The main window: setup on the left, one pane per engine in the centre, charts, the results
table, the Sweep, Quality, Profile, Load and Serve tabs at the bottom. It builds the parts, lays them
out and binds the menus; the Run button's job is the bench controller's, each tab runs its own,
the job manager keeps one at a time. Every number comes from the engine room's records and
functions."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtGui import QCloseEvent, QGuiApplication
from PySide6.QtWidgets import QApplication, QDockWidget, QLabel, QMainWindow, QProgressBar, QScrollArea, QTabWidget

from whistle_stop.backends.results.records import runs_of

from . import gc_guard
from .actions import REPLAY_SPEEDS, build_actions
from .bench_controller import RACE_WARNING, BenchController
from .charts import HistogramChart, LatencyChart, RaceChart
from .compare_dialog import CompareSessionsDialog
from .job_manager import JobKind, JobManager
from .live import LiveView
from .load_tab import LoadTab
from .messages import Messages
from .profile_tab import ProfileTab
from .quality_tab import QualityTab
from .replay import Replayer
from .reports import ReportsController
from .results_model import RunsTable
from .serve_tab import ServeTab
from .session_files import SessionFiles
from .session_view import SessionView
from .settings import Store, default_settings
from .setup_panel import SetupPanel
from .streams_grid import StreamsGrid
from .summary_chart import SummaryView
from .sweep_tab import SweepTab
from .theme import Theme, current_theme, icon
from .theme import apply_theme as apply_app_theme


class MainWindow(QMainWindow):
    session_loaded = Signal()

    def __init__(self, settings: QSettings | None = None) -> None:
        super().__init__()
        gc_guard.acquire()  # cycles are collected in this thread only while the window lives (gc_guard.py)
        self._gc_guarded = True
        self.store = Store(settings if settings is not None else default_settings())
        self.setWindowTitle("whistle-stop")
        self.setWindowIcon(icon("app"))
        self.setDockOptions(QMainWindow.DockOption.AnimatedDocks | QMainWindow.DockOption.AllowTabbedDocks)

        # In dependency order: the jobs (one at a time), widgets, the session on screen, the tabs
        # that run jobs, the layout, then the helpers and actions that act on all of it (the
        # bench's controller among them); signals last.
        self.jobs = JobManager(self)
        self.setup = SetupPanel(self.jobs)
        self.grid = StreamsGrid()
        self.latency, self.race, self.histogram = LatencyChart(), RaceChart(), HistogramChart()
        self.summary = SummaryView()
        self.table = RunsTable()
        self.live = LiveView(self.grid, self.latency, self.race)
        self.view = SessionView(
            self.grid,
            self.live,
            self.latency,
            self.race,
            self.histogram,
            self.summary,
            self.table,
            lambda: self.tabs.currentWidget(),
            self._update_actions,
        )
        self.replayer = Replayer(self.live, self)
        self.jobs.follow(
            JobKind.REPLAY,
            lambda: self.replayer.running,
            self.replayer.stop,
            self.replayer.started,
            self.replayer.finished,
        )
        self.sweep_tab = SweepTab(self.setup, self.jobs, self.store)
        self.quality_tab = QualityTab(self.setup, self.jobs, self.store)
        self.profile_tab = ProfileTab(self.setup, self.jobs, self.store)
        self.load_tab = LoadTab(self.setup, self.jobs, self.store)
        self.view.quality_rows = self._quality_rows
        self.serve_tab = ServeTab(self.setup, self.jobs)
        self._build_layout()
        self.state = QLabel("Ready")
        self.prepare_bar = QProgressBar()
        self._build_status_bar()
        self.messages = Messages(self.state, self)
        self.bench = BenchController(self.jobs, self.setup, self.view, self.messages, self.prepare_bar, self.store)
        self.files = SessionFiles(self, self.store, self.messages)
        self.reports = ReportsController(
            self, self.store, self.messages, lambda: self.view.data, self.sweep_tab, self.quality_tab
        )
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
        for widget, title in [
            (self.latency, "Latency per token"),
            (self.race, "Race"),
            (self.summary, "Summary"),
            (self.histogram, "ITL histogram"),
            (self.table, "Runs"),
            (self.sweep_tab, "Sweep"),
            (self.quality_tab, "Quality"),
            (self.profile_tab, "Profile"),
            (self.load_tab, "Load"),
            (self.serve_tab, "Serve"),
        ]:
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
        self.tabs.currentChanged.connect(lambda _index: self.view.refresh_if_shown())
        self.setup.run_requested.connect(self.start_run)
        self.jobs.changed.connect(self._update_actions)
        self.replayer.finished.connect(self._on_replay_finished)
        for tab in (self.sweep_tab, self.quality_tab):
            tab.finished.connect(lambda _result: self._update_actions())  # results to report now
        for tab in (self.sweep_tab, self.quality_tab, self.profile_tab, self.load_tab, self.serve_tab):
            tab.message.connect(self.messages.say)
            tab.error.connect(self.messages.report)
        hints = QGuiApplication.styleHints()
        hints.colorSchemeChanged.connect(lambda _scheme: self.on_scheme_changed())

    def apply_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.setStyleSheet(
            f"QLabel#randomBadge {{ background: #b5541c; color: white; border-radius: 9px; padding: 2px 9px; "
            f"font-weight: bold; }}"
            f"QLabel#notice {{ background: {theme.warn_bg}; color: {theme.warn_fg}; border-radius: 4px; "
            f"padding: 6px; }}"
            f"QLabel#muted {{ color: {theme.muted}; }}"
            f"QGroupBox {{ font-weight: bold; }}"
        )
        for widget in (
            self.grid,
            self.latency,
            self.race,
            self.histogram,
            self.summary,
            self.sweep_tab,
            self.quality_tab,
            self.profile_tab,
            self.load_tab,
            self.serve_tab,
        ):
            widget.apply_theme(theme)

    def on_scheme_changed(self) -> None:
        """The system's colour scheme changed: follow it."""
        app = QApplication.instance()
        self.apply_theme(apply_app_theme(app) if app is not None else current_theme())

    # --- running (the bench's own controller: bench_controller.py) ---------------------------------
    def start_run(self) -> bool:
        """Run what the setup panel says; False (and the reason shown) if it cannot start."""
        return self.bench.start()

    def cancel(self) -> None:
        """Esc: stop whichever job runs (only one can)."""
        self.jobs.cancel()

    def replay(self, speed: float | None = None) -> bool:
        data = self.view.data
        if self.jobs.busy() or not data.finished:
            return False
        speed = speed or REPLAY_SPEEDS.get(self.actions.replay_speed.currentText(), 1.0)
        self.view.show_engines(data.backends)
        self.view.refresh_results()  # show_engines emptied the histogram; a replay changes no record
        self.setup.show_session(data.setup_params(), data.engine_options())
        self.live.begin(data.prompt, data.reference, data.greedy, 1)
        self.live.quiet_measured = False
        self.view.set_live(max((r.new_tokens for r in data.runs), default=None))
        started = self.replayer.start(data.runs, data.tokens, speed)
        lanes = Replayer.lanes_for(data.runs, data.tokens)
        for name, pane in self.grid.panes.items():
            if name not in lanes:  # failed or cancelled before a measured token: nothing to replay
                pane.set_tag("no measured run", "warn")
                pane.set_status(next((r.error for r in runs_of(data.runs, name) if r.error), ""))
        self.messages.say(
            "replaying the measured runs on their recorded time axis…" if started else "nothing to replay"
        )
        self._update_actions()
        return started

    def _on_replay_finished(self) -> None:
        # a replay only animates the records: finished or stopped part-way (whose figures no record
        # holds), the panes and curves show the whole recorded runs again, tags included
        self.view.redraw()
        self.messages.say(
            "Replay finished"
            if self.replayer.completed
            else "Replay stopped: the panes show the whole recorded runs again"
        )

    def _update_actions(self) -> None:
        data = self.view.data
        self.actions.set_state(
            self.jobs.busy(),
            not self.setup.problem(),
            bool(data.runs) and data.finished,
            self.view.replayable,
            self.jobs.running(JobKind.REPLAY),
            self.reports.can_report(),
        )

    # --- files and reports (the menu asks for a folder; tests and scripts pass one) ------------
    def export_csv(self, folder: Path | None = None) -> bool:
        return self.files.export_csv(self.view.data, folder)

    def save_session(self, folder: Path | None = None) -> bool:
        saved = self.files.save(self.view.data, folder)
        if saved is not None:
            self.setWindowTitle(f"whistle-stop — {saved.name}")
        return saved is not None

    def open_session(self, folder: Path | None = None) -> bool:
        if self.jobs.running(JobKind.BENCH):
            return False
        loaded = self.files.load(folder)
        if loaded is None:
            return False
        folder, data = loaded
        self.replayer.stop()
        self.view.show_engines(data.backends)
        self.setup.show_session(data.setup_params(), data.engine_options())
        self.live.begin(data.prompt, data.reference, data.greedy, 1)
        self.view.show(data)
        self.grid.set_info(data.describe())
        self.grid.set_banner(RACE_WARNING if data.concurrent else "")
        self.setWindowTitle(f"whistle-stop — {folder.name}")
        self.messages.say(
            f"Opened {folder}: {len(data.runs)} runs, {len(data.tokens)} tokens; the setup holds its settings"
        )
        self.session_loaded.emit()
        return True

    def export_charts(self, folder: Path | None = None) -> list[Path]:
        self.view.refresh_if_stale()
        return self.files.export_charts(
            {"latency": self.latency, "race": self.race, "summary": self.summary.bars, "histogram": self.histogram},
            folder,
        )

    def copy_markdown(self) -> str:
        return self.files.copy_markdown(self.view.data, self._quality_rows(self.view.data))

    def _quality_rows(self, data) -> list[dict] | None:
        """The Quality tab's rows when they scored the session's model: the verdict's perplexity change."""
        tab = self.quality_tab
        if tab.quality is None or tab.model is None:
            return None
        same = tab.model.weights_hash == (data.environment.get("model") or {}).get("weights_sha256_16")
        return [vars(row) for row in tab.quality.rows] if same else None

    def export_report(self, folder: Path | None = None) -> Path | None:
        return self.reports.export_report(folder)

    def compare_folders(self, folders: list[Path] | None = None, out: Path | None = None) -> Path | None:
        return self.reports.compare_folders(folders, out)

    def compare_sessions(self) -> CompareSessionsDialog:
        """File > Compare sessions…: `compare`'s table for BASE and NEW folders (non-modal)."""
        dialog = CompareSessionsDialog(self.store.last_folder(), self)
        dialog.show()
        return dialog

    # --- preferences and closing --------------------------------------------------------------
    def _restore(self) -> None:
        self.setup.set_params(self.store.params())
        prefs = self.store.prefs()
        if prefs.get("replay_speed") in REPLAY_SPEEDS:
            self.actions.replay_speed.setCurrentText(prefs["replay_speed"])
        self.sweep_tab.set_prefs(prefs.get("sweep"))
        self.quality_tab.set_prefs(prefs.get("quality"))
        self.load_tab.set_prefs(prefs.get("load"))
        self.serve_tab.set_prefs(prefs.get("serve"))
        if isinstance(prefs.get("tab"), int) and 0 <= prefs["tab"] < self.tabs.count():
            self.tabs.setCurrentIndex(prefs["tab"])
        geometry, state = self.store.geometry()
        if geometry is not None:
            self.restoreGeometry(geometry)
        if state is not None:
            self.restoreState(state)

    def closeEvent(self, event: QCloseEvent) -> None:
        """Cancel and wait for the workers (and stop a server) so that no engine process outlives the window."""
        if self.jobs.running(JobKind.BENCH):
            self.messages.say("stopping the engines…")
        self.jobs.shutdown()
        self.replayer.stop()
        self.setup.probe.close()
        self.store.save_params(self.setup.params())
        self.store.save_prefs(
            {
                "replay_speed": self.actions.replay_speed.currentText(),
                "tab": self.tabs.currentIndex(),
                "sweep": self.sweep_tab.prefs(),
                "quality": self.quality_tab.prefs(),
                "load": self.load_tab.prefs(),
                "serve": self.serve_tab.prefs(),
            }
        )
        self.store.save_geometry(self.saveGeometry(), self.saveState())
        self.store.sync()
        super().closeEvent(event)
        if self._gc_guarded:  # once, however often the window is closed
            self._gc_guarded = False
            gc_guard.release()
