"""File > Compare sessions…: two sets of results folders, BASE and NEW, and `compare`'s table of
each engine's ratio, interval and verdict, its shares of each machine's limits and its notes. The
rows come from the engine room (report/comparison_text.py): the same `compare` prints."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.report.comparison import compare_folders, refusal
from whistle_stop.backends.report.comparison_text import HEADERS, SHARE_HEADERS, note_lines, rows, share_rows


def _folders(text: str) -> list[Path]:
    return [Path(part.strip()) for part in text.split(",") if part.strip()]


class CompareSessionsDialog(QDialog):
    """BASE and NEW (comma-separated folders each), then Compare: the table, or one line saying why not."""

    def __init__(self, start: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Compare sessions")
        self.start = start
        self.base, self.new = QLineEdit(), QLineEdit()
        self.allow_different = QCheckBox("compare even when the settings differ")
        self.compare_button = QPushButton("Compare")
        self.compare_button.clicked.connect(self.compare)
        self.table = QTableWidget(0, len(HEADERS))
        self.table.setHorizontalHeaderLabels(list(HEADERS))
        self.shares = QTableWidget(0, len(SHARE_HEADERS))
        self.shares.setHorizontalHeaderLabels(list(SHARE_HEADERS))
        self.notes = QLabel()
        self.notes.setWordWrap(True)
        form = QFormLayout()
        for label, edit in (("BASE", self.base), ("NEW", self.new)):
            row = QHBoxLayout()
            row.addWidget(edit, 1)
            choose = QPushButton("Add folder…")
            choose.clicked.connect(lambda _=False, e=edit: self._choose(e))
            row.addWidget(choose)
            form.addRow(label, row)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        buttons = QHBoxLayout()
        buttons.addWidget(self.allow_different)
        buttons.addStretch(1)
        buttons.addWidget(self.compare_button)
        layout.addLayout(buttons)
        layout.addWidget(self.table, 3)
        layout.addWidget(QLabel("Each engine against its own machine's limits (1 = at the limit):"))
        layout.addWidget(self.shares, 1)
        layout.addWidget(self.notes)
        self.resize(900, 560)

    def _choose(self, edit: QLineEdit) -> None:
        folder = QFileDialog.getExistingDirectory(self, "A results folder", self.start)
        if folder:
            edit.setText(",".join([*(str(f) for f in _folders(edit.text())), folder]))
            self.start = folder

    def compare(self) -> bool:
        """Fill the tables; False (and the reason in the notes) when the folders cannot be compared."""
        self.table.setRowCount(0)
        self.shares.setRowCount(0)
        try:
            base, new = _folders(self.base.text()), _folders(self.new.text())
            if not base or not new:
                raise UsageError("choose a BASE and a NEW results folder")
            comparison = compare_folders(base, new)
            if comparison.setting_differences and not self.allow_different.isChecked():
                raise UsageError(refusal(comparison.setting_differences))
        except UsageError as exc:
            self.notes.setText(str(exc))
            return False
        self._fill(self.table, rows(comparison))
        self._fill(self.shares, share_rows(comparison))
        self.notes.setText("\n".join(note_lines(comparison)))
        return True

    @staticmethod
    def _fill(table: QTableWidget, body: list[list[str]]) -> None:
        table.setRowCount(len(body))
        for r, row in enumerate(body):
            for c, cell in enumerate(row):
                table.setItem(r, c, QTableWidgetItem(cell))
        table.resizeColumnsToContents()
