"""The window's file actions: Export CSV, Save/Open session, Export charts, Copy summary.

A session on disk is the folder `bench --out` writes (tokens.csv, runs.csv, environment.json):
saved with `export.write_results`, read back with `results_io.load_results`. Each action takes
an optional folder (tests and scripts pass one; the menu asks with a folder dialog) and reports
failures in the window without losing what is on screen.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFileDialog

from backends.errors import UsageError
from backends.results.export import write_results
from backends.results.reader import load_results

from .session_data import SessionData

CHART_FILES = {"latency": "latency.png", "race": "race.png", "summary": "summary.png", "histogram": "itl_histogram.png"}
RACE_WARNING = ("Race mode: the engines ran at the same time and shared the CPU, so these timings are "
                "contended. Use Fair mode for numbers to compare.")


class SessionFilesMixin:
    """Mixed into MainWindow (uses its data, store, charts, live view and message helpers)."""

    # --- files --------------------------------------------------------------------------------
    def _ask_folder(self, title: str) -> Path | None:
        folder = QFileDialog.getExistingDirectory(self, title, self.store.last_folder())
        return Path(folder) if folder else None

    def export_csv(self, folder: Path | None = None) -> bool:
        """tokens.csv, runs.csv and environment.json via write_results; False (and why) if it failed."""
        folder = folder or self._ask_folder("Export CSV into folder")
        if folder is None or not self.data.runs:
            return False
        try:
            paths = write_results(Path(folder), self.data.runs, self.data.tokens, self.data.environment)
        except OSError as exc:
            self._report("Export failed", f"Could not write to {folder}: {exc.strerror or exc}. "
                         "The results are still here: choose another folder.")
            return False
        self.store.set_last_folder(Path(folder))
        self._say("Wrote " + ", ".join(p.name for p in paths) + f" to {folder}")
        return True

    def save_session(self, folder: Path | None = None) -> bool:
        folder = folder or self._ask_folder("Save session into folder")
        if folder is None:
            return False
        saved = self.export_csv(folder)
        if saved:
            self.setWindowTitle(f"whistle-stop — {Path(folder).name}")
        return saved

    def open_session(self, folder: Path | None = None) -> bool:
        folder = folder or self._ask_folder("Open a saved session (a folder with runs.csv)")
        if folder is None or self.controller.running:
            return False
        try:
            runs, tokens, environment = load_results(Path(folder))
        except (UsageError, OSError) as exc:
            self._report("Cannot open the session", str(exc))
            return False
        self.replayer.stop()
        self.data = SessionData.from_folder(runs, tokens, environment)
        self._show_engines(self.data.backends)
        self.live.begin(self.data.prompt, self.data.reference, self.data.greedy, 1)
        self._set_live(None)
        self.live.show_records(self.data.runs, self.data.tokens)
        self.table.runs.set_records(self.data.runs)
        self._refresh_results()
        self.grid.set_info(self.data.describe())
        self.grid.set_banner(RACE_WARNING if self.data.concurrent else "")
        self.store.set_last_folder(Path(folder))
        self.setWindowTitle(f"whistle-stop — {Path(folder).name}")
        self._say(f"Opened {folder}: {len(runs)} runs, {len(tokens)} tokens")
        self._data_changed()
        self.session_loaded.emit()
        return True

    def export_charts(self, folder: Path | None = None) -> list[Path]:
        folder = folder or self._ask_folder("Export charts as PNG into folder")
        if folder is None:
            return []
        if self._results_dirty:
            self._refresh_results()
        charts = {"latency": self.latency, "race": self.race, "summary": self.summary.bars,
                  "histogram": self.histogram}
        written = []
        try:
            Path(folder).mkdir(parents=True, exist_ok=True)
            for key, chart in charts.items():
                path = Path(folder) / CHART_FILES[key]
                chart.export_png(path)
                written.append(path)
        except OSError as exc:
            self._report("Export failed", f"Could not write the charts to {folder}: {exc.strerror or exc}")
            return written
        self._say(f"Wrote {len(written)} charts to {folder}")
        return written

    def copy_markdown(self) -> str:
        text = self.data.markdown()
        QGuiApplication.clipboard().setText(text)
        self._say("Summary copied as Markdown")
        return text

