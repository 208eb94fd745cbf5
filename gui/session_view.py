"""The session on screen: its records (`data`) and the panes, curves, runs table, summary and
histogram that show them.

The bench controller fills it while a run streams; opening a saved session and the replay show it
again. The summary and the histogram are redrawn only while their tab is shown (not in the middle
of a stream), or when a finished session is shown or exported.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QWidget

from whistle_stop.backends import registry
from whistle_stop.backends.results.records import RunRecord, TokenRecord
from whistle_stop.backends.runs.adaptive import describe as describe_adaptive

from .charts import HistogramChart, LatencyChart, RaceChart
from .live import LiveView
from .replay import Replayer
from .results_model import RunsTable
from .session_data import SessionData
from .streams_grid import StreamsGrid
from .summary_chart import SummaryView
from .theme import engine_colours


class SessionView:
    def __init__(
        self,
        grid: StreamsGrid,
        live: LiveView,
        latency: LatencyChart,
        race: RaceChart,
        histogram: HistogramChart,
        summary: SummaryView,
        table: RunsTable,
        shown_tab: Callable[[], QWidget | None],
        on_change: Callable[[], None],
    ) -> None:
        self.grid, self.live, self.table, self.summary = grid, live, table, summary
        self.latency, self.race, self.histogram = latency, race, histogram
        self._shown_tab = shown_tab  # the bottom dock's current tab
        self._on_change = on_change  # what can be done with the session changed (the window's actions)
        self.data = SessionData()
        self.colours: dict = {}
        self.replayable = False  # a finished fair session with measured runs
        self._results_dirty = False
        # quality.csv's rows of the same model, if the Quality tab has them (the verdict's perplexity change)
        self.quality_rows: Callable[[SessionData], list[dict] | None] = lambda _data: None

    def show_engines(self, names: list[str]) -> None:
        """A pane and a curve per engine, each in its colour."""
        colours = engine_colours(names)
        described = [(n, colours[n], _description(n)) for n in names]
        self.grid.set_engines(described)
        for chart in (self.latency, self.race, self.histogram):
            chart.set_engines(colours)
        self.colours = colours

    def set_live(self, length: int | None) -> None:
        """The live curves' x axis: `length` tokens while a run streams, None once it is drawn whole."""
        for chart in (self.latency, self.race):
            chart.set_live(length)

    # --- a run as it streams ---------------------------------------------------------------------
    def begin(self, data: SessionData) -> None:
        """A new run: nothing recorded yet, nothing to replay."""
        self.data = data
        self._mark_charts()
        self.replayable = False
        self.table.runs.set_records([])
        self.refresh_results()

    def add_run(self, record: RunRecord, tokens: list[TokenRecord]) -> None:
        self.data.runs.append(record)
        self.data.tokens.extend(tokens)
        self.table.runs.append(record)

    def runs_added(self) -> None:
        self._results_dirty = True  # redrawn when its tab is shown, not in the middle of a stream
        self.refresh_if_shown()

    # --- a finished or opened session --------------------------------------------------------------
    def show(self, data: SessionData) -> None:
        """Draw a whole session from its records and work out once what can be done with it."""
        self.data = data
        self._mark_charts()
        self.table.runs.set_records(data.runs)
        self.set_live(None)
        self.live.show_records(data.runs, data.tokens)
        self.refresh_results()
        self.replayable = data.finished and data.mode == "fair" and bool(Replayer.lanes_for(data.runs, data.tokens))
        self._on_change()

    def redraw(self) -> None:
        """The panes and curves from the session's records again (a replay drew them token by token)."""
        self.set_live(None)
        self.live.show_records(self.data.runs, self.data.tokens)

    def _mark_charts(self) -> None:
        mark = "race mode: contended timings" if self.data.mode == "race" else ""
        for chart in (self.latency, self.race, self.histogram):
            chart.set_mark(mark)

    # --- the summary and the histogram -------------------------------------------------------------
    def refresh_if_shown(self) -> None:
        if self._results_dirty and self._shown_tab() in (self.summary, self.histogram):
            self.refresh_results()

    def refresh_if_stale(self) -> None:
        if self._results_dirty:
            self.refresh_results()

    def refresh_results(self) -> None:
        self._results_dirty = False
        self.summary.set_summaries(
            self.data.summaries(),
            self.colours,
            self.data.reference or None,
            self.data.concurrent,
            self.data.environment.get("harness"),
        )
        adaptive = describe_adaptive(self.data.environment["adaptive_repeats"]) if self.data.adaptive else []
        verdict = self.data.verdict(self.quality_rows(self.data)) if self.data.runs else None
        self.summary.verdict.set_verdict(verdict, adaptive)
        self.histogram.set_data(self.data.measured_itl())


def _description(name: str) -> str:
    """An engine's line under its pane; a saved session may name one this install does not have."""
    spec = registry.ENGINES.get(name)
    return spec.description if spec is not None else "not an engine of this install (from the saved session)"
