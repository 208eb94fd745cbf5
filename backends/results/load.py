"""Load runs: one record per request, and per concurrency level the figures vLLM's serving
benchmark reports (aggregate output tokens/s, TTFT and pooled ITL percentiles, goodput).

Concurrency 1 is every engine's measured bench runs (local engines serve one sequence at a time:
they appear there only, as the reference); higher levels are load runs of server engines, where
`concurrency` requests start together and the level's duration is the sum of its rounds (first
request sent -> the last request's end: its last token, or its error where a request failed or hung
until a timeout after the others' tokens). As in vLLM's serving benchmark, requests/s and output
tokens/s count successful requests only (a failed request's tokens and time-out are in the duration,
not in the counts). Goodput follows vLLM's definition: requests per second that meet every SLO set
(TTFT <= --slo-ttft-ms, TPOT <= --slo-itl-ms, TPOT being the request's mean inter-token latency, 0 for
a one-token output), counted over the same duration. A round cut by Cancel is left out of every figure
and counted in the level's notes.

Open-loop levels (`--request-rate`) are rounds whose requests are sent at their arrival times
(backends/runs/arrivals.py) instead of all at once: their records have `request_rate` set and
concurrency 0 (no cap). Beside the offered rate, a level says the rate its requests were sent at
and the rate the server completed them at (from the first completion to the last); a server that
completes requests clearly slower than they arrive (below SATURATION_SHARE of the sent rate) is
saturated: its queue, and so its TTFT, grows for as long as the load lasts.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, fields

import numpy as np

from .. import registry
from ..server_metrics import CROSS_CHECK_PREFIX, chunk_gaps_ms
from ..status import RunStatus
from ..worker.events import StreamResult
from .records import RunRecord, TokenRecord
from .stats import finite, run_metrics


@dataclass(frozen=True)
class Slo:
    ttft_ms: float | None = None
    itl_ms: float | None = None  # bound on each request's TPOT (its mean inter-token latency)

    @property
    def set(self) -> bool:
        return self.ttft_ms is not None or self.itl_ms is not None

    def met(self, request: LoadRequestRecord) -> bool:
        if request.status != RunStatus.OK or request.ttft_ms is None or request.tokens_generated < request.new_tokens:
            return False
        if self.ttft_ms is not None and request.ttft_ms > self.ttft_ms:
            return False
        tpot = _slo_tpot_ms(request)
        return not (self.itl_ms is not None and (tpot is None or tpot > self.itl_ms))

    def describe(self) -> str:
        parts = ([f"TTFT <= {self.ttft_ms:g} ms"] if self.ttft_ms is not None else []) + (
            [f"TPOT <= {self.itl_ms:g} ms"] if self.itl_ms is not None else []
        )
        return " and ".join(parts) or "no SLO set (--slo-ttft-ms, --slo-itl-ms; the Load tab's SLO fields)"


def _slo_tpot_ms(request: LoadRequestRecord) -> float | None:
    """The TPOT an SLO is held to: a one-token output has no gap, and vLLM's goodput counts its TPOT as 0."""
    return 0.0 if request.tokens_generated == 1 and request.tpot_ms is None else request.tpot_ms


@dataclass
class LoadRequestRecord:
    run_id: str  # the round: every request of one round shares it
    backend: str
    cell: str
    prompt_tokens: int
    new_tokens: int
    concurrency: int
    repeat: int
    is_warmup: bool
    stream: int
    status: RunStatus
    tokens_generated: int = 0
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_s: float | None = None
    start_offset_ms: float | None = None  # when this request was sent, after the round's first one
    round_s: float | None = None  # the round's wall time: first request sent -> the last request's end
    itl_ms: str = ""  # every gap between this request's tokens (ms, space-separated): pooled per level
    error: str = ""
    notes: str = ""
    request_rate: float | None = None  # an open-loop level's offered rate (req/s, inf: all at once); None: closed loop
    burstiness: float | None = None  # its arrivals' gamma shape (1: Poisson)

    def __post_init__(self) -> None:
        self.status = RunStatus.parse(self.status)

    @property
    def gaps(self) -> list[float]:
        return [float(v) for v in self.itl_ms.split()] if self.itl_ms else []


LOAD_REQUEST_COLUMNS = [f.name for f in fields(LoadRequestRecord)]


