"""Per-backend summaries of measured runs (warm-ups excluded): what the table and bar chart show."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..status import RunStatus
from .records import RunRecord
from .stats import Summary, summarize


@dataclass(frozen=True)
class BackendSummary:
    backend: str
    runs: int  # measured runs that finished
    status: RunStatus  # OK, or the first failure seen
    error: str
    weights: str
    dtype: str
    import_s: float | None
    load_s: float | None
    cold_start_s: float | None
    ttft_ms: Summary
    itl_p50_ms: Summary
    tpot_ms: Summary
    decode_tok_s: Summary
    bandwidth_gb_s: Summary
    peak_rss_mb: float | None
    agree_tokens: int | None
    new_tokens: int
    concurrent: bool
    notes: str


def summarize_backends(runs: list[RunRecord], backends: list[str] | None = None) -> list[BackendSummary]:
    names = backends or list(dict.fromkeys(r.backend for r in runs))
    out = []
    for name in names:
        mine = [r for r in runs if r.backend == name]
        if not mine:
            continue
        measured = [r for r in mine if not r.is_warmup and r.status == RunStatus.OK]
        failures = [r for r in mine if r.status.is_failure]
        status = failures[0].status if failures else (RunStatus.OK if measured else mine[-1].status)
        first = next((r for r in mine if r.cold_start_s is not None), None)
        rss = [r.peak_rss_mb for r in mine if r.peak_rss_mb is not None]
        agree = [r.agree_tokens for r in measured if r.agree_tokens is not None]
        any_row = mine[0]
        out.append(BackendSummary(
            backend=name, runs=len(measured), status=status, error=failures[0].error if failures else "",
            weights=any_row.weights, dtype=next((r.dtype for r in mine if r.dtype), ""),
            import_s=next((r.import_s for r in mine if r.import_s is not None), None),
            load_s=next((r.load_s for r in mine if r.load_s is not None), None),
            cold_start_s=first.cold_start_s if first else None,
            ttft_ms=summarize([r.ttft_ms for r in measured]),
            itl_p50_ms=summarize([r.itl_p50_ms for r in measured]),
            tpot_ms=summarize([r.tpot_ms for r in measured]),
            decode_tok_s=summarize([r.decode_tok_s for r in measured]),
            bandwidth_gb_s=summarize([r.bandwidth_gb_s for r in measured]),
            peak_rss_mb=max(rss) if rss else None,
            agree_tokens=min(agree) if agree else None,
            new_tokens=any_row.new_tokens, concurrent=any(r.concurrent for r in mine),
            notes=next((r.notes for r in mine if r.notes), ""),
        ))
    return out


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def fmt_spread(summary: Summary, digits: int = 1) -> str:
    """Median, with the 95% interval's half-width in percent when there are repeats."""
    if summary.n == 0:
        return "-"
    text = f"{summary.median:.{digits}f}"
    if summary.n > 1 and not math.isnan(summary.spread_pct):
        text += f" ±{summary.spread_pct:.0f}%"
    return text


SUMMARY_HEADERS = ["backend", "dtype", "runs", "import s", "load s", "cold start s", "TTFT ms",
                   "ms/token", "TPOT ms", "tok/s", "GB/s", "peak RSS MB", "agree", "status"]


def summary_rows(summaries: list[BackendSummary], reference: str | None = None) -> list[list[str]]:
    rows = []
    for s in summaries:
        agree = "-" if s.agree_tokens is None else f"{s.agree_tokens}/{s.new_tokens}"
        if reference and s.backend == reference:
            agree = "reference"
        status = s.status.value if s.status == RunStatus.OK else f"{s.status}: {s.error}"[:80]
        rows.append([s.backend, s.dtype, str(s.runs), fmt(s.import_s, 2), fmt(s.load_s, 2),
                     fmt(s.cold_start_s, 2), fmt_spread(s.ttft_ms), fmt_spread(s.itl_p50_ms, 2),
                     fmt_spread(s.tpot_ms, 2), fmt_spread(s.decode_tok_s), fmt(s.bandwidth_gb_s.median),
                     fmt(s.peak_rss_mb, 0), agree, status])
    return rows


def markdown_table(summaries: list[BackendSummary], reference: str | None = None) -> str:
    lines = ["| " + " | ".join(SUMMARY_HEADERS) + " |", "|" + "---|" * len(SUMMARY_HEADERS)]
    lines += ["| " + " | ".join(row) + " |" for row in summary_rows(summaries, reference)]
    return "\n".join(lines)
