"""How far each engine's tokens follow the reference engine's: per run, and in detail."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..status import RunStatus
from .records import RunRecord, TokenRecord, runs_of
from .stats import agreement


def fill_agreement(runs: Sequence[RunRecord], tokens: Sequence[TokenRecord], reference: str) -> None:
    """Set `reference`, `agree_tokens` and `first_divergence` of every run that has tokens,
    against the reference engine's first complete run of the same cell (a bench has one cell;
    a sweep compares like with like)."""
    by_run: dict[str, list[int]] = {}
    for token in tokens:
        by_run.setdefault(token.run_id, []).append(token.token_id)
    cells: dict[tuple[int, int], list[RunRecord]] = {}
    for record in runs:
        cells.setdefault((record.prompt_tokens, record.new_tokens), []).append(record)
    for records in cells.values():
        ref_runs = [r for r in runs_of(records, reference) if r.status == RunStatus.OK]
        ref_runs.sort(key=lambda r: (r.is_warmup, r.repeat))  # measured runs first
        if not ref_runs:
            continue
        ref_tokens = by_run.get(ref_runs[0].run_id, [])
        for record in records:
            if record.run_id in by_run:
                record.reference = reference
                record.agree_tokens, record.first_divergence = agreement(ref_tokens, by_run[record.run_id])


@dataclass(frozen=True)
class AgreementDetail:
    agree_tokens: int  # equal tokens before the first divergence
    first_divergence: int | None
    compared: int  # reference length
    agree_share: float  # agree_tokens / compared: the share generated before the outputs part
    identical_share: float  # positions holding the same token (after a divergence, mostly chance)


def agreement_detail(reference: Sequence[int], tokens: Sequence[int]) -> AgreementDetail:
    agree, first = agreement(reference, tokens)
    n = len(reference)
    same = sum(1 for a, b in zip(reference, tokens) if a == b)
    return AgreementDetail(agree, first, n, agree / n if n else math.nan, same / n if n else math.nan)


def _streamed_runs(runs: Sequence[RunRecord], tokens: Sequence[TokenRecord]) -> tuple[list[RunRecord], dict]:
    """The complete runs that have tokens, measured ones first, and each run's token ids in order."""
    by_run: dict[str, list[int]] = {}
    for t in sorted(tokens, key=lambda t: t.token_index):
        by_run.setdefault(t.run_id, []).append(t.token_id)
    ok = sorted(
        (r for r in runs if r.status == RunStatus.OK and r.run_id in by_run), key=lambda r: (r.is_warmup, r.repeat)
    )
    return ok, by_run


def first_cell(runs: Sequence[RunRecord], tokens: Sequence[TokenRecord]) -> tuple[int, int] | None:
    """The reference cell: the prompt/new-token setting of the first measured complete run with
    tokens (a bench has one cell; a sweep folder several, whose runs are no repeats of each other)."""
    ok, _ = _streamed_runs(runs, tokens)
    return (ok[0].prompt_tokens, ok[0].new_tokens) if ok else None


def least_agreeing_streams(
    runs: Sequence[RunRecord], tokens: Sequence[TokenRecord], reference: str
) -> dict[str, tuple[RunRecord, list[int]]]:
    """Each backend's stream in the reference cell (`first_cell`): the reference's first measured run and,
    for every other backend, its measured run that agrees with that one least (the summary's and the
    verdict's agreement is the smallest over the measured runs, so the quality table's detail comes
    from that same run). Warm-ups stand in where a backend has no measured run."""
    ok, by_run = _streamed_runs(runs, tokens)
    if not ok:
        return {}
    cell = (ok[0].prompt_tokens, ok[0].new_tokens)
    pools: dict[str, list[RunRecord]] = {}
    for r in ok:  # measured runs first: a pool is its backend's measured runs, or its warm-ups if none
        if (r.prompt_tokens, r.new_tokens) == cell:
            pools.setdefault(r.backend, []).append(r)
    pools = {name: [r for r in pool if r.is_warmup == pool[0].is_warmup] for name, pool in pools.items()}
    ref = by_run[pools[reference][0].run_id] if reference in pools else None
    out: dict[str, tuple[RunRecord, list[int]]] = {}
    for name, pool in pools.items():
        chosen = pool[0]
        if ref is not None and name != reference:
            chosen = min(pool, key=lambda r: agreement(ref, by_run[r.run_id])[0])  # the first of equals
        out[name] = (chosen, by_run[chosen.run_id])
    return out
