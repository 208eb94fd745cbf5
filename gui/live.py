"""Turns session events (or replayed records) into pane text, status lines and curves.

Tokens are buffered per engine while a batch is read and drawn once at its end: one text
insert, one status line and one `setData` per engine per tick. The numbers come from
`stats.run_metrics` on the token timestamps while a run streams, and from the RunRecord and
its TokenRecords once it is recorded, the same records `bench` writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from whistle_stop.backends.results.records import RunRecord, TokenRecord, runs_of
from whistle_stop.backends.results.stats import decode_rate, finite, first_step_tokens, run_metrics
from whistle_stop.backends.results.summary import is_measured
from whistle_stop.backends.runs.bench import RunRecorded, SessionStarted
from whistle_stop.backends.sources.prompts import prompt_text
from whistle_stop.backends.worker.events import (
    BackendEvent,
    Failed,
    Progress,
    Ready,
    RunContext,
    RunDone,
    RunRequest,
    RunStarted,
    Started,
    Token,
    WorkerLost,
)

from .buffers import GrowBuffer
from .charts import LatencyChart, RaceChart
from .streams_grid import StreamsGrid

SEPARATOR = "  ·  "


def status_line(
    ttft_ms: float | None,
    ms_per_token: float | None,
    tok_s: float | None,
    tokens: int,
    total: int,
    run: str = "",
) -> str:
    """A pane's figures. `run`: which run they are of ("run 3 of 5"), for a finished one: it leads the
    line, and the token count goes unless the run fell short (its bar shows it), so the line is no wider."""
    parts = [run] if run else []
    parts.append(f"TTFT {ttft_ms:.1f} ms" if ttft_ms is not None else "TTFT -")
    if ms_per_token is not None and ms_per_token == ms_per_token:
        parts.append(f"{ms_per_token:.2f} ms/token")
    if tok_s is not None and tok_s == tok_s:
        parts.append(f"{tok_s:.0f} tok/s")
    if not run or tokens < total:
        parts.append(f"{tokens}/{total} tokens")
    return SEPARATOR.join(parts)


def record_status(record: RunRecord, repeats: int | None = None) -> str:
    """A run's figures; with `repeats`, led by which run they are (a pane shows one run, whose
    figures are not the engine's medians)."""
    run = run_label(record.repeat, record.is_warmup, repeats) if repeats is not None else ""
    return status_line(
        record.ttft_ms, record.ms_per_token, record.decode_tok_s, record.tokens_generated, record.new_tokens, run
    )


def repeats_like(records: list[RunRecord], shown: RunRecord) -> int:
    """How many runs of `shown`'s kind (measured or warm-up) its engine made: its pane's "of N"."""
    return max(r.repeat for r in records if r.is_warmup == shown.is_warmup)


def run_label(repeat: int, is_warmup: bool, repeats: int) -> str:
    return f"warm-up {repeat}" if is_warmup else f"run {repeat} of {repeats}"


@dataclass
class Trace:
    """One engine's run as it streams: token ids, timestamps (monotonic ns) and text deltas."""

    run_id: str
    start_ns: int
    total: int
    # what its record says its engine's first step made (a replay); else its tokens' steps tell
    recorded_first_step: int | None = None
    steps: list[int | None] = field(default_factory=list)  # each token's engine step (Token.step)
    ids: GrowBuffer = field(default_factory=lambda: GrowBuffer(np.int64))
    stamps: GrowBuffer = field(default_factory=lambda: GrowBuffer(np.int64))
    texts: list[str] = field(default_factory=list)

    def latency_ms(self) -> np.ndarray:
        """Token 0: time to first token; then the gap to the previous token (TokenRecord's t_ms/itl_ms)."""
        stamps = self.stamps.view()
        out = np.empty(stamps.size, dtype=np.float64)
        if stamps.size:
            out[0] = (stamps[0] - self.start_ns) / 1e6
            out[1:] = np.diff(stamps) / 1e6
        return out

    @property
    def steps_make_several(self) -> bool:
        """Whether its tokens' steps show a step making several (a server's event, a speculative pass)."""
        return first_step_tokens(self.steps) is not None

    @property
    def first_step_tokens(self) -> int:
        """Tokens its engine's first step made (a speculative first pass can make several: they come
        in the TTFT, and ms/token counts those after it, as the record does)."""
        return self.recorded_first_step or first_step_tokens(self.steps) or 1

    def seconds(self) -> np.ndarray:
        return (self.stamps.view() - self.start_ns) / 1e9


