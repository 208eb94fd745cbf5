"""The summary tab: bars per engine for load, TTFT, ms/token, tok/s and peak memory (the median
of the measured runs), with whiskers for the median's interval across repeats (order statistics,
the interval the table shows), over the same table and notes `bench` prints (summary_rows)."""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSizeF, Qt
from PySide6.QtGui import QColor, QTextOption
from PySide6.QtWidgets import QLabel, QSplitter, QTableWidget, QTableWidgetItem, QTextBrowser, QVBoxLayout, QWidget

from whistle_stop.backends.report.verdict_html import verdict_html
from whistle_stop.backends.results.stats import Summary
from whistle_stop.backends.results.summary import (
    SUMMARY_HEADERS,
    BackendSummary,
    harness_note,
    interval_note,
    sampling_notes,
    speculation_notes,
    summary_rows,
)
from whistle_stop.backends.results.verdict import Verdict

from .png_export import EXPORT_SCALE, laid_out, write_png
from .theme import Theme, current_theme
from .widgets import read_only_table

Metric = Callable[[BackendSummary], "Summary | float | None"]
METRICS: list[tuple[str, Metric, int]] = [  # title, value, decimals
    # cold start and one-time build apart: neither hides the other (a first export is not a slow start)
    ("cold start (s)", lambda s: s.cold_start_s, 2),
    ("build (s)", lambda s: s.build_s, 2),
    ("TTFT (ms)", lambda s: s.ttft_ms, 1),
    ("ms / token", lambda s: s.ms_per_token, 2),
    ("decode tok/s", lambda s: s.decode_tok_s, 0),
    ("peak RSS (MB)", lambda s: s.peak_rss_mb, 0),
]


def _spread(value: Summary | float | None) -> tuple[float, float, float]:
    """(median, low, high): a Summary's median and the median's interval; a single number has no whiskers."""
    if isinstance(value, Summary):
        if value.n == 0:
            return math.nan, math.nan, math.nan
        if value.n < 2 or math.isnan(value.median_ci_low):
            return value.median, value.median, value.median
        return value.median, value.median_ci_low, value.median_ci_high
    number = math.nan if value is None else float(value)
    return number, number, number


_BARS_NOTE = (
    "Bars: TTFT, ms/token and tok/s: the median of the measured runs (warm-ups excluded), whiskers: the "
    "table's interval of the median across repeats (order statistics), at the confidence level the table's "
    "note gives; cold start and build: the engine's one figure; peak RSS: the highest of its runs."
)


def legend_html(names: list[str], colours: dict[str, QColor]) -> str:
    """The engines in their colours, one line above the bars: names under narrow bars would overlap."""
    return "&nbsp;&nbsp; ".join(
        f"<span style='color:{colours[n].name() if n in colours else '#888'}'>&#9632;</span>&nbsp;{html.escape(n)}"
        for n in names
    )