@dataclass
class LoadLevel:
    backend: str
    prompt_tokens: int
    new_tokens: int
    concurrency: int
    kind: str  # "server" or "batch 1" (a local engine: its bench runs)
    requests: int
    failed: int
    # Ended without error or cancel but with fewer tokens than asked (a server that stopped at
    # end-of-text, or interrupted one stream for another): counted apart, never as met SLOs.
    short: int
    duration_s: float
    output_tok_s: float  # the successful requests' tokens over the level's duration (vLLM's)
    request_s: float  # successful requests over the level's duration (vLLM's: a failed one is not served)
    ttft_p50_ms: float
    ttft_p90_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float  # pooled over every gap of the level's requests
    itl_p90_ms: float
    itl_p99_ms: float
    tpot_p50_ms: float
    goodput_req_s: float | None  # None without an SLO
    slo_met_pct: float | None
    slo: str
    notes: str = ""
    request_rate: float | None = None  # the offered rate of an open-loop level (None: a concurrency level)
    burstiness: float | None = None
    sent_req_s: float | None = None  # the rate the requests were sent at (measured: (n - 1) / first to last send)
    achieved_req_s: float | None = None  # the rate they were completed at ((n - 1) / first to last completion)
    saturated: bool | None = None  # achieved below SATURATION_SHARE of sent: the server's queue grows

    @property
    def open_loop(self) -> bool:
        return self.request_rate is not None


SATURATION_SHARE = 0.9  # completions at under 90% of the arrival rate: the server falls behind
LOAD_LEVEL_COLUMNS = [f.name for f in fields(LoadLevel)]


def request_records(
    run_id: str,
    backend: str,
    cell: str,
    prompt_tokens: int,
    new_tokens: int,
    concurrency: int,
    repeat: int,
    is_warmup: bool,
    started_ns: int,
    streams,
    notes: str = "",
    failure: str = "",
    cancelled: bool = False,
    failure_status: RunStatus = RunStatus.ERROR,
    request_rate: float | None = None,
    burstiness: float | None = None,
    requests: int | None = None,
) -> list[LoadRequestRecord]:
    """Records of one round from the child's StreamResults (or one failed record per stream when
    the whole round failed: `failure`, ended as `failure_status`; `requests` of them, else
    `concurrency`). An open-loop round has its `request_rate` and concurrency 0."""
    if failure:
        return [
            LoadRequestRecord(
                run_id,
                backend,
                cell,
                prompt_tokens,
                new_tokens,
                concurrency,
                repeat,
                is_warmup,
                i,
                failure_status,
                error=failure,
                notes=notes,
                request_rate=request_rate,
                burstiness=burstiness,
            )
            for i in range(requests if requests is not None else concurrency)
        ]
    ends = [end for end in map(_ended_ns, streams) if end]
    round_s = (max(ends) - started_ns) / 1e9 if ends else None
    out = []
    for stream in streams:
        metrics = run_metrics(stream.started_ns, list(stream.token_ns))
        status = (
            RunStatus.ERROR
            if stream.error
            else RunStatus.CANCELLED
            if cancelled and metrics.tokens < new_tokens
            else RunStatus.OK
        )
        out.append(
            LoadRequestRecord(
                run_id,
                backend,
                cell,
                prompt_tokens,
                new_tokens,
                concurrency,
                repeat,
                is_warmup,
                stream.index,
                status,
                metrics.tokens,
                finite(metrics.ttft_ms),
                finite(metrics.tpot_ms),
                finite(metrics.e2e_s),
                (stream.started_ns - started_ns) / 1e6,
                round_s,
                " ".join(f"{g:.4f}" for g in chunk_gaps_ms(stream.token_ns, stream.token_steps)),
                stream.error,
                notes,
                request_rate,
                burstiness,
            )
        )
    return out


def _ended_ns(stream: StreamResult) -> int:
    """When a request ended: its end as the child stamped it (`ended_ns`: after its last token, or its
    error, which can come long after the others' tokens when it hung until a timeout), else its last
    token; 0 when neither is known."""
    return max(stream.ended_ns, stream.token_ns[-1] if stream.token_ns else 0)


