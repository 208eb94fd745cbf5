"""The Quality tab's results: one row per engine (perplexity, its difference to the reference,
tokens/s, agreement, first divergence) and the top-5 logits at a selected engine's divergence."""

from __future__ import annotations

import math

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from whistle_stop.backends.results.summary import status_cell
from whistle_stop.backends.runs.quality import Divergence, QualityRow
from whistle_stop.backends.runs.quality_rows import ppl_change_text

from .widgets import read_only_table

COLUMNS = ["engine", "dtype", "perplexity", "Δ vs reference", "tokens/s", "agreement", "first divergence", "status"]


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def row_cells(row: QualityRow) -> list[str]:
    delta = ppl_change_text(row.backend, row.reference, row.ppl_diff, row.ppl_diff_pct)
    agreement = (
        f"{row.agree_tokens}/{row.compared_tokens} ({100 * row.agree_share:.0f}%)"
        if row.agree_share is not None
        else "-"
    )
    status = status_cell(str(row.status), row.error)  # the terminal's cell: a cut error ends in "…"
    return [
        row.backend,
        row.dtype,
        _num(row.perplexity, 3),
        delta,
        _num(row.decode_tok_s, 1),
        agreement,
        "-" if row.first_divergence is None else str(row.first_divergence),
        status,
    ]


class QualityTable(QTableWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, len(COLUMNS), parent)
        self.rows: list[QualityRow] = []
        read_only_table(self, COLUMNS, row_height=22, select_rows=True)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.horizontalHeader().setStretchLastSection(True)

    def set_rows(self, rows: list[QualityRow], colours: dict[str, QColor], error: QColor) -> None:
        self.rows = list(rows)
        self.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, text in enumerate(row_cells(row)):
                item = QTableWidgetItem(text)
                left = COLUMNS[c] in ("engine", "dtype", "status")
                item.setTextAlignment(
                    (Qt.AlignmentFlag.AlignLeft if left else Qt.AlignmentFlag.AlignRight)
                    | Qt.AlignmentFlag.AlignVCenter
                )
                if c == 0 and row.backend in colours:
                    item.setForeground(colours[row.backend])
                elif row.status != "ok":
                    item.setForeground(error)
                if COLUMNS[c] == "status" and row.error:
                    item.setToolTip(row.error)
                self.setItem(r, c, item)

    def selected_backend(self) -> str | None:
        row = self.currentRow()
        return self.rows[row].backend if 0 <= row < len(self.rows) else None


# Qt numbers unnamed columns "1", "2": say what they hold until a divergence names both engines.
EMPTY_HEADERS = ["reference's top-5", "engine's top-5"]


class TopLogitsView(QWidget):
    """Where the selected engine's greedy output parts from the reference, and both engines'
    five most likely next tokens on the common prefix."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = QLabel("Select an engine to see the top-5 logits where it diverges from the reference.")
        self.title.setWordWrap(True)
        self.title.setObjectName("muted")
        self.table = read_only_table(
            QTableWidget(0, 2), EMPTY_HEADERS, resize=QHeaderView.ResizeMode.Stretch, row_height=22
        )
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        layout.addWidget(self.title)
        layout.addWidget(self.table, 1)

    def show_for(self, row: QualityRow | None, divergence: Divergence | None) -> None:
        self.table.setRowCount(0)
        self.table.setHorizontalHeaderLabels(EMPTY_HEADERS)  # not the last divergence's engine names
        if row is None:
            self.title.setText("Select an engine to see the top-5 logits where it diverges from the reference.")
            return
        if row.backend == row.reference:
            self.title.setText(f"{row.backend} is the reference: the other engines are compared with it.")
            return
        if divergence is None:
            if row.agree_share is None and row.status != "ok":  # its runs failed: nothing to compare, greedy or not
                self.title.setText(f"{row.backend} did not finish ({row.status}): no tokens to compare.")
            elif row.agree_share is None:
                self.title.setText(
                    f"{row.backend}: no greedy token streams to compare (agreement is measured "
                    "for greedy decoding only)."
                )
            else:
                self.title.setText(
                    f"{row.backend} generated the same {row.agree_tokens} tokens as {row.reference}: no divergence."
                )
            return
        d = divergence
        self.title.setText(
            f"{d.backend} diverges from {d.reference} at generated token {d.position}: "
            f"{d.reference_token['text']!r} ({d.reference}) vs {d.token['text']!r} ({d.backend}). "
            "Top-5 logits on the common prefix:" + (f"  ({d.error})" if d.error else "")
        )
        self.table.setHorizontalHeaderLabels([d.reference, d.backend])
        rows = max(len(d.reference_top), len(d.top))
        self.table.setRowCount(rows)
        for column, top in enumerate((d.reference_top, d.top)):
            for index, entry in enumerate(top):
                item = QTableWidgetItem(
                    f"{entry['text']!r}   {entry['logit']:.3f}  (p {math.exp(entry['logprob']):.3f})"
                )
                item.setToolTip(f"token id {entry['token_id']}, log-prob {entry['logprob']:.4f}")
                self.table.setItem(index, column, item)
