"""The Sweep, Quality, Profile and Load tabs' "Export PNG…": their figures as the report writes them, one
`<figure name>.png` each, laid out at one size (`FigureGrid.export_figure`), into a folder asked for as the
Bench's "Export charts as PNG…" asks (from the folder QSettings remembers). A failure is one line in the
status bar, with the whole in a box, through the tab's `error` signal, and what is on screen stays."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QPushButton

from .figure_view import FigureGrid
from .png_export import write_pngs
from .settings import Store
from .theme import icon

TEXT = " Export PNG…"
NOTHING = "nothing to export yet: the figures come with the results"


class FigureExport:
    def __init__(
        self,
        grid: FigureGrid,
        store: Store,
        say: Callable[[str], None],
        report: Callable[[str, str], None],
    ) -> None:
        """`say`: a status-bar line; `report`: (title, message), an error the user must see."""
        self.grid, self.store, self._say, self._report = grid, store, say, report
        self.button = QPushButton(icon("chart"), TEXT)
        self.button.clicked.connect(lambda _checked=False: self.export())
        grid.changed.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        """Enabled only while there is a figure to write."""
        figures = self.grid.exportable()
        self.button.setEnabled(bool(figures))
        self.button.setToolTip(
            "Save " + ", ".join(f"{f.name}.png" for f in figures) + " into a folder (as the report draws them)"
            if figures
            else NOTHING
        )

    def ask_folder(self) -> Path | None:
        folder = QFileDialog.getExistingDirectory(
            self.button.window(), "Export the figures as PNG into folder", self.store.last_folder()
        )
        return Path(folder) if folder else None

    def export(self, folder: Path | None = None) -> list[Path]:
        """One PNG per figure with data; the ones written before a failure (which is said)."""
        figures = self.grid.exportable()
        if not figures:
            return []
        folder = folder or self.ask_folder()
        if folder is None:
            return []
        written: list[Path] = []
        writers = {f"{figure.name}.png": partial(self.grid.export_figure, figure) for figure in figures}
        try:
            write_pngs(Path(folder), writers, written)
        except OSError as exc:
            self._report("Export failed", f"Could not write the figures to {folder}: {exc.strerror or exc}")
            return written
        self.store.set_last_folder(Path(folder))
        self._say("Wrote " + ", ".join(p.name for p in written) + f" to {folder}")
        return written