def requests_from_runs(runs: list[RunRecord], tokens: list[TokenRecord]) -> list[LoadRequestRecord]:
    """Measured bench runs as concurrency-1 requests (each run is a round of one)."""
    streamed: dict[str, list[TokenRecord]] = defaultdict(list)
    for token in tokens:
        if not token.is_warmup:
            streamed[token.run_id].append(token)
    gaps: dict[str, list[float]] = {}
    for run_id, mine in streamed.items():
        mine.sort(key=lambda t: t.token_index)
        if any(t.step is None for t in mine):  # a token a step: its recorded gaps
            gaps[run_id] = [t.itl_ms for t in mine if t.itl_ms is not None]
        else:  # one gap per chunk, as at the higher levels
            gaps[run_id] = chunk_gaps_ms([round(t.t_ms * 1e6) for t in mine], [t.step for t in mine])
    out = []
    for run in runs:
        if run.is_warmup or run.status == RunStatus.CANCELLED:
            continue
        cell = run.run_id.split("/")[1] if run.run_id.count("/") >= 2 else ""
        out.append(
            LoadRequestRecord(
                run.run_id,
                run.backend,
                cell,
                run.prompt_tokens,
                run.new_tokens,
                1,
                run.repeat,
                False,
                0,
                run.status,
                run.tokens_generated,
                run.ttft_ms,
                run.tpot_ms,
                run.e2e_s,
                0.0,
                run.e2e_s,
                " ".join(f"{g:.4f}" for g in gaps.get(run.run_id, [])),
                run.error,
                run.notes,
            )
        )
    return out


def load_levels(
    requests: list[LoadRequestRecord], slo: Slo = Slo(), servers: set[str] | frozenset[str] = frozenset()
) -> list[LoadLevel]:
    """One row per (engine, prompt, new tokens, concurrency), measured requests only."""
    groups: dict[tuple, list[LoadRequestRecord]] = defaultdict(list)
    for request in requests:
        if not request.is_warmup:
            key = (
                request.backend,
                request.prompt_tokens,
                request.new_tokens,
                request.concurrency,
                request.request_rate,
            )
            groups[key].append(request)
    levels = []
    for (backend, prompt, new, concurrency, rate), recorded in groups.items():
        # A round cut by Cancel ran neither its requests nor its wall time to the end: it stays out of
        # every figure (as a cancelled bench run does) and is counted in the notes.
        cut = {r.run_id for r in recorded if r.status == RunStatus.CANCELLED}
        group = [r for r in recorded if r.run_id not in cut]
        rounds = {r.run_id: r.round_s for r in group if r.round_s is not None}
        duration = float(sum(rounds.values()))
        ok = [r for r in group if r.status == RunStatus.OK]
        short = [r for r in ok if r.tokens_generated < r.new_tokens]
        generated = sum(r.tokens_generated for r in ok)  # vLLM: a failed request's tokens are not output
        ttft = _percentiles([r.ttft_ms for r in ok])
        itl = _percentiles([g for r in ok for g in r.gaps])
        tpot = _percentiles([r.tpot_ms for r in ok])
        good = sum(slo.met(r) for r in group)
        notes = "; ".join(
            n
            for n in (
                f"{len(short)} of {len(group)} requests ended early (fewer tokens than asked)" if short else "",
                f"{len(recorded) - len(group)} requests of {len(cut)} round(s) cut by Cancel left out" if cut else "",
                _cross_check_notes(group),
            )
            if n
        )
        levels.append(
            LoadLevel(
                backend,
                prompt,
                new,
                concurrency,
                "server" if backend in servers else "batch 1",
                len(group),
                len(group) - len(ok),
                len(short),
                duration,
                # no request completed: no throughput to state (level 1's failed runs have no duration
                # at all; a server's failed round has one, and read 0.0 beside level 1's "-")
                generated / duration if duration > 0 and ok else math.nan,
                len(ok) / duration if duration > 0 and ok else math.nan,
                *ttft,
                *itl,
                tpot[0],
                good / duration if slo.set and duration > 0 else None,
                100.0 * good / len(group) if slo.set and group else None,
                slo.describe() if slo.set else "",
                notes,
                *((rate, *_open_loop_figures(group)) if rate is not None else ()),
            )
        )
    return sorted(
        levels,
        key=lambda lv: (
            lv.prompt_tokens,
            lv.new_tokens,
            lv.backend,
            lv.open_loop,
            lv.concurrency,
            lv.request_rate or 0,
        ),
    )


