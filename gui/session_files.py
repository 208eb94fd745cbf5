"""The window's file actions: Export CSV, Save/Open session, Export charts, Copy summary.

A session on disk is the folder `bench --out` writes (tokens.csv, runs.csv, environment.json):
saved with `export.write_results`, read back with `results_io.load_results`. Each action takes
an optional folder (tests and scripts pass one; the menu asks with a folder dialog) and reports
failures through the window's messages without losing what is on screen.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFileDialog, QWidget

from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.profile.files import read_profile
from whistle_stop.backends.results.export import write_results
from whistle_stop.backends.results.reader import load_results

from .messages import Messages
from .png_export import write_pngs
from .session_data import SessionData
from .settings import Store

CHART_FILES = {"latency": "latency.png", "race": "race.png", "summary": "summary.png", "histogram": "itl_histogram.png"}


class PngChart(Protocol):
    def export_png(self, path: Path) -> None: ...


class SessionFiles:
    def __init__(self, parent: QWidget, store: Store, messages: Messages) -> None:
        self.parent, self.store, self.messages = parent, store, messages

    def ask_folder(self, title: str) -> Path | None:
        folder = QFileDialog.getExistingDirectory(self.parent, title, self.store.last_folder())
        return Path(folder) if folder else None

    def export_csv(self, data: SessionData, folder: Path | None = None) -> bool:
        """tokens.csv, runs.csv and environment.json via write_results; False (and why) if it failed."""
        folder = folder or self.ask_folder("Export CSV into folder")
        if folder is None or not data.runs:
            return False
        try:
            paths = write_results(Path(folder), data.runs, data.tokens, data.environment)
        except OSError as exc:
            self.messages.report(
                "Export failed",
                f"Could not write to {folder}: {exc.strerror or exc}. "
                "The results are still here: choose another folder.",
            )
            return False
        self.store.set_last_folder(Path(folder))
        self.messages.say("Wrote " + ", ".join(p.name for p in paths) + f" to {folder}")
        return True

    def save(self, data: SessionData, folder: Path | None = None) -> Path | None:
        """The folder the session was saved into, or None."""
        folder = folder or self.ask_folder("Save session into folder")
        if folder is None or not self.export_csv(data, folder):
            return None
        return Path(folder)

    def load(self, folder: Path | None = None) -> tuple[Path, SessionData] | None:
        """A saved session (or any bench --out folder) and where it was; None (and why) if not."""
        folder = folder or self.ask_folder("Open a saved session (a folder with runs.csv)")
        if folder is None:
            return None
        try:
            runs, tokens, environment = load_results(Path(folder))
        except (UsageError, OSError) as exc:
            self.messages.report("Cannot open the session", str(exc))
            return None
        self.store.set_last_folder(Path(folder))
        profiled = bool(read_profile(Path(folder)))  # a profile's folder: each engine ran alone
        return Path(folder), SessionData.from_folder(runs, tokens, environment, interleaved=not profiled)

    def export_charts(self, charts: dict[str, PngChart], folder: Path | None = None) -> list[Path]:
        """One PNG per chart (keys of CHART_FILES); the ones written before a failure."""
        folder = folder or self.ask_folder("Export charts as PNG into folder")
        if folder is None:
            return []
        written: list[Path] = []
        try:
            write_pngs(Path(folder), {CHART_FILES[key]: chart.export_png for key, chart in charts.items()}, written)
        except OSError as exc:
            self.messages.report("Export failed", f"Could not write the charts to {folder}: {exc.strerror or exc}")
            return written
        self.store.set_last_folder(Path(folder))  # the next export's dialog opens here, as Export CSV's does
        self.messages.say(f"Wrote {len(written)} charts to {folder}")
        return written

    def copy_markdown(self, data: SessionData, quality: list[dict] | None = None) -> str:
        """The verdict and the summary table (with quality.csv's rows of the same model, if any)."""
        text = data.markdown(quality)
        QGuiApplication.clipboard().setText(text)
        self.messages.say("Summary copied as Markdown")
        return text
