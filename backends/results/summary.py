"""Per-backend summaries of measured runs (warm-ups excluded): what the table and bar chart show.

Every figure is a median across measured runs, shown with the median's own interval
(distribution-free, from order statistics: see `stats.Summary`), in the CLI table, summary.csv,
the HTML report and the window alike. ITL percentiles are pooled over every inter-token gap of
an engine's measured runs (as vLLM reports them), beside the median of the per-run medians
("ms/token"). Engines that sample in their own code are marked when the decoding samples.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..sampling import GREEDY_BELOW
from ..status import RunStatus
from .records import RunRecord, TokenRecord, runs_of
from .stats import Summary, median_interval_rank, pooled_summary, summarize

NATIVE_MARK = "†"


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
    itl_p50_ms: Summary  # the per-run median ITLs across runs
    tpot_ms: Summary
    decode_tok_s: Summary
    bandwidth_gb_s: Summary
    peak_rss_mb: float | None  # the worker's own peak while serving (max over its runs)
    agree_tokens: int | None
    new_tokens: int
    concurrent: bool
    notes: str
    # Every inter-token gap of every measured run pooled (n = gaps; median/p90/p99 = pooled p50/p90/p99).
    itl_pooled_ms: Summary = pooled_summary([])
    native_sampling: bool = False  # the engine samples in its own code
    sampled: bool = False  # the measured runs sampled (decoding "sample", temperature >= GREEDY_BELOW)
    cpu_s_per_token: Summary = pooled_summary([])  # worker user + system CPU seconds per token, across runs
    load_peak_rss_mb: float | None = None  # the worker's own peak at Ready (load transients included)
    build_s: float | None = None  # one-time artefact building (export, conversion, kernel): not in cold_start_s
    # ms per decoded token across runs (RunRecord.ms_per_token: the median ITL, or the TPOT of an
    # engine that makes several tokens per step): what the table's ms/token and every ranking show
    ms_per_token: Summary = pooled_summary([])
    multi_token_steps: bool = False
    # speculative decoding, medians across runs (None: the engine does not speculate)
    spec_acceptance: float | None = None
    spec_tokens_per_pass: float | None = None
    spec_draft_ms_per_token: float | None = None
    spec_verify_ms_per_token: float | None = None
    # every run counted its ms/token over the tokens made after the first step (records before
    # RunRecord.decoded_tokens divided by every token after the first: the TPOT)
    decoded_after_first_step: bool = False

    @property
    def comparable(self) -> bool:
        """False when the sampled timings include the engine's own sampler instead of the shared one."""
        return not (self.native_sampling and self.sampled)


def is_measured(run: RunRecord) -> bool:
    """A run every figure counts: measured (not a warm-up) and finished (ok). One predicate for the
    table, the pooled ITL, the window's histogram and the CLI's count of runs kept."""
    return not run.is_warmup and run.status == RunStatus.OK


def runs_kept(runs: Iterable[RunRecord], planned: int) -> str:
    """'3 of 8 planned runs kept': the measured runs that finished (those the summary counts); what a
    cancelled command prints and what its folder's report says."""
    return f"{sum(1 for r in runs if is_measured(r))} of {planned} planned runs kept"


def measured_gaps(runs: Sequence[RunRecord], tokens: Iterable[TokenRecord]) -> dict[str, list[float]]:
    """Every inter-token gap of the measured runs, per engine: the pooled ITL and the histogram."""
    backend_of = {r.run_id: r.backend for r in runs if is_measured(r)}
    out: dict[str, list[float]] = {}
    for token in tokens:
        if token.itl_ms is not None and token.run_id in backend_of:
            out.setdefault(backend_of[token.run_id], []).append(token.itl_ms)
    return out


def summarize_backends(
    runs: list[RunRecord], backends: list[str] | None = None, tokens: Sequence[TokenRecord] | None = None
) -> list[BackendSummary]:
    names = backends or list(dict.fromkeys(r.backend for r in runs))
    gaps = measured_gaps(runs, tokens or ())
    out = []
    for name in names:
        mine = runs_of(runs, name)
        if not mine:
            continue
        measured = [r for r in mine if is_measured(r)]
        failures = [r for r in mine if r.status.is_failure]
        status = failures[0].status if failures else (RunStatus.OK if measured else mine[-1].status)
        first = next((r for r in mine if r.cold_start_s is not None), None)
        rss = [r.peak_rss_mb for r in mine if r.peak_rss_mb is not None]
        agree = [r.agree_tokens for r in measured if r.agree_tokens is not None]
        any_row = mine[0]
        out.append(
            BackendSummary(
                backend=name,
                runs=len(measured),
                status=status,
                error=failures[0].error if failures else "",
                weights=any_row.weights,
                dtype=next((r.dtype for r in mine if r.dtype), ""),
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
                new_tokens=any_row.new_tokens,
                concurrent=any(r.concurrent for r in mine),
                notes=next((r.notes for r in mine if r.notes), ""),
                itl_pooled_ms=pooled_summary(gaps.get(name, [])),
                native_sampling=any(r.native_sampling for r in mine),
                sampled=any(sampled(r) for r in (measured or mine)),
                cpu_s_per_token=summarize([r.cpu_s_per_token for r in measured]),
                load_peak_rss_mb=max(
                    (r.load_peak_rss_mb for r in mine if r.load_peak_rss_mb is not None), default=None
                ),
                build_s=max((r.build_s for r in mine if r.build_s is not None), default=None),
                ms_per_token=summarize([r.ms_per_token for r in measured]),
                multi_token_steps=any(r.multi_token_steps for r in mine),
                spec_acceptance=_median([r.spec_acceptance for r in measured]),
                spec_tokens_per_pass=_median([r.spec_tokens_per_pass for r in measured]),
                spec_draft_ms_per_token=_median([r.spec_draft_ms_per_token for r in measured]),
                spec_verify_ms_per_token=_median([r.spec_verify_ms_per_token for r in measured]),
                decoded_after_first_step=bool(measured) and all(r.decoded_tokens is not None for r in measured),
            )
        )
    return out


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(present) if present else None


