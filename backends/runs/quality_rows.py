"""The rows of quality.csv and divergence.json, built from a session's runs and scores."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from ..results.agreement import agreement_detail, least_agreeing_streams
from ..results.records import RunRecord, runs_of
from ..results.stats import Summary, finite, summarize
from ..sources.model_files import RANDOM_LABEL
from ..status import RunStatus
from ..worker.outcomes import ScoreOutcome
from .result import BenchResult

RANDOM_NOTE = f"perplexity is meaningless on random weights ({RANDOM_LABEL})"


@dataclass
class QualityRow:
    backend: str
    dtype: str = ""
    perplexity: float | None = None
    nll_sum: float | None = None
    scored_tokens: int = 0
    windows: int = 0
    method: str = ""
    score_s: float | None = None
    reference: str = ""
    ppl_diff: float | None = None  # perplexity - the reference's
    ppl_diff_pct: float | None = None
    decode_tok_s: float | None = None  # median of measured runs
    # the median's interval (order statistics), its exact level and the runs, as summary.csv's
    # median_ci_* and n (both from results.stats.summarize)
    decode_tok_s_median_ci_low: float | None = None
    decode_tok_s_median_ci_high: float | None = None
    decode_tok_s_median_ci_level: float | None = None
    decode_tok_s_n: int = 0
    agree_tokens: int | None = None
    compared_tokens: int | None = None
    agree_share: float | None = None
    identical_share: float | None = None
    first_divergence: int | None = None
    status: RunStatus = RunStatus.OK
    error: str = ""
    note: str = ""


QUALITY_COLUMNS = list(QualityRow.__dataclass_fields__)


@dataclass
class Divergence:
    backend: str
    reference: str
    run_id: str
    position: int  # index among the generated tokens
    prompt_tokens: int
    reference_token: dict
    token: dict
    reference_top: list[dict] = field(default_factory=list)
    top: list[dict] = field(default_factory=list)
    error: str = ""


@dataclass
class QualityResult:
    rows: list[QualityRow]
    divergences: list[Divergence]
    info: dict  # environment.json's "quality" section


def all_greedy(runs: Sequence[RunRecord]) -> bool:
    """Token streams are comparable (and divergence logits meaningful) only without sampling."""
    return all(r.decoding == "greedy" for r in runs if r.status == RunStatus.OK)


def perplexity(nll_sum: float, tokens: int) -> float:
    """exp(mean NLL); inf past the float range (a broken engine's huge logits), where math.exp would
    raise and lose every engine's row."""
    try:
        return math.exp(nll_sum / tokens)
    except OverflowError:
        return math.inf


def quality_rows(
    result: BenchResult, reference: str, scores: dict[str, ScoreOutcome], windows: int, cancelled: bool
) -> list[QualityRow]:
    """One row per selected backend: perplexity, its difference to the reference, speed, agreement."""
    streams = least_agreeing_streams(result.runs, result.tokens, reference)
    ref_stream = streams.get(reference)
    greedy = all_greedy(result.runs)
    rows = []
    for name in result.config.backends:
        row = QualityRow(name, reference=reference, windows=windows)
        mine = runs_of(result.runs, name)
        row.dtype = next((r.dtype for r in mine if r.dtype), "")
        _set_speed(row, summarize([r.decode_tok_s for r in mine if not r.is_warmup and r.status == RunStatus.OK]))
        outcome = scores.get(name)
        if outcome is None:
            failed = next((r for r in mine if r.status.is_failure), None)
            row.status = failed.status if failed else (RunStatus.CANCELLED if cancelled else RunStatus.ERROR)
            row.error = failed.error if failed else "not scored"
        else:
            row.status, row.error = outcome.status, outcome.error
            done = outcome.done
            if done is not None and done.tokens and not done.cancelled:
                row.nll_sum, row.scored_tokens = done.nll_sum, done.tokens
                row.method, row.score_s = done.method, done.seconds
                row.perplexity = perplexity(done.nll_sum, done.tokens)
        if greedy and ref_stream is not None and name in streams:
            detail = agreement_detail(ref_stream[1], streams[name][1])
            row.agree_tokens, row.first_divergence = detail.agree_tokens, detail.first_divergence
            row.compared_tokens = detail.compared
            row.agree_share, row.identical_share = detail.agree_share, detail.identical_share
        if result.model.is_random:
            row.note = RANDOM_NOTE
        rows.append(row)
    ref_row = next((r for r in rows if r.backend == reference), None)
    for row in rows:
        if ref_row is not None and ref_row.perplexity and row.perplexity is not None:
            row.ppl_diff = row.perplexity - ref_row.perplexity
            row.ppl_diff_pct = 100 * row.ppl_diff / ref_row.perplexity
    return rows


def _set_speed(row: QualityRow, speed: Summary) -> None:
    """The median decode tokens/s with its interval, level and n, as summary.csv writes them (NaN: empty)."""
    row.decode_tok_s_n = speed.n
    row.decode_tok_s = finite(speed.median)
    row.decode_tok_s_median_ci_low = finite(speed.median_ci_low)
    row.decode_tok_s_median_ci_high = finite(speed.median_ci_high)
    row.decode_tok_s_median_ci_level = finite(speed.median_ci_level)


def ppl_change_text(backend: str, reference: str, diff: float | None, diff_pct: float | None) -> str:
    """The perplexity change as every quality table shows it (terminal, window, report): absolute
    and relative, both signed, so a rise never reads as a bare number."""
    if backend == reference:
        return "reference"
    if diff is None or diff_pct is None:
        return "-"
    return f"{diff:+.3f} ({diff_pct:+.2f}%)"


def quality_rows_as_dicts(rows: Sequence[QualityRow]) -> list[dict]:
    return [asdict(r) for r in rows]