def _open_loop_figures(group: list[LoadRequestRecord]) -> tuple[float, float | None, float | None, bool | None]:
    """An open-loop level's burstiness, sent and achieved rates, and whether it saturated, pooled over
    its rounds: the sum of (requests - 1) over the sum of the spans (sends; completions of the OK ones)."""
    sent_n = sent_s = done_n = done_s = 0.0
    by_round: dict[str, list[LoadRequestRecord]] = defaultdict(list)
    for request in group:
        by_round[request.run_id].append(request)
    for requests in by_round.values():
        sends = sorted(r.start_offset_ms for r in requests if r.start_offset_ms is not None)
        ends = sorted(
            r.start_offset_ms + 1000.0 * r.e2e_s
            for r in requests
            if r.status == RunStatus.OK and r.start_offset_ms is not None and r.e2e_s is not None
        )
        if len(sends) > 1:
            sent_n, sent_s = sent_n + len(sends) - 1, sent_s + (sends[-1] - sends[0]) / 1000.0
        if len(ends) > 1:
            done_n, done_s = done_n + len(ends) - 1, done_s + (ends[-1] - ends[0]) / 1000.0
    sent = _rate(sent_n, sent_s)
    achieved = _rate(done_n, done_s)
    saturated = None if sent is None or achieved is None else achieved < SATURATION_SHARE * sent
    return group[0].burstiness or 1.0, sent, achieved, saturated


def _rate(count: float, span_s: float) -> float | None:
    if count < 1:
        return None
    return count / span_s if span_s > 0 else math.inf


def session_levels(
    runs: list[RunRecord], tokens: list[TokenRecord], load: list[LoadRequestRecord], slo: Slo = Slo()
) -> list[LoadLevel]:
    """A session's levels: its bench runs as level 1 of every engine, its load rounds above. What every
    view of a load shows. Its servers: engines that serve concurrently (a server asked for level 1
    only is still one) and any with load rounds."""
    servers = {r.backend for r in load} | set(registry.serving_concurrently())
    return load_levels(requests_from_runs(runs, tokens) + list(load), slo, servers)


def _cross_check_notes(group: list[LoadRequestRecord]) -> str:
    """The server's own /metrics note of the level's first round (every round's is in its records)."""
    by_round: dict[str, str] = {}
    for request in group:
        for note in request.notes.split("; "):
            if note.startswith(CROSS_CHECK_PREFIX) and request.run_id not in by_round:
                by_round[request.run_id] = note
    if not by_round:
        return ""
    first = next(iter(by_round.values()))
    return first if len(by_round) == 1 else f"{first} (first of {len(by_round)} rounds)"


def _percentiles(values) -> tuple[float, float, float]:
    data = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=np.float64)
    if not data.size:
        return (math.nan,) * 3
    p50, p90, p99 = np.percentile(data, [50, 90, 99])
    return float(p50), float(p90), float(p99)


# the columns both load tables end with (_token_cells fills them)
TOKEN_HEADERS = ["ITL p50 ms", "ITL p90 ms", "ITL p99 ms", "TPOT p50 ms", "goodput req/s", "SLO met"]
LOAD_HEADERS = [
    "backend",
    "conc.",
    "kind",
    "requests",
    "failed",
    "short",
    "output tok/s",
    "req/s",
    "TTFT p50 ms",
    "TTFT p99 ms",
    *TOKEN_HEADERS,
]


def levels_by_cell(levels: list[LoadLevel]) -> list[tuple[tuple[int, int], list[LoadLevel]]]:
    """The levels of each (prompt tokens, new tokens) cell, cells in order: one load table per cell."""
    cells = sorted({(lv.prompt_tokens, lv.new_tokens) for lv in levels})
    return [(cell, [lv for lv in levels if (lv.prompt_tokens, lv.new_tokens) == cell]) for cell in cells]


def load_rows(levels: list[LoadLevel]) -> list[list[str]]:
    """The load table's rows (what `bench --concurrency` prints and the Load tab lists); open-loop
    levels have their own table (rate_rows)."""
    return [
        [
            lv.backend,
            str(lv.concurrency),
            lv.kind,
            str(lv.requests),
            str(lv.failed),
            str(lv.short),
            _f(lv.output_tok_s),
            _f(lv.request_s, 2),
            _f(lv.ttft_p50_ms),
            _f(lv.ttft_p99_ms),
            *_token_cells(lv),
        ]
        for lv in levels
        if not lv.open_loop
    ]


