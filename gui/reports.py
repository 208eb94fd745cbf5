"""HTML reports from the window: "Export report (HTML)…" (this session's bench, sweep and
quality results) and "Open folders to compare…" (two or more results folders side by side).

Both call `whistle_stop.backends.report.html.build_report`, which embeds every figure as a PNG in one page.
Results that live only in memory (the bench on screen, the quality table) are first written
into the report folder's `data/` with the same writers `bench` and `quality` use.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.report.html import build_report
from whistle_stop.backends.results.export import write_results

from .messages import Messages
from .session_data import SessionData
from .settings import Store
from .widgets import results_root


class CompareDialog(QDialog):
    """A list of results folders: add, remove, then build the comparison (two or more)."""

    def __init__(self, folders: list[Path], start: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Folders to compare")
        self.start = start
        self.list = QListWidget()
        for folder in folders:
            self.list.addItem(str(folder))
        add, remove = QPushButton("Add folder…"), QPushButton("Remove")
        add.clicked.connect(self._add)
        remove.clicked.connect(lambda: [self.list.takeItem(self.list.row(i)) for i in self.list.selectedItems()])
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Build report")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        row = QHBoxLayout()
        row.addWidget(add)
        row.addWidget(remove)
        row.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Results folders (bench --out, sweep or quality folders, saved sessions):"))
        layout.addWidget(self.list)
        layout.addLayout(row)
        layout.addWidget(self.buttons)
        self.list.model().rowsInserted.connect(self._update)
        self.list.model().rowsRemoved.connect(self._update)
        self.resize(560, 320)
        self._update()

    def folders(self) -> list[Path]:
        return [Path(self.list.item(i).text()) for i in range(self.list.count())]

    def _add(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "A results folder", self.start)
        if folder and folder not in [str(f) for f in self.folders()]:
            self.list.addItem(folder)
            self.start = folder

    def _update(self) -> None:
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(self.list.count() >= 2)


def report_dir(kind: str) -> Path:
    return results_root() / "reports" / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}"


class SweepResults(Protocol):
    def results_folder(self) -> Path | None: ...


class QualityResults(Protocol):
    def has_results(self) -> bool: ...

    def write_results(self, folder: Path) -> Path | None: ...


class ReportsController:
    """The two report actions. `bench` gives the session on screen when asked (the window
    replaces it with every run); the Sweep and Quality tabs give their own results."""

    def __init__(
        self,
        parent: QWidget,
        store: Store,
        messages: Messages,
        bench: Callable[[], SessionData],
        sweep: SweepResults,
        quality: QualityResults,
    ) -> None:
        self.parent, self.store, self.messages = parent, store, messages
        self.bench, self.sweep, self.quality = bench, sweep, quality

    def sources(self, data_dir: Path) -> list[Path]:
        """Folders holding this session's results, writing in-memory ones under `data_dir` first."""
        folders: list[Path] = []
        data = self.bench()
        if data.runs and data.finished:
            bench = data_dir / "bench"
            write_results(bench, data.runs, data.tokens, data.environment)
            folders.append(bench)
        sweep = self.sweep.results_folder()
        if sweep is not None:
            folders.append(sweep)
        quality = self.quality.write_results(data_dir / "quality")
        if quality is not None:
            folders.append(quality)
        return folders

    def can_report(self) -> bool:
        data = self.bench()
        return bool((data.runs and data.finished) or self.sweep.results_folder() or self.quality.has_results())

    def export_report(self, folder: Path | None = None) -> Path | None:
        """One HTML page of this session's bench, sweep and quality results; opened when asked
        for from the menu (a folder passed in, as tests and scripts do, is not opened)."""
        interactive = folder is None
        if interactive:  # a new folder inside the chosen one: report.html, its PNGs and data/
            chosen = QFileDialog.getExistingDirectory(
                self.parent, "Where to put the report (a new folder is made inside)", self.store.last_folder()
            )
            folder = Path(chosen) / report_dir("report").name if chosen else None
        if folder is None:
            return None
        return self._build(lambda: self.sources(Path(folder) / "data"), Path(folder), interactive)

    def compare_folders(self, folders: list[Path] | None = None, out: Path | None = None) -> Path | None:
        """The comparison report of two or more results folders, opened in the browser when
        picked from the menu."""
        interactive = folders is None
        if interactive:
            known = [f for f in (self.sweep.results_folder(),) if f is not None]
            dialog = CompareDialog(known, self.store.last_folder(), self.parent)
            if dialog.exec() != QDialog.DialogCode.Accepted:
                return None
            folders = dialog.folders()
        if len(folders) < 2:
            self.messages.report("Cannot compare", "choose two or more results folders")
            return None
        return self._build(lambda: list(folders), Path(out) if out else report_dir("compare"), interactive)

    def _build(self, sources: Callable[[], list[Path]], out_dir: Path, open_it: bool) -> Path | None:
        QGuiApplication.setOverrideCursor(Qt.CursorShape.WaitCursor)
        try:
            folders = sources()
            if not folders:
                raise UsageError("nothing to report yet: run a benchmark, a sweep or a quality evaluation first")
            self.messages.say(f"building the report from {len(folders)} folder(s)…")
            path = build_report(folders, out_dir)
        except Exception as exc:  # a bad folder must not lose what is on screen
            why = str(exc) if isinstance(exc, UsageError) else f"{type(exc).__name__}: {exc}"
            self.messages.report("The report could not be built", why)
            return None
        finally:
            QGuiApplication.restoreOverrideCursor()
        self.messages.say(f"Wrote {path}")
        if open_it:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(path)))
        return path
