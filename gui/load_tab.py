"""The Load tab: throughput against latency as concurrent requests grow (`bench --concurrency`), and
latency against offered request rate (`bench --request-rate`: open-loop levels of server engines).

Engines, model and generation settings come from the setup panel (`SetupPanel.config()`, as every
tab); the concurrency levels and the optional goodput SLOs are here. The Run button's own
`start_bench` runs a fair `BenchSession` with `config.concurrency` on this tab's job controller: every
engine's bench runs are level 1, then engines that serve concurrently (servers) run rounds of
N requests at once, then (with request rates set) their open-loop levels. The tables and the curves
come from `session_levels` over the result's records: the rows `bench` prints and load.csv holds.
"""

from __future__ import annotations

import math
from dataclasses import replace

from PySide6.QtCore import Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QFormLayout, QLabel, QLineEdit, QTableWidget, QTableWidgetItem, QWidget

from whistle_stop.backends import registry
from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.report import figures
from whistle_stop.backends.results.load import (
    LOAD_HEADERS,
    RATE_HEADERS,
    LoadLevel,
    load_notes,
    load_rows,
    rate_notes,
    rate_rows,
    session_levels,
)
from whistle_stop.backends.runs.arrivals import SWEEP_FACTORS, RateSpec, parse_request_rate
from whistle_stop.backends.runs.bench import BenchConfig, BenchResult, RunRecorded
from whistle_stop.backends.runs.config import MAX_CONCURRENCY
from whistle_stop.backends.runs.events import LoadRecorded
from whistle_stop.backends.worker.events import (
    BackendEvent,
    Failed,
    LoadProgress,
    LoadRequest,
    Ready,
    RunRequest,
    WorkerLost,
)

from .bench_job import BenchPrepared, start_bench
from .figure_export import FigureExport
from .figure_view import FigureGrid
from .job_controls import JobControls, JobWording
from .job_handlers import EventRoutes, JobHandlers
from .job_manager import JobKind, JobManager
from .settings import Store
from .setup_panel import SetupPanel
from .theme import Theme, engine_colours
from .widgets import controls_column, read_only_table, results_and_note, stacked, three_panes

WORDING = JobWording(
    "load run",
    " Run load",
    "Load run",
    "cancelling: each engine stops after its current token…",
    could_not_run="The load run could not run",
    cancelled="Load run cancelled",
)
INTRO = (
    "Aggregate tokens/s and latency as requests grow, with the setup's engines and settings in fair mode: "
    "level 1 from every engine's bench runs, higher levels from server engines."
)
DEFAULT_LEVELS = "1,2,4,8"
NO_SERVER = (
    "No selected engine served concurrently: local engines give only the concurrency-1 reference "
    f"(levels above 1 need a server engine: {', '.join(registry.serving_concurrently())})."
)


def parse_levels(text: str) -> tuple[tuple[int, ...], str]:
    """("1, 2,4") -> ((1, 2, 4), "") or ((), one line saying what is wrong)."""
    parts = [p.strip() for p in text.replace(";", ",").split(",") if p.strip()]
    if not parts:
        return (), "give at least one concurrency level"
    values = []
    for part in parts:
        if not (part.isascii() and part.isdigit()):  # isdigit alone passes "²", which int() refuses
            return (), f"levels: {part!r} is not a whole number"
        if not 1 <= int(part) <= MAX_CONCURRENCY:
            return (), f"levels must be from 1 to {MAX_CONCURRENCY}, not {int(part)}"
        values.append(int(part))
    return tuple(sorted(set(values))), ""


def parse_rates(text: str, burstiness: str, requests: str) -> tuple[RateSpec, str]:
    """The request-rate fields as `bench --request-rate` takes them ("" rates: no open-loop levels),
    or (RateSpec(), one line saying what is wrong)."""
    try:
        spec = parse_request_rate(text) if text.strip() else RateSpec()
        return replace(spec, burstiness=float(burstiness), requests=int(requests)).validate(), ""
    except UsageError as exc:  # (a ValueError too: first)
        return RateSpec(), str(exc)
    except ValueError:
        return RateSpec(), f"burstiness and requests per rate must be numbers, not {burstiness!r}, {requests!r}"


def parse_slo(text: str, label: str) -> tuple[float | None, str]:
    """An optional SLO in ms: "" is not set; otherwise a number > 0."""
    text = text.strip()
    if not text:
        return None, ""
    try:
        value = float(text)
    except ValueError:
        return None, f"{label}: {text!r} is not a number"
    if not (math.isfinite(value) and value > 0):
        return None, f"{label} must be a number of ms > 0, not {text}"
    return value, ""