class SummaryBars(pg.GraphicsLayoutWidget):
    def __init__(self) -> None:
        super().__init__()
        self.plots = [self.addPlot(row=0, col=i) for i in range(len(METRICS))]
        self._labels: list[list[pg.TextItem]] = [[] for _ in METRICS]  # each plot's value labels
        self._tops: list[float] = [0.0 for _ in METRICS]  # each plot's highest bar or whisker
        self.legend_text = ""  # the engines in their colours (legend_html): the window shows it above the chart
        self._exporting = False
        for index, (plot, (title, _, _)) in enumerate(zip(self.plots, METRICS)):
            plot.getViewBox().sigResized.connect(lambda _box, index=index: self._fit(index))
            plot.setTitle(title)
            plot.getAxis("bottom").setStyle(showValues=False)  # the engines are named in the legend above
            plot.setMouseEnabled(x=False, y=False)
            plot.hideButtons()
            plot.showGrid(y=True, alpha=0.15)
        self.apply_theme(current_theme())

    def apply_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.setBackground(theme.plot_bg)
        for plot, (title, _, _) in zip(self.plots, METRICS):
            plot.setTitle(title, color=theme.plot_fg)
            for side in ("bottom", "left"):
                plot.getAxis(side).setPen(theme.plot_fg)
                plot.getAxis(side).setTextPen(theme.plot_fg)

    def set_summaries(self, summaries: list[BackendSummary], colours: dict[str, QColor]) -> None:
        names = [s.backend for s in summaries]
        self.legend_text = legend_html(names, colours)
        x = np.arange(len(names), dtype=float)
        for index, (plot, (_, metric, digits)) in enumerate(zip(self.plots, METRICS)):
            plot.clear()
            plot.getAxis("bottom").setTicks([list(enumerate(names))])
            self._labels[index], self._tops[index] = [], 0.0
            if not names:
                continue
            mid, low, high = (np.array(v, dtype=float) for v in zip(*(_spread(metric(s)) for s in summaries)))
            shown = np.nan_to_num(mid)
            brushes = [pg.mkBrush(colours.get(n, QColor("#888"))) for n in names]
            plot.addItem(pg.BarGraphItem(x=x, height=shown, width=0.6, brushes=brushes, pen=pg.mkPen(None)))
            spread = ~np.isnan(low) & (high > low)
            if spread.any():
                plot.addItem(
                    pg.ErrorBarItem(
                        x=x[spread],
                        y=mid[spread],
                        top=(high - mid)[spread],
                        bottom=(mid - low)[spread],
                        beam=0.18,
                        pen=pg.mkPen(self.theme.plot_fg, width=1.2),
                    )
                )
            top = np.nanmax(np.where(np.isnan(high), shown, high)) if shown.size else 1.0
            for xi, value, whisker in zip(x, mid, high):
                label = pg.TextItem(
                    "-" if math.isnan(value) else f"{value:.{digits}f}", color=self.theme.plot_fg, anchor=(0.5, 1.0)
                )
                label.setPos(xi, 0 if math.isnan(value) else max(value, 0 if math.isnan(whisker) else whisker))
                plot.addItem(label)  # above the whisker, so the two never overlap
                self._labels[index].append(label)
            self._tops[index] = float(top)
            plot.setXRange(-0.6, len(names) - 0.4, padding=0)
            self._fit(index)

    def _fit(self, index: int) -> None:
        """Room above the highest whisker for its label, and no two labels overlapping. A label keeps
        its size in pixels however small the plot, so a fixed share of the range clipped it at the top
        of a short plot, and narrow bars ran the labels into each other: these are hidden then (the
        table below gives every value)."""
        plot, labels, top = self.plots[index], self._labels[index], self._tops[index]
        box = plot.getViewBox()
        height, width = box.height(), box.width()
        label_h = max((label.textItem.boundingRect().height() for label in labels), default=0.0)
        # the text's own width: its item has a blank margin each side, which may overlap the next
        label_w = max((_text_width(label) for label in labels), default=0.0)
        if top <= 0:
            plot.setYRange(0, 1.0, padding=0)  # all zero (no build): a plain 0..1 axis
        else:
            room = height / (height - label_h) if height > 2 * label_h else 1.22  # not laid out yet: a guess
            plot.setYRange(0, top * room, padding=0)
        # the plots' titles and axes need this much (their ticks' width settles once drawn): a narrower
        # view cut the last plot off, so the splitter gives the verdict beside it less instead. Not while
        # exported: the layout then holds the PNG's engines line, and a wider minimum resized the window's view
        if not self._exporting:
            self.setMinimumWidth(math.ceil(self.ci.layout.minimumWidth()))
        slot = width / (len(labels) + 0.2) if labels else 0.0  # the x range is -0.6 .. n - 0.4
        for label in labels:
            label.setVisible(width == 0 or label_w <= slot)

    EXPORT_SIZE = QSizeF(1150, 420)  # the plots' row in a PNG (1610 pixels wide by default)

    def export_png(self, path: Path, width: int | None = None) -> None:
        """The bars with their engines named under them: the window names them in a label above the chart,
        which is no part of it (the bars' axis has no names: under narrow bars they overlap)."""
        legend = self._export_legend()
        minimum = self.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).width()
        size = QSizeF(max(self.EXPORT_SIZE.width(), minimum), self.EXPORT_SIZE.height() + legend.minimumHeight())
        # the line only while laid out at the export's size: it is as wide as that, and the chart on
        # screen may be narrower
        with laid_out(self.ci, size):
            self._exporting = True
            try:
                self.ci.addItem(legend, row=1, col=0, colspan=len(self.plots))
                write_png(self.ci, path, width or round(EXPORT_SCALE * size.width()))
            finally:
                self._exporting = False
                self.ci.removeItem(legend)

    def _export_legend(self) -> pg.LabelItem:
        """The window's legend line, wrapped to the export's width (a dozen engines are wider)."""
        legend = pg.LabelItem(color=self.theme.plot_fg)
        legend.item.setTextWidth(self.EXPORT_SIZE.width() - 40)
        legend.item.document().setDefaultTextOption(QTextOption(Qt.AlignmentFlag.AlignHCenter))
        legend.setText(self.legend_text)
        return legend