def first_difference(reference: np.ndarray, mine: np.ndarray) -> int | None:
    """Index of the first token that differs where both have one (None: they agree so far)."""
    n = min(reference.size, mine.size)
    differs = np.flatnonzero(reference[:n] != mine[:n])
    return int(differs[0]) if differs.size else None


class LiveView:
    def __init__(self, grid: StreamsGrid, latency: LatencyChart, race: RaceChart) -> None:
        self.grid, self.latency, self.race = grid, latency, race
        self.traces: dict[str, Trace] = {}
        self.reference = ""
        self.greedy = True
        self.repeats = 1
        self.prompt = ""
        self._pending: dict[str, tuple[list[int], list[int], list[str]]] = {}
        self._labels: dict[str, str] = {}  # from RunRequest, shown when its run starts
        self._totals: dict[str, int] = {}
        self._failed: set[str] = set()
        self._multi_token: dict[str, bool] = {}  # from Ready: tokens come several per step (ms/token is TPOT)
        # Fair mode: measured runs are drawn when they end (the job runner keeps the window still
        # while they are timed); their panes say so meanwhile.
        self.quiet_measured = False

    def begin(self, prompt: str, reference: str, greedy: bool, repeats: int) -> None:
        self.traces.clear()
        self._pending.clear()
        self._labels.clear()
        self._totals.clear()
        self._failed.clear()
        self._multi_token.clear()
        self.prompt, self.reference, self.greedy, self.repeats = prompt, reference, greedy, repeats
        for pane in self.grid.panes.values():
            pane.reset(prompt)
            pane.set_tag("waiting")
            pane.set_status("waiting for its turn")

    # --- streaming ----------------------------------------------------------------------------
    def apply(self, batch: list) -> None:
        for event in batch:
            if isinstance(event, BackendEvent):
                self._backend_event(event)
            elif isinstance(event, RunRecorded):
                self._flush_one(event.record.backend)
                self._recorded(event.record, event.tokens)
            elif isinstance(event, SessionStarted):
                self.prompt = prompt_text(event.prompt_ids)
        self.flush()

    def _backend_event(self, wrapped: BackendEvent) -> None:
        name, event = wrapped.backend, wrapped.event
        pane = self.grid.panes.get(name)
        if pane is None:
            return
        if isinstance(event, Token):
            trace = self.traces.get(name)
            if trace is not None and trace.run_id == event.run_id:
                trace.steps.append(event.step)
                ids, stamps, texts = self._pending.setdefault(name, ([], [], []))
                ids.append(event.token_id)
                stamps.append(event.t_ns)
                texts.append(event.text)
        elif isinstance(event, RunStarted):
            self._flush_one(name)
            self.start_trace(name, event.run_id, event.t_ns, self._labels.get(name, ""))
        elif isinstance(event, RunRequest):
            context = wrapped.context or RunContext(1, False)
            self._labels[name] = run_label(context.repeat, context.is_warmup, self.repeats)
            self._totals[name] = event.new_tokens
            if self.quiet_measured and not context.is_warmup:
                pane.set_tag(self._labels[name])
                pane.set_status("timing this run · drawn when it ends (the window keeps still meanwhile)")
        elif isinstance(event, Started):
            pane.set_tag("starting")
            pane.set_status("worker started · importing the engine…")
            pane.set_progress(0, 0)
        elif isinstance(event, Progress):
            percent = f" {event.fraction * 100:.0f}%" if event.fraction is not None else ""
            pane.set_status(f"{event.message}{percent}")
            pane.set_progress(int((event.fraction or 0) * 100), 100 if event.fraction is not None else 0)
        elif isinstance(event, Ready):
            self._multi_token[name] = event.multi_token_steps
            pane.set_tag("loaded")
            pane.set_status(f"loaded · import {event.import_s:.2f} s · load {event.load_s:.2f} s · {event.dtype}")
            pane.set_progress(0, 1)
        elif isinstance(event, RunDone):
            self._flush_one(name)
            if event.cancelled:
                pane.set_tag("cancelled", "warn")
        elif isinstance(event, (Failed, WorkerLost)):
            self._flush_one(name)
            message = event.message if isinstance(event, Failed) else f"worker {event.reason}: {event.detail}"
            pane.show_error(message, event.traceback if isinstance(event, Failed) else event.detail)
            self._failed.add(name)

    def start_trace(
        self,
        name: str,
        run_id: str,
        start_ns: int,
        label: str,
        total: int | None = None,
        record: RunRecord | None = None,
        prefix: str = "",
    ) -> None:
        """A run begins on `name`'s pane; `label` says which run ("run 2 of 3") on its tag, after
        `prefix` ("replay · "), and beside its curves' legend entries; `record`: the recorded run a
        replay plays (it knows how its engine's steps went)."""
        total = total or self._totals.get(name, 0)
        self.traces[name] = trace = Trace(run_id, start_ns, total)
        if record is not None:
            self._multi_token[name] = record.multi_token_steps
            if record.multi_token_steps and record.decoded_tokens is not None:
                trace.recorded_first_step = max(1, record.tokens_generated - record.decoded_tokens)
        pane = self.grid.panes[name]
        pane.reset(self.prompt)
        earlier = "an earlier run failed · " if name in self._failed else ""
        pane.set_tag(earlier + prefix + (label or run_id), "warn" if earlier else "info")
        self._name_run(name, label or run_id)
        pane.set_status("prefill…")
        pane.set_progress(0, max(1, total))

    def feed(self, name: str, ids: list[int], stamps: list[int], texts: list[str]) -> None:
        """Queue tokens of the current trace; drawn at the next `flush`."""
        pending = self._pending.setdefault(name, ([], [], []))
        pending[0].extend(ids)
        pending[1].extend(stamps)
        pending[2].extend(texts)

    def flush(self) -> None:
        for name in list(self._pending):
            self._flush_one(name)

    def _flush_one(self, name: str) -> None:
        pending = self._pending.pop(name, None)
        trace = self.traces.get(name)
        if not pending or trace is None or not pending[0]:
            return
        ids, stamps, texts = pending
        trace.ids.extend(ids)
        trace.stamps.extend(stamps)
        trace.texts.extend(texts)
        pane = self.grid.panes[name]
        pane.append(texts)
        metrics = run_metrics(trace.start_ns, trace.stamps.view().tolist())
        # as the record will: the engine said so at load, or its steps show it (a server's events)
        multi = self._multi_token.get(name, False) or trace.steps_make_several
        per_token, tok_s = decode_rate(metrics, multi, metrics.tokens - trace.first_step_tokens)
        pane.set_status(status_line(metrics.ttft_ms, per_token, tok_s, metrics.tokens, trace.total))
        pane.set_progress(metrics.tokens, max(1, trace.total))
        self.latency.set_series(name, trace.latency_ms(), trace.texts)
        self.race.set_series(name, trace.seconds())
        self._check_divergence(name)

    def _check_divergence(self, name: str) -> None:
        if not self.greedy or self.reference not in self.traces:
            return
        reference = self.traces[self.reference].ids.view()
        others = [n for n in self.traces if n != self.reference] if name == self.reference else [name]
        for other in others:
            pane = self.grid.panes[other]
            index = first_difference(reference, self.traces[other].ids.view())
            if index is not None:
                pane.mark_divergence(index, self.reference)

    def _recorded(self, record: RunRecord, tokens: list[TokenRecord]) -> None:
        """The record is the authority: redraw this run's curve and numbers from it."""
        pane = self.grid.panes.get(record.backend)
        if pane is None:
            return
        if record.status not in ("ok", "cancelled"):
            if record.backend not in self._failed:
                pane.show_error(record.error or record.status)
                self._failed.add(record.backend)
            return
        if tokens:
            self.show_tokens(record.backend, tokens)
        pane.set_status(record_status(record))

    def show_tokens(self, name: str, tokens: list[TokenRecord]) -> None:
        latency = np.array([t.t_ms if t.itl_ms is None else t.itl_ms for t in tokens], dtype=np.float64)
        self.latency.set_series(name, latency, [t.text for t in tokens])
        self.race.set_series(name, np.array([t.t_ms / 1e3 for t in tokens], dtype=np.float64))

    def _name_run(self, name: str, run: str) -> None:
        """Which run the curves draw, in their legends: a pane's tag does not go into an exported PNG."""
        self.latency.set_run(name, run)
        self.race.set_run(name, run)

    # --- a finished or loaded session ---------------------------------------------------------
    def show_records(self, runs: list[RunRecord], tokens: list[TokenRecord]) -> None:
        """Fill each pane with its engine's typical measured run (display_run), straight from the records."""
        by_run: dict[str, list[TokenRecord]] = {}
        for token in tokens:
            by_run.setdefault(token.run_id, []).append(token)
        for name, pane in self.grid.panes.items():
            mine = runs_of(runs, name)
            if not mine:  # a cancel came before its turn: no longer "waiting" (or "loaded") for one
                pane.set_tag("not run", "warn")
                pane.set_status("no run recorded: the session ended before its turn")
                pane.set_progress(0, 1)
                continue
            shown = display_run(mine, by_run)
            repeats = repeats_like(mine, shown)
            run_tokens = sorted(by_run.get(shown.run_id, []), key=lambda t: t.token_index)
            pane.reset(self.prompt)
            pane.append([t.text for t in run_tokens])
            failures = [r for r in mine if r.status not in ("ok", "cancelled")]
            label = run_label(shown.repeat, shown.is_warmup, repeats)
            if run_tokens:
                self.show_tokens(name, run_tokens)
                self._name_run(name, label if shown.status == "ok" else f"{label} · {shown.status}")
                pane.set_status(record_status(shown, repeats))
                pane.set_progress(len(run_tokens), max(1, shown.new_tokens))
            pane.set_tag(label)
            if failures:
                pane.show_error(failures[0].error or failures[0].status)
            elif shown.status == "cancelled":  # says more than whether its part agrees
                pane.set_tag("cancelled", "warn")
            elif self.greedy and name == self.reference:
                pane.set_tag("reference", "ok")
            elif self.greedy and shown.first_divergence is not None and shown.first_divergence < len(run_tokens):
                pane.mark_divergence(shown.first_divergence, self.reference)
            elif self.greedy and shown.agree_tokens is not None:
                pane.set_tag(f"matches {self.reference}", "ok")