def _token_cells(lv: LoadLevel) -> list[str]:
    """The columns both load tables end with: ITL percentiles, TPOT, goodput and the SLO share."""
    return [
        _f(lv.itl_p50_ms, 2),
        _f(lv.itl_p90_ms, 2),
        _f(lv.itl_p99_ms, 2),
        _f(lv.tpot_p50_ms, 2),
        _f(lv.goodput_req_s, 2),
        "-" if lv.slo_met_pct is None else f"{lv.slo_met_pct:.0f}%",
    ]


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or math.isnan(value) else "inf" if math.isinf(value) else f"{value:.{digits}f}"


def _offered(rate: float | None) -> str:
    return "-" if rate is None else "inf" if math.isinf(rate) else f"{rate:.4g}"


RATE_HEADERS = [
    "backend",
    "offered req/s",
    "sent req/s",
    "achieved req/s",
    "saturated",
    "requests",
    "failed",
    "output tok/s",
    "TTFT p50 ms",
    "TTFT p90 ms",
    "TTFT p99 ms",
    *TOKEN_HEADERS,
]


def open_loop_levels(levels: Iterable[LoadLevel]) -> list[LoadLevel]:
    return [lv for lv in levels if lv.open_loop]


def rate_rows(levels: list[LoadLevel]) -> list[list[str]]:
    """The open-loop table's rows (`bench --request-rate`): one per engine and offered rate."""
    return [
        [
            lv.backend,
            _offered(lv.request_rate),
            _f(lv.sent_req_s, 2),
            _f(lv.achieved_req_s, 2),
            "SATURATED" if lv.saturated else "-" if lv.saturated is None else "no",
            str(lv.requests),
            str(lv.failed),
            _f(lv.output_tok_s),
            _f(lv.ttft_p50_ms),
            _f(lv.ttft_p90_ms),
            _f(lv.ttft_p99_ms),
            *_token_cells(lv),
        ]
        for lv in open_loop_levels(levels)
    ]


def saturation_lines(levels: list[LoadLevel]) -> list[str]:
    """One plain line per engine whose open-loop levels saturated: the lowest such rate and the most it served."""
    lines = []
    for backend in sorted({lv.backend for lv in open_loop_levels(levels)}):
        mine = [lv for lv in open_loop_levels(levels) if lv.backend == backend]
        hit = [lv for lv in mine if lv.saturated]
        if not hit:
            continue
        first = min(hit, key=lambda lv: lv.request_rate or 0)
        served = max((lv.achieved_req_s for lv in mine if lv.achieved_req_s is not None), default=math.nan)
        lines.append(
            f"SATURATED: {backend} falls behind from {_offered(first.request_rate)} req/s offered: it completed "
            f"{_f(first.achieved_req_s, 2)} req/s of {_f(first.sent_req_s, 2)} sent (at most {_f(served, 2)} req/s "
            f"at any rate); its queue and TTFT (p50 {_f(first.ttft_p50_ms)} ms) grow for as long as the load lasts"
        )
    return lines


def load_notes(levels: list[LoadLevel], slo: Slo) -> list[str]:
    """What the load table's figures are, then each level's own note (the server's /metrics beside
    the client's figures): under the table in the terminal, the reports and the window's Load tab."""
    return [
        (
            "output tok/s, req/s: the completed requests' tokens and count (a failed request's are not "
            "output, as vLLM counts) over the level's wall time (each round: first request sent to the last "
            "one's end); level 1 is every engine's bench runs; TTFT, TPOT: per request; ITL pooled over "
            "every request's gaps; goodput: " + slo.describe()
        )
    ] + [
        f"{lv.backend} at {_offered(lv.request_rate) + ' req/s' if lv.open_loop else lv.concurrency}: {lv.notes}"
        for lv in levels
        if lv.notes
    ]


def rate_notes(levels: list[LoadLevel]) -> list[str]:
    """What the open-loop table's figures are, then the saturation lines."""
    if not open_loop_levels(levels):
        return []
    return [
        "offered: --request-rate (gamma arrivals of shape --burstiness, mean 1/rate; 1: Poisson); sent: the "
        "requests' measured send rate; achieved: the rate the server completed them at (first to last "
        f"completion); saturated: achieved below {SATURATION_SHARE:.0%} of sent (the queue grows; at inf every "
        "request arrives at once, so every server is, and the achieved rate is its capacity)"
    ] + saturation_lines(levels)
