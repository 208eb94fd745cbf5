"""The sweep's grid: parsing the two comma lists, what a folder's earlier sweep finished, and a
table with one cell per (prompt, new tokens) that shows what will run, what is skipped (beyond
the context) and what a resume keeps."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem, QWidget

from whistle_stop.backends.results.export import ENVIRONMENT_JSON
from whistle_stop.backends.runs.sweep import SweepPlan

from .theme import Theme, current_theme

MAX_LENGTH = 100_000  # far beyond any GPT-2 context: a typo, not a setting

# state -> (text, colour role); the roles are coloured from the theme
STATES = {
    "to run": ("to run", ""),
    "skipped": ("skipped", "muted"),
    "earlier": ("done earlier", "ok"),
    "running": ("running…", "warn"),
    "done": ("done", "ok"),
    "stopped": ("not finished", "warn"),
}


@dataclass(frozen=True)
class SweepPlanned:
    """Posted by the job once the plan is known (what runs, what a resume kept, what is skipped)."""

    plan: SweepPlan


def folder_finished(folder: Path) -> list[tuple[int, int]]:
    """The cells an earlier sweep in the folder finished ([] where there is none, or where its list
    is damaged: Run sweep then says why, as the command does)."""
    try:
        data = json.loads((folder / ENVIRONMENT_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    sweep = data.get("sweep") if isinstance(data, dict) else None
    completed = sweep.get("completed") if isinstance(sweep, dict) else None
    try:
        return [(int(p), int(n)) for p, n in completed or []]
    except (TypeError, ValueError):
        return []


def parse_lengths(text: str, label: str) -> tuple[tuple[int, ...], str]:
    """("16, 64,256", "prompt lengths") -> ((16, 64, 256), "") or ((), why not)."""
    parts = [p.strip() for p in text.replace(";", ",").split(",")]
    parts = [p for p in parts if p]
    if not parts:
        return (), f"give at least one of the {label}"
    values = []
    for part in parts:
        if not (part.isascii() and part.isdigit()):  # isdigit alone passes "²", which int() refuses
            return (), f"{label}: {part!r} is not a whole number"
        value = int(part)
        if not 1 <= value <= MAX_LENGTH:
            return (), f"{label} must be from 1 to {MAX_LENGTH}, not {value}"
        values.append(value)
    return tuple(sorted(set(values))), ""


class CellGrid(QTableWidget):
    """Rows: prompt lengths; columns: new-token lengths; each cell says its state."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.states: dict[tuple[int, int], str] = {}
        self.reasons: dict[tuple[int, int], str] = {}
        self._prompts: tuple[int, ...] = ()
        self._news: tuple[int, ...] = ()
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.verticalHeader().setDefaultSectionSize(22)
        self.setToolTip("rows: prompt tokens · columns: new tokens")
        self.theme = current_theme()

    def set_grid(self, prompts: tuple[int, ...], news: tuple[int, ...], context: int | None) -> None:
        """A fresh plan: cells beyond `context` are skipped, the others to run."""
        self._prompts, self._news = prompts, news
        self.states, self.reasons = {}, {}
        for p in prompts:
            for n in news:
                if context is not None and p + n > context:
                    self.states[(p, n)] = "skipped"
                    self.reasons[(p, n)] = f"{p} + {n} tokens exceed the context of {context}"
                else:
                    self.states[(p, n)] = "to run"
        self.setRowCount(len(prompts))
        self.setColumnCount(len(news))
        self.setVerticalHeaderLabels([f"prompt {p}" for p in prompts])
        self.setHorizontalHeaderLabels([f"new {n}" for n in news])
        self._paint()

    def set_state(self, key: tuple[int, int], state: str, reason: str = "") -> None:
        if key in self.states:
            self.states[key] = state
            if reason:
                self.reasons[key] = reason
            self._paint_cell(key)

    def count(self, *states: str) -> int:
        return sum(1 for s in self.states.values() if s in states)

    def apply_theme(self, theme: Theme) -> None:
        self.theme = theme
        self._paint()

    def _paint(self) -> None:
        for key in self.states:
            self._paint_cell(key)

    def _paint_cell(self, key: tuple[int, int]) -> None:
        p, n = key
        if p not in self._prompts or n not in self._news:
            return
        text, role = STATES[self.states[key]]
        item = QTableWidgetItem(text)
        item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
        colour = {"muted": self.theme.muted, "ok": self.theme.ok, "warn": self.theme.warn_fg}.get(role)
        if colour:
            item.setForeground(QColor(colour))
        if self.states[key] == "running":
            item.setBackground(QColor(self.theme.warn_bg))
        if key in self.reasons:
            item.setToolTip(self.reasons[key])
        self.setItem(self._prompts.index(p), self._news.index(n), item)