def typical_run(runs: list[RunRecord]) -> RunRecord:
    """The run nearest the engine's medians of TTFT and ms/token together (the sum of how many times
    off each is, on a log scale): not a slow round's run, whichever figure the slow round hit. A
    figure no run has (ms/token of one-token runs) counts for none; a run without one another has
    comes last."""
    distance = np.zeros(len(runs))
    for figure in ("ttft_ms", "ms_per_token"):
        values = np.array([finite(getattr(r, figure)) or np.nan for r in runs], dtype=np.float64)
        known = np.isfinite(values) & (values > 0)
        if known.any():
            logs = np.log(np.where(known, values, 1.0))
            distance += np.where(known, np.abs(logs - np.median(logs[known])), np.inf)
    return min(zip(distance, (r.repeat for r in runs), runs), key=lambda item: item[:2])[2]


def display_run(records: list[RunRecord], by_run: dict[str, list[TokenRecord]]) -> RunRecord:
    """The run a pane shows and Replay plays: the most typical complete measured run (the kind the
    figures count; typical_run), else the last measured run with tokens (a cancelled or failed one,
    tagged so), else the last with tokens, else the last."""
    with_tokens = [r for r in records if by_run.get(r.run_id)]
    measured = [r for r in with_tokens if not r.is_warmup]
    complete = [r for r in measured if is_measured(r)]
    if complete:
        return typical_run(complete)
    for group in (measured, with_tokens):
        if group:
            return max(group, key=lambda r: (not r.is_warmup, r.repeat))
    return records[-1]
