"""The results table: one row per RunRecord, the columns of RUN_COLUMNS, sortable by value.
A run sampled by an engine's own sampler (native_sampling, decoding "sample") is marked † in that
column, with why its timings are not comparable as the tooltip; greedy runs are comparable."""

from __future__ import annotations

import math

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView, QWidget

from whistle_stop.backends.results.export import format_number
from whistle_stop.backends.results.records import RUN_COLUMNS, RunRecord
from whistle_stop.backends.results.summary import NATIVE_MARK, sampled

SORT_ROLE = Qt.ItemDataRole.UserRole
Index = QModelIndex | QPersistentModelIndex


def format_cell(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return format_number(value)  # as runs.csv has it
    return str(value)


class RunsModel(QAbstractTableModel):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.records: list[RunRecord] = []
        self.error_colour = QColor("#c62828")

    def rowCount(self, parent: Index = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.records)

    def columnCount(self, parent: Index = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(RUN_COLUMNS)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid():
            return None
        record = self.records[index.row()]
        column = RUN_COLUMNS[index.column()]
        value = getattr(record, column)
        native = column == "native_sampling" and bool(value)
        if role == Qt.ItemDataRole.DisplayRole:
            return f"yes {NATIVE_MARK}" if native and sampled(record) else format_cell(value)
        if role == Qt.ItemDataRole.ToolTipRole and native:
            return (
                f"{NATIVE_MARK} sampled in the engine's own code, not the shared sampler: this run's timings are "
                "not comparable with the other engines'"
                if sampled(record)
                else "the engine samples in its own code, but this greedy run is comparable"
            )
        if role == SORT_ROLE:
            return value
        if role == Qt.ItemDataRole.ToolTipRole and column in ("error", "notes") and value:
            return str(value)
        if role == Qt.ItemDataRole.ForegroundRole and record.status not in ("ok", "cancelled"):
            return self.error_colour
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        if role == Qt.ItemDataRole.TextAlignmentRole and numeric:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if role == Qt.ItemDataRole.DisplayRole:
            return RUN_COLUMNS[section] if orientation == Qt.Orientation.Horizontal else str(section + 1)
        return None

    def set_records(self, records: list[RunRecord]) -> None:
        self.beginResetModel()
        self.records = list(records)
        self.endResetModel()

    def append(self, record: RunRecord) -> None:
        row = len(self.records)
        self.beginInsertRows(QModelIndex(), row, row)
        self.records.append(record)
        self.endInsertRows()


class _ValueSort(QSortFilterProxyModel):
    """Sort by the raw value (numbers as numbers); empty cells last whichever the order."""

    def lessThan(self, left: Index, right: Index) -> bool:
        a, b = left.data(SORT_ROLE), right.data(SORT_ROLE)
        a_missing = a is None or (isinstance(a, float) and math.isnan(a))
        b_missing = b is None or (isinstance(b, float) and math.isnan(b))
        if a_missing or b_missing:
            return b_missing and not a_missing
        try:
            return a < b
        except TypeError:
            return str(a) < str(b)


class RunsTable(QTableView):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.runs = RunsModel(self)
        self.proxy = _ValueSort(self)
        self.proxy.setSourceModel(self.runs)
        self.proxy.setSortRole(SORT_ROLE)
        self.setModel(self.proxy)
        self.setSortingEnabled(True)
        self.sortByColumn(-1, Qt.SortOrder.AscendingOrder)  # arrival order until a header is clicked
        self.setAlternatingRowColors(True)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.verticalHeader().setDefaultSectionSize(22)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.horizontalHeader().setDefaultSectionSize(92)
        self.horizontalHeader().resizeSection(0, 110)