def sampled(run: RunRecord) -> bool:
    """Whether a run drew its tokens (a temperature below GREEDY_BELOW is greedy: SamplingParams.is_greedy)."""
    return run.decoding == "sample" and (run.temperature or 0) >= GREEDY_BELOW


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def fmt_interval(summary: Summary, digits: int = 1) -> str:
    """Median, with the median's interval across repeats when there are two or more: '11.0 [9.0–13.0]'."""
    if summary.n == 0:
        return "-"
    text = f"{summary.median:.{digits}f}"
    if summary.n > 1 and not math.isnan(summary.median_ci_low):
        text += f" [{summary.median_ci_low:.{digits}f}–{summary.median_ci_high:.{digits}f}]"
    return text


fmt_spread = fmt_interval  # the former name


def fmt_pooled(summary: Summary, digits: int = 2) -> str:
    """Pooled p50/p90/p99."""
    if summary.n == 0:
        return "-"
    return "/".join(f"{v:.{digits}f}" for v in (summary.median, summary.p90, summary.p99))


SUMMARY_HEADERS = [
    "backend",
    "dtype",
    "runs",
    "import s",
    "load s",
    "cold start s",
    "build s",
    "TTFT ms",
    "ms/token",
    "TPOT ms",
    "tok/s",
    "CPU ms/token",
    "ITL p50/p90/p99 ms",
    "GB/s",
    "peak RSS MB run/load",
    "agree",
    "status",
]


def backend_label(s: BackendSummary) -> str:
    return s.backend if s.comparable else f"{s.backend} {NATIVE_MARK}"


STATUS_CELL_MOST = 120  # characters of a table's status cell; the whole error is in runs.csv


def status_cell(status: str, error: str) -> str:
    """A table's status: "ok", or the status and its error, cut visibly ("…") past STATUS_CELL_MOST
    characters (a cut that showed no mark read as the whole message)."""
    if status in ("ok", ""):
        return status
    text = f"{status}: {error}" if error else status
    return text if len(text) <= STATUS_CELL_MOST else text[: STATUS_CELL_MOST - 1] + "…"


def summary_rows(summaries: list[BackendSummary], reference: str | None = None) -> list[list[str]]:
    rows = []
    for s in summaries:
        agree = "-" if s.agree_tokens is None else f"{s.agree_tokens}/{s.new_tokens}"
        if reference and s.backend == reference:
            agree = "reference"
        status = status_cell(s.status.value, s.error)
        rows.append(
            [
                backend_label(s),
                s.dtype,
                str(s.runs),
                fmt(s.import_s, 2),
                fmt(s.load_s, 2),
                fmt(s.cold_start_s, 2),
                fmt(s.build_s, 2),
                fmt_interval(s.ttft_ms),
                fmt_interval(s.ms_per_token, 2),
                fmt_interval(s.tpot_ms, 2),
                fmt_interval(s.decode_tok_s),
                _cpu_ms(s.cpu_s_per_token),
                fmt_pooled(s.itl_pooled_ms),
                fmt(s.bandwidth_gb_s.median),
                f"{fmt(s.peak_rss_mb, 0)}/{fmt(s.load_peak_rss_mb, 0)}",
                agree,
                status,
            ]
        )
    return rows


def _cpu_ms(summary: Summary) -> str:
    """CPU milliseconds per token (median across runs): above ms/token when threads spin or run in parallel."""
    return "-" if summary.n == 0 else f"{summary.median * 1e3:.2f}"


def interval_label(n: int) -> str:
    """The true confidence level of the median's interval over n values, as every view prints it:
    '96.9% (min–max)' while no narrower pair of order statistics reaches 95% (2-8 values), else
    '96.1%'; '' under two values (no interval)."""
    if n < 2:
        return ""
    k, level = median_interval_rank(n)
    return f"{100 * level:.1f}%" + (" (min–max)" if k == 1 else "")