def _text_width(label: pg.TextItem) -> float:
    item = label.textItem
    return item.boundingRect().width() - 2 * item.document().documentMargin()


class VerdictPanel(QTextBrowser):
    """The verdict `bench` prints, as the report renders it (backends/report/verdict_html.py)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)
        self.setMinimumWidth(320)
        self.verdict: Verdict | None = None
        self.notes: list[str] = []
        self.apply_theme(current_theme())
        self.setPlaceholderText(
            "The verdict appears here once a run has finished: which engine to use, what its "
            "speed costs, and what limits what the numbers say."
        )

    def set_verdict(self, result: Verdict | None, notes: list[str] | None = None) -> None:
        """`notes`: lines bench prints under the verdict (--repeats auto's rounds and widths)."""
        self.verdict, self.notes = result, list(notes or [])
        extra = "".join(f"<br>{html.escape(line)}" for line in self.notes).replace("<br>  ", "<br>&nbsp;&nbsp;")
        self.setHtml("" if result is None else verdict_html(result) + (f"<p>{extra[4:]}</p>" if extra else ""))

    def apply_theme(self, theme: Theme) -> None:
        self.document().setDefaultStyleSheet(
            f".warn-list {{ color: {theme.error}; }} .caveats {{ font-weight: bold; }} "
            "ul { margin-left: 0px; -qt-list-indent: 1; }"
        )
        if self.verdict is not None:
            self.set_verdict(self.verdict, self.notes)


class SummaryView(QWidget):
    """The verdict beside the bars, bench's summary table below them."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        beside = QSplitter(Qt.Orientation.Horizontal)
        self.verdict = VerdictPanel()
        splitter = QSplitter(Qt.Orientation.Vertical)
        self.bars = SummaryBars()
        self.legend = QLabel()
        self.legend.setWordWrap(True)
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        top = QWidget()
        top_layout = QVBoxLayout(top)
        top_layout.setContentsMargins(6, 4, 0, 0)
        top_layout.addWidget(self.legend)
        top_layout.addWidget(self.bars, 1)
        self.table = read_only_table(QTableWidget(0, len(SUMMARY_HEADERS)), SUMMARY_HEADERS)
        self.note = QLabel(_BARS_NOTE)
        self.note.setWordWrap(True)
        self.note.setObjectName("muted")
        splitter.addWidget(top)
        splitter.addWidget(self.table)
        splitter.setSizes([230, 130])
        self.table.verticalHeader().setDefaultSectionSize(24)
        beside.addWidget(self.verdict)
        beside.addWidget(splitter)
        beside.setStretchFactor(0, 2)
        beside.setStretchFactor(1, 3)
        beside.setSizes([560, 840])
        layout.addWidget(beside, 1)
        layout.addWidget(self.note)

    def set_summaries(
        self,
        summaries: list[BackendSummary],
        colours: dict[str, QColor],
        reference: str | None,
        contended: bool,
        harness: dict | None = None,
    ) -> None:
        """`harness`: environment.json's "harness" (the null engine's cost per token), shown as bench prints it."""
        self.bars.set_summaries(summaries, colours)
        self.legend.setText(self.bars.legend_text)
        rows = summary_rows(summaries, reference)
        self.table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, cell in enumerate(row):
                item = QTableWidgetItem(cell)
                name = summaries[r].backend
                if c == 0 and name in colours:
                    item.setForeground(colours[name])
                tips = (sampling_notes([summaries[r]]) if not summaries[r].comparable else []) + speculation_notes(
                    [summaries[r]]
                )
                if c == 0 and tips:
                    item.setToolTip("\n".join(tips))
                left = SUMMARY_HEADERS[c] in ("backend", "weights", "dtype", "agree", "status")
                item.setTextAlignment(
                    (Qt.AlignmentFlag.AlignLeft if left else Qt.AlignmentFlag.AlignRight)
                    | Qt.AlignmentFlag.AlignVCenter
                )
                self.table.setItem(r, c, item)
        note = _BARS_NOTE + "  Table: " + interval_note(summaries) + "."
        for line in sampling_notes(summaries) + speculation_notes(summaries):
            note += "  " + line + "."
        if harness_note(harness):
            note += "  " + harness_note(harness) + "."
        if contended:
            note += "  Race mode: engines ran at the same time, so these timings are contended."
        self.note.setText(note)

    def apply_theme(self, theme: Theme) -> None:
        self.bars.apply_theme(theme)
        self.verdict.apply_theme(theme)