class LoadTab(QWidget):
    message = Signal(str)  # a status-bar line
    error = Signal(str, str)  # title, message: the window shows it
    finished = Signal(object)  # the BenchResult (cancelled ones too)

    def __init__(self, setup: SetupPanel, jobs: JobManager, store: Store, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setup, self.jobs, self.store = setup, jobs, store
        self.result: BenchResult | None = None
        self.levels: list[LoadLevel] = []
        self.colours: dict[str, QColor] = {}
        self._config: BenchConfig | None = None
        self._servers: set[str] = set()  # engines whose worker said it serves concurrently
        self._rounds: dict[str, LoadRequest] = {}  # per engine: its load round in flight
        self._recorded = 0  # runs and rounds recorded, warm-ups included
        self._build()
        self.job.controller.attach(
            JobHandlers(
                events=EventRoutes(
                    {
                        (RunRecorded, LoadRecorded): self._recorded_one,
                        Ready: self._loaded,
                        RunRequest: self._level_one_run,
                        LoadRequest: self._round_sent,
                        LoadProgress: self._round_progress,
                        (Failed, WorkerLost): self._engine_failed,
                    },
                    after=self._show_progress,
                ),
                ready=self._on_prepared,
                result=self._on_finished,
                failed=self.job.show_failure,
                cancelled=self.job.show_cancelled,
            )
        )
        setup.changed.connect(self.refresh)
        self.refresh()

    def _build(self) -> None:
        self.concurrency = QLineEdit(DEFAULT_LEVELS)
        self.concurrency.setToolTip(
            "requests sent at once, separated by commas; level 1 is every engine's "
            "bench runs (always run); levels above 1 need a server engine "
            f"(at most {MAX_CONCURRENCY})"
        )
        self.slo_ttft = QLineEdit()
        self.slo_itl = QLineEdit()
        for edit, what in (
            (self.slo_ttft, "a request's time to first token"),
            (self.slo_itl, "a request's mean inter-token latency (TPOT)"),
        ):
            edit.setPlaceholderText("not set")
            edit.setToolTip(f"goodput SLO: {what} at most this many ms; empty: not set")
        self.rates = QLineEdit()
        self.rates.setPlaceholderText("none")
        self.rates.setToolTip(
            "open-loop levels for server engines: requests/s separated by commas (inf: all at once), or sweep "
            "(multiples of the engine's batch-1 rate up to the first it cannot keep up with); empty: none"
        )
        self.burstiness = QLineEdit("1")
        self.burstiness.setToolTip("arrivals' gamma shape, as vLLM's bench serve: 1 Poisson, below 1 burstier")
        self.rate_requests = QLineEdit("20")
        self.rate_requests.setToolTip("requests sent at each rate")
        self.rate_inputs = (self.rates, self.burstiness, self.rate_requests)
        for edit in (self.concurrency, self.slo_ttft, self.slo_itl, *self.rate_inputs):
            edit.textChanged.connect(self.refresh)
        self.job = JobControls(
            self.jobs,
            JobKind.LOAD,
            WORDING,
            INTRO,
            (self.concurrency, self.slo_ttft, self.slo_itl, *self.rate_inputs),
            self.refresh,
            self.message.emit,
            self.error.emit,
            "%v / %m runs and rounds",
        )
        self.run_button, self.reason = self.job.run_button, self.job.reason
        self.progress, self.status = self.job.progress, self.job.status
        self.run_button.clicked.connect(self.start)
        self.chart = FigureGrid(2)  # the load curve, the rate curve
        self.figure_export = FigureExport(self.chart, self.store, self.message.emit, self.error.emit)
        form = QFormLayout()
        form.addRow("Levels", self.concurrency)
        form.addRow("SLO TTFT ms", self.slo_ttft)
        form.addRow("SLO ITL ms", self.slo_itl)
        form.addRow("Request rates", self.rates)
        form.addRow("Burstiness", self.burstiness)
        form.addRow("Requests per rate", self.rate_requests)
        controls = controls_column(
            form,
            self.run_button,
            self.job.cancel_button,
            status=(self.reason, self.progress, self.status, self.figure_export.button),
        )

        self.notice = QLabel(NO_SERVER)
        self.notice.setObjectName("notice")
        self.notice.setWordWrap(True)
        self.notice.setVisible(False)
        self.table = read_only_table(QTableWidget(0, len(LOAD_HEADERS)), LOAD_HEADERS)
        self.rate_table = read_only_table(QTableWidget(0, len(RATE_HEADERS)), RATE_HEADERS)
        self.saturation = QLabel()  # a server that falls behind, said plainly above its table
        self.saturation.setObjectName("notice")
        self.saturation.setWordWrap(True)
        self.saturation.setVisible(False)
        self.note = QLabel()
        self.note.setObjectName("muted")
        self.note.setWordWrap(True)
        middle = stacked(
            self.notice,
            self.saturation,
            results_and_note(self.table, self.rate_table, note=self.note, sizes=(180, 140, 80)),
        )
        three_panes(self, (controls, middle, self.chart), stretch=1, sizes=(280, 720, 520))

    # --- inputs -------------------------------------------------------------------------------
    def inputs(self) -> tuple[tuple[int, ...], float | None, float | None, str]:
        """(levels, SLO TTFT ms, SLO ITL ms, why they cannot run or "")."""
        levels, why = parse_levels(self.concurrency.text())
        ttft, why_ttft = parse_slo(self.slo_ttft.text(), "SLO TTFT")
        itl, why_itl = parse_slo(self.slo_itl.text(), "SLO ITL")
        _, why_rate = self.rate_spec()
        return levels, ttft, itl, why or why_ttft or why_itl or why_rate

    def rate_spec(self) -> tuple[RateSpec, str]:
        return parse_rates(self.rates.text(), self.burstiness.text(), self.rate_requests.text())

    def problem(self) -> str:
        """Why Run load cannot start now, or ""."""
        return self.job.blocker() or self.inputs()[3] or self.setup.problem()

    def refresh(self) -> None:
        self.job.show_problem(self.problem())

    # --- running ------------------------------------------------------------------------------
    def start(self) -> bool:
        """Start the load run; False (and the reason shown) if it cannot."""
        self.setup.flush()
        if self.job.refuse(self.problem()):
            return False
        levels, ttft, itl, _ = self.inputs()
        # The setup's config, as Run builds it; fair whatever the setup says (load levels need it),
        # and no harness calibration (this tab does not show it).
        config = replace(
            self.setup.config(),
            mode="fair",
            concurrency=levels,
            slo_ttft_ms=ttft,
            slo_itl_ms=itl,
            rate=self.rate_spec()[0],
            calibrate_harness=False,
        )
        try:
            start_bench(self.job.controller, config)
        except UsageError as exc:
            self.error.emit("Cannot run the load levels", str(exc))
            return False
        self.result, self.levels, self._config = None, [], config
        self._servers, self._rounds, self._recorded = set(), {}, 0
        self.colours = engine_colours(list(config.backends))
        self.table.setRowCount(0)
        self.rate_table.setRowCount(0)
        self.chart.clear_figures()
        self.notice.setVisible(False)
        self.saturation.setVisible(False)
        self.note.clear()
        self.progress.setRange(0, 0)
        self.status.setText(f"resolving the model {config.model}…")
        self.message.emit("load run…")
        return True

    # --- events (GUI thread) --------------------------------------------------------------------
    def _on_prepared(self, prepared: BenchPrepared) -> None:
        levels = ", ".join(str(c) for c in self._config.concurrency if c > 1) if self._config else ""
        self.status.setText(
            f"{prepared.model.label}: {len(prepared.prompt_ids)}-token prompt; every engine's bench "
            f"runs first (level 1)"
            + (f", then levels {levels} for server engines" if levels else "")
            + (", then the request rates (open loop)" if self._config and self._config.rate.set else "")
        )

    def _recorded_one(self, _event: RunRecorded | LoadRecorded) -> None:
        self._recorded += 1

    def _loaded(self, event: BackendEvent) -> None:
        if event.event.serves_concurrently:
            self._servers.add(event.backend)

    def _level_one_run(self, event: BackendEvent) -> None:
        self.status.setText(f"{event.backend}: level 1, run {event.event.run_id}…")

    def _round_sent(self, event: BackendEvent) -> None:
        round_ = self._rounds[event.backend] = event.event
        level = "open loop" if round_.arrivals_ms else f"c={round_.concurrency}"
        self.status.setText(f"{event.backend}: {level}, round {round_.run_id}: sending {round_.concurrency} requests…")

    def _round_progress(self, event: BackendEvent) -> None:
        payload, round_ = event.event, self._rounds.get(event.backend)
        if round_ is not None:  # the live count, from the worker's own tally
            level = "open loop" if round_.arrivals_ms else f"c={round_.concurrency}"
            self.status.setText(
                f"{event.backend}: {level}, round {payload.run_id}: {payload.tokens}/"
                f"{round_.concurrency * round_.new_tokens} tokens, {payload.streams_done}/"
                f"{round_.concurrency} requests done"
            )

    def _engine_failed(self, event: BackendEvent) -> None:
        self.status.setText(f"{event.backend}: failed")

    def _show_progress(self) -> None:
        """Runs and rounds to come: every engine's bench runs, then each server's rounds per level above 1."""
        config = self._config
        if config is None:
            return
        per_level = config.warmup + config.repeats
        total = per_level * (len(config.backends) + len(self._servers) * sum(c > 1 for c in config.concurrency))
        if config.rate.set:  # one round per rate after one warm-up request; a sweep's ladder may stop early
            rates = len(config.rate.rates) or len(SWEEP_FACTORS)
            total += len(self._servers) * (rates + (1 if config.warmup else 0))
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(min(self._recorded, total))

    def _on_finished(self, result: BenchResult) -> None:
        self.result = result
        done = max(1, self._recorded)  # what ran (a cancel or a failed engine ends it early)
        self.progress.setRange(0, done)
        self.progress.setValue(done)
        self.show_results()
        why: dict[str, str] = {}  # each failed engine's first error: without it a dead server is a mystery
        for record in [*result.runs, *result.load]:
            if record.status.is_failure:
                why.setdefault(record.backend, (record.error or str(record.status)).splitlines()[0])
        text = "Load run cancelled" if result.cancelled else "Load run finished"
        if why:
            text += f"; failed: {', '.join(sorted(why))}"
        self.status.setText("\n".join([text, *(f"{name}: {error}" for name, error in sorted(why.items()))]))
        self.message.emit(text)
        self.finished.emit(result)

    # --- results ------------------------------------------------------------------------------
    def show_results(self) -> None:
        """The levels of the result's records (as load.csv), as a table and a curve per engine."""
        result = self.result
        if result is None:
            return
        config = result.config
        self.levels = session_levels(result.runs, result.tokens, result.load, config.slo)
        for table, rows in ((self.table, load_rows(self.levels)), (self.rate_table, rate_rows(self.levels))):
            table.setRowCount(len(rows))
            for r, row in enumerate(rows):
                for c, cell in enumerate(row):
                    table.setItem(r, c, QTableWidgetItem(cell))
        self.rate_table.setVisible(bool(self.rate_table.rowCount()))
        self.chart.show_figures([figures.load_curve(self.levels), figures.rate_curve(self.levels)], self.colours)
        rate_lines = rate_notes(self.levels)
        saturated = [line for line in rate_lines if line.startswith("SATURATED")]
        self.saturation.setText("\n".join(saturated))
        self.saturation.setVisible(bool(saturated))
        self.note.setText("\n".join(load_notes(self.levels, config.slo) + rate_lines[:1]))
        wanted = any(c > 1 for c in config.concurrency)
        self.notice.setVisible(wanted and not result.load and not self._servers)

    # --- preferences and theme ------------------------------------------------------------------
    def prefs(self) -> dict:
        return {
            "levels": self.concurrency.text(),
            "slo_ttft_ms": self.slo_ttft.text(),
            "slo_itl_ms": self.slo_itl.text(),
            "request_rates": self.rates.text(),
            "burstiness": self.burstiness.text(),
            "rate_requests": self.rate_requests.text(),
        }

    def set_prefs(self, prefs: object) -> None:
        if not isinstance(prefs, dict):
            return
        if isinstance(prefs.get("levels"), str) and prefs["levels"].strip():
            self.concurrency.setText(prefs["levels"])
        for key, edit in (
            ("slo_ttft_ms", self.slo_ttft),
            ("slo_itl_ms", self.slo_itl),
            ("request_rates", self.rates),
            ("burstiness", self.burstiness),
            ("rate_requests", self.rate_requests),
        ):
            if isinstance(prefs.get(key), str):
                edit.setText(prefs[key])

    def apply_theme(self, theme: Theme) -> None:
        self.chart.apply_theme(theme)
        if self.result is not None:
            self.show_results()
