"""Small widget helpers shared by the setup panel and the Summary, Sweep, Quality and Profile tabs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QStandardPaths, Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QVBoxLayout,
    QWidget,
)


def spin(low: int, high: int, value: int, tip: str, special: str = "") -> QSpinBox:
    box = QSpinBox()
    box.setRange(low, high)
    box.setValue(value)
    box.setToolTip(f"{tip} ({low}–{high})")
    box.setAccelerated(True)
    if special:
        box.setSpecialValueText(special)
    return box


def set_clamped(box: QSpinBox, value: int) -> None:
    """A saved whole number into `box`, clamped to its range: past C's int, setValue raises
    OverflowError, and a damaged settings file must not stop the window from opening."""
    box.setValue(min(max(value, box.minimum()), box.maximum()))


def dspin(low: float, high: float, value: float, step: float, tip: str) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(low, high)
    box.setDecimals(2)
    box.setSingleStep(step)
    box.setValue(value)
    box.setToolTip(f"{tip} ({low:g}–{high:g})")
    return box


def results_root() -> Path:
    """Where sweeps, quality data and reports go by default: <Documents>/whistle-stop.
    Only a path: nothing is created until something is written there."""
    documents = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
    return Path(documents or Path.home()) / "whistle-stop"


def path_row(edit: QLineEdit, button: QPushButton) -> QWidget:
    """A line edit with its "…" chooser button beside it."""
    row = QWidget()
    layout = QHBoxLayout(row)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.setSpacing(4)
    layout.addWidget(edit, 1)
    button.setFixedWidth(30)
    layout.addWidget(button)
    return row


def controls_column(
    form: QFormLayout,
    run: QPushButton,
    cancel: QPushButton,
    options: Sequence[QWidget] = (),
    status: Sequence[QWidget] = (),
) -> QWidget:
    """The left column of a task tab: its form, options, Run/Cancel, then reason/progress/status."""
    buttons = QHBoxLayout()
    buttons.addWidget(run)
    buttons.addWidget(cancel)
    column = QWidget()
    layout = QVBoxLayout(column)
    layout.setContentsMargins(6, 6, 6, 6)
    layout.addLayout(form)
    for widget in options:
        layout.addWidget(widget)
    layout.addLayout(buttons)
    for widget in status:
        layout.addWidget(widget)
    layout.addStretch(1)
    return column


def stacked(*widgets: QWidget, stretch: QWidget | None = None) -> QWidget:
    """Widgets top to bottom with no margins; `stretch` takes the spare height."""
    holder = QWidget()
    layout = QVBoxLayout(holder)
    layout.setContentsMargins(0, 0, 0, 0)
    for widget in widgets:
        layout.addWidget(widget, 1 if widget is stretch else 0)
    return holder


def results_and_note(*results: QWidget, note: QLabel, sizes: Sequence[int]) -> QSplitter:
    """Result tables above their note, in a splitter: a wrapped label sized to its text would take the
    height the tables need (a small window showed one row) and still be cut off, so the note scrolls."""
    area = QScrollArea()
    area.setWidget(note)
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    splitter = QSplitter(Qt.Orientation.Vertical)
    for widget in (*results, area):
        splitter.addWidget(widget)
    splitter.setSizes(list(sizes))
    return splitter


def three_panes(owner: QWidget, panes: Sequence[QWidget], stretch: int, sizes: Sequence[int]) -> QSplitter:
    """A tab's controls | results | figures, side by side in a splitter that fills `owner`."""
    splitter = QSplitter(Qt.Orientation.Horizontal)
    for widget in panes:
        splitter.addWidget(widget)
    splitter.setStretchFactor(stretch, 1)
    splitter.setSizes(list(sizes))
    layout = QVBoxLayout(owner)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.addWidget(splitter)
    return splitter


def read_only_table(
    table: QTableWidget,
    headers: Sequence[str] = (),
    resize: QHeaderView.ResizeMode = QHeaderView.ResizeMode.ResizeToContents,
    row_height: int = 0,
    select_rows: bool = False,
) -> QTableWidget:
    """A results table as every tab shows one: not editable, no row numbers, columns sized by
    `resize`; optionally a fixed row height and whole-row selection."""
    if headers:
        table.setHorizontalHeaderLabels(list(headers))
    table.verticalHeader().setVisible(False)
    if row_height:
        table.verticalHeader().setDefaultSectionSize(row_height)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    if select_rows:
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.horizontalHeader().setSectionResizeMode(resize)
    return table