def interval_levels(ns: Iterable[int]) -> str:
    """Each count of runs with its interval's level: '5 runs: 93.8% (min–max), 9 runs: 96.1%'."""
    return ", ".join(f"{n} runs: {interval_label(n)}" for n in sorted({n for n in ns if n > 1}))


def interval_note(summaries: list[BackendSummary]) -> str:
    """What the table's figures and brackets are, with the interval's real confidence level."""
    levels = interval_levels(m.n for s in summaries for m in (s.ttft_ms, s.ms_per_token, s.tpot_ms, s.decode_tok_s))
    text = (
        "medians of measured runs (warm-ups excluded); [low–high]: distribution-free interval of the median "
        "across repeats (order statistics)"
    )
    if levels:
        text += "; its confidence level with " + levels
    return (
        text + "; cold start = worker spawned to first token with the artefacts cached; build s = the one-time "
        "export, conversion or compile this run had to make first (0: cached); ms/token = median of the runs' "
        "median inter-token latency (for an engine that makes several tokens per step, speculative decoding: its "
        "decode time per decoded token, its line below says which); ITL p50/p90/p99: every "
        "inter-token gap of the measured runs pooled; CPU ms/token = the worker's user + system CPU over the run "
        "(its prefill included) per token (with the processes it started: a managed server's); "
        "GB/s = (weights + KV cache read) per token x tok/s; "
        "peak RSS = the worker's own peak (plus its processes' peaks) while running / at load"
    )


def sampling_note(s: BackendSummary) -> str:
    """Why an engine's timings are (not) comparable, for the footnote, summary.csv and the window."""
    if not s.native_sampling:
        return ""
    if s.sampled:
        return (
            f"{NATIVE_MARK} {s.backend}: samples in its own code, not the shared sampler: "
            "its sampled timings are not comparable with the other engines'"
        )
    return f"{s.backend} samples in its own code when sampling; these greedy runs are comparable"


def sampling_notes(summaries: list[BackendSummary]) -> list[str]:
    return [note for note in (sampling_note(s) for s in summaries) if note]


def speculation_note(s: BackendSummary) -> str:
    """A speculative engine's line under the table: how much of its draft the target kept, the tokens
    each target pass made, and where its time went (medians across runs); "" for other engines."""
    if s.spec_tokens_per_pass is None:
        if not s.multi_token_steps:
            return ""
        return (  # a server that streamed several tokens per event: no draft counts, the same method
            f"{s.backend}: several tokens per step (per streamed event); ms/token is its first to last token over "
            "those after its first step (the median gap falls inside a step)"
        )
    parts = [f"{s.spec_tokens_per_pass:.2f} tokens per target pass"]
    if s.spec_acceptance is not None:
        parts.insert(0, f"acceptance {100 * s.spec_acceptance:.1f}%")
    if s.spec_draft_ms_per_token is not None and s.spec_verify_ms_per_token is not None:
        parts.append(f"draft {s.spec_draft_ms_per_token:.2f} + verify {s.spec_verify_ms_per_token:.2f} ms per token")
    basis = (
        "ms/token is its first to last token over those made after its first step (tokens come in bursts; "
        "what the first step made is in the TTFT)"
        if s.decoded_after_first_step
        else "ms/token is its TPOT (tokens come in bursts)"
    )
    return f"{s.backend} (speculative): " + ", ".join(parts) + "; " + basis


def speculation_notes(summaries: list[BackendSummary]) -> list[str]:
    return [note for note in (speculation_note(s) for s in summaries) if note]


def markdown_table(summaries: list[BackendSummary], reference: str | None = None, harness: dict | None = None) -> str:
    lines = ["| " + " | ".join(SUMMARY_HEADERS) + " |", "|" + "---|" * len(SUMMARY_HEADERS)]
    lines += ["| " + " | ".join(row) + " |" for row in summary_rows(summaries, reference)]
    lines += ["", interval_note(summaries)] + sampling_notes(summaries) + speculation_notes(summaries)
    lines += [note for note in [harness_note(harness)] if note]
    return "\n".join(lines)


def harness_note(harness: dict | None) -> str:
    """environment.json's "harness" as one line for every table's footnote (CLI, window, Markdown,
    HTML); "" when the bench did not calibrate."""
    if not harness:
        return ""
    if harness.get("error"):
        return f"harness cost per token (null engine): not measured ({harness['error']})"
    greedy = harness.get("null_itl_us_median")
    parts = [f"{greedy:.0f} us (greedy)"] if greedy is not None else []
    sampled = harness.get("sampled") or {}
    if sampled.get("null_itl_us_median") is not None:
        parts.append(f"{sampled['null_itl_us_median']:.0f} us (sampled)")
    line = "harness cost per token (null engine): " + (", ".join(parts) or "not measured")
    if harness.get("null_cold_start_s") is not None:  # the part of every cold start that is not the engine's
        line += f"; its cold start {harness['null_cold_start_s']:.2f} s (interpreter, numpy, the worker's imports)"
    return line
