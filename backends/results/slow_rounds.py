"""Rounds of the fair order in which most engines ran slower than their own median: a slow phase
of the machine, not of any one engine.

On a shared machine (a cloud VM's neighbours on the same cores, caches and memory) the whole
machine computes slower for tens of seconds now and then. The fair order interleaves the engines
round by round, so such a phase lands on the engines of one or two rounds, which shows in the
records as one round where most engines are slow at once. Nothing is dropped: the medians hold,
and the verdict names the round so the wide intervals it causes are not read as the engines' own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .records import RunRecord
from .stats import summarize
from .summary import is_measured

SLOW_RATIO = 1.25  # a run this many times its engine's own median (TTFT or ms/token) is slow
MIN_ENGINES = 3  # fewer engines in a round cannot tell a machine's phase from an engine's noise
MIN_REPEATS = 3  # a median of fewer runs is no yardstick for one of them
_METRICS = ("ttft_ms", "ms_per_token")


@dataclass(frozen=True)
class SlowRun:
    backend: str
    ratio: float  # the larger of TTFT / its median and ms/token / its median


@dataclass(frozen=True)
class SlowRound:
    """One round (a repeat of every engine, in the fair order) where at least half the engines
    ran slow at once."""

    repeat: int
    engines: int  # engines measured in this round
    slow: tuple[SlowRun, ...]  # slowest first
    cell: str = ""  # "50+200 tokens" where the records hold several prompt and output lengths (a sweep)

    @property
    def text(self) -> str:
        ratios = [s.ratio for s in self.slow]
        names = ", ".join(s.backend for s in self.slow)
        where = f"repeat {self.repeat}" + (f" of {self.cell}" if self.cell else "")
        return (
            f"{where}: {len(self.slow)} of {self.engines} engines ({names}) ran at "
            f"{min(ratios):.2f}-{max(ratios):.2f}x their own median TTFT or ms/token at once"
        )


def slow_rounds(runs: Sequence[RunRecord]) -> list[SlowRound]:
    """The fair rounds in which at least half the engines (and MIN_ENGINES) each ran at SLOW_RATIO
    or more of their own median, in repeat order. Race-mode records have no rounds; engines with
    fewer than MIN_REPEATS measured runs take no part."""
    measured = [r for r in runs if is_measured(r) and not r.concurrent]
    by_engine: dict[tuple[str, int, int], list[RunRecord]] = {}  # (engine, prompt, output length)
    for run in measured:
        by_engine.setdefault((run.backend, run.prompt_tokens, run.new_tokens), []).append(run)
    cells = {key[1:] for key in by_engine}
    ratios: dict[tuple[int, int, int], dict[str, float]] = {}  # (prompt, output, repeat) -> engine -> ratio
    for (name, prompt, output), mine in by_engine.items():
        if len({r.repeat for r in mine}) < MIN_REPEATS:
            continue
        # each engine's own medians, as its summary row computes them (stats.summarize)
        medians = {metric: summarize([getattr(r, metric) for r in mine]).median for metric in _METRICS}
        for run in mine:
            known = [r for m, median in medians.items() if (r := _ratio(getattr(run, m), median)) is not None]
            if known:
                ratios.setdefault((prompt, output, run.repeat), {})[name] = max(known)
    out = []
    for prompt, output, repeat in sorted(ratios):
        engines = ratios[(prompt, output, repeat)]
        slow = sorted((SlowRun(n, r) for n, r in engines.items() if r >= SLOW_RATIO), key=lambda s: -s.ratio)
        if len(engines) >= MIN_ENGINES and len(slow) >= max(MIN_ENGINES, (len(engines) + 1) // 2):
            label = f"{prompt}+{output} tokens" if len(cells) > 1 else ""
            out.append(SlowRound(repeat, len(engines), tuple(slow), label))
    return out


def _ratio(value: float | None, median: float) -> float | None:
    """value / median, None where either is missing (a metric a run or an engine does not have)."""
    return value / median if value is not None and median > 0 else None
