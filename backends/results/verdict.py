"""Which engine to use: the one verdict the CLI, the window's Summary, the HTML report and the
Markdown copy all show.

It ranks the engines by median ms/token (decode: the median across runs of each run's median
ITL), overall and within each precision, and names a winner only where the data supports one:
when the leader's speed-up interval overlaps the next engine's, the verdict says they are not
distinguishable at this many repeats. Beside each pick it says what the speed costs (agreement
with the reference, the perplexity change where a quality run exists), its peak memory, its
cold start and its one-time build, and then every caveat that limits what the numbers say.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from ..families import PrecisionGroup, engine_precision, precision_group
from .machine_state import flagged_caveat
from .records import RunRecord, runs_of
from .slow_rounds import SlowRound, slow_rounds
from .speedup import Ratio, speedup
from .stats import Summary
from .summary import BackendSummary, interval_label, summarize_backends

OVERALL = "overall"
MIN_REPEATS = 3


class CaveatKind(str, Enum):
    RANDOM_WEIGHTS = "random weights"
    CONTENDED = "contended"
    SLOW_ROUND = "slow round"
    BUSY_MACHINE = "busy machine"
    OVERLAP = "overlap"
    FAILED = "failed"
    ONE_PRECISION = "one precision"
    FEW_REPEATS = "few repeats"
    NO_WARMUP = "no warm-up"
    NO_REFERENCE = "no reference"
    NOT_COMPARABLE = "not comparable"
    NOTHING_TO_COMPARE = "nothing to compare"


@dataclass(frozen=True)
class Caveat:
    kind: CaveatKind
    text: str


@dataclass(frozen=True)
class EngineFinding:
    """What the verdict says about one ranked engine."""

    name: str
    group: PrecisionGroup
    ms_per_token: Summary
    speedup: Ratio | None  # over the reference (None: no paired run of both)
    agree_tokens: int | None
    new_tokens: int
    ppl_diff_pct: float | None  # perplexity change vs the reference, from a quality run
    peak_rss_mb: float | None
    load_peak_rss_mb: float | None
    cold_start_s: float | None
    build_s: float | None
    runs: int


@dataclass(frozen=True)
class Pick:
    """The fastest engine of a scope ("overall" or a precision group), or the engines it cannot
    tell apart from it (their intervals overlap the leader's)."""

    scope: str
    leaders: tuple[str, ...]
    only: bool = False  # the one engine of its scope

    @property
    def distinguishable(self) -> bool:
        return len(self.leaders) == 1


@dataclass(frozen=True)
class Verdict:
    reference: str
    engines: dict[str, EngineFinding]
    picks: tuple[Pick, ...]
    caveats: tuple[Caveat, ...]
    random_weights: bool = False

    @property
    def repeats(self) -> int:
        return min((f.runs for f in self.engines.values()), default=0)

    def pick(self, scope: str) -> Pick | None:
        return next((p for p in self.picks if p.scope == scope), None)

    def caveat(self, kind: CaveatKind) -> Caveat | None:
        return next((c for c in self.caveats if c.kind == kind), None)

    def lines(self) -> list[str]:
        """The verdict as plain text, one finding a line (what every view shows)."""
        out = [self._headline()]
        described: set[str] = set()
        overall = self.pick(OVERALL)
        for pick in self.picks:
            if pick.scope != OVERALL and overall is not None and pick.leaders == overall.leaders:
                if overall.distinguishable:
                    out.append(f"- {pick.scope}: {pick.leaders[0]} (the fastest overall)")
                else:
                    runs = min(self.engines[n].runs for n in pick.leaders)
                    out.append(
                        f"- {pick.scope}: {_join(list(pick.leaders))}, as overall (not distinguishable at "
                        f"{runs} repeat{'s' if runs != 1 else ''})"
                    )
                continue
            out.append("- " + self._pick_line(pick))
            for name in pick.leaders:
                if name not in described:
                    described.add(name)
                    facts = self._facts(name)
                    if facts:
                        out.append(f"  - {name}: {facts}")
        if self.caveats:
            out.append("Caveats:")
            out += [f"- {c.text}" for c in self.caveats]
        return out

    def text(self) -> str:
        return "\n".join(self.lines())

    def markdown(self) -> str:
        """The same lines as Markdown: a heading, the headline, the findings and caveats as lists."""
        lines = self.lines()
        out = ["### Verdict", "", lines[0], ""]
        for line in lines[1:]:
            out += ["", line, ""] if line == "Caveats:" else [line]
        return "\n".join(out) + "\n"

    # --- wording ------------------------------------------------------------------------------
    def _headline(self) -> str:
        if not self.engines:
            return "Verdict: no engine finished a measured run, so there is nothing to recommend."
        runs = sorted({f.runs for f in self.engines.values()})
        count = f"{runs[0]}" if len(runs) == 1 else f"{runs[0]}-{runs[-1]}"
        text = f"Verdict (ms/token: decode, median of {count} measured runs"
        if self.reference and any(f.speedup for f in self.engines.values() if f.name != self.reference):
            level = self._speedup_levels()
            text += (
                f"; speed-up over {self.reference}: median of the per-repeat ratios, [interval] "
                f"distribution-free" + (f" at {level}" if level else "")
            )
        return text + "):"

    def _speedup_levels(self) -> str:
        """The true level of the speed-ups' intervals shown: of their pairs (repeats where both the
        engine and the reference finished), which are fewer than either's runs where each lost another."""
        shown = [f.speedup for f in self.engines.values() if f.speedup and f.name != self.reference]
        pairs = sorted({ratio.n for ratio in shown if ratio.n > 1})
        if len(pairs) == 1:
            return interval_label(pairs[0])
        return ", ".join(f"{n} pairs: {interval_label(n)}" for n in pairs)

    def _number(self, name: str, beside_reference: bool = False) -> str:
        """`beside_reference`: the line already says the reference cannot be told apart from it."""
        f = self.engines[name]
        text = f"{f.ms_per_token.median:.2f} ms/token"
        if f.speedup is not None and name != self.reference:
            ratio = f.speedup
            interval = f" [{ratio.low:.2f}–{ratio.high:.2f}]" if ratio.has_interval else ""
            text += f", {ratio.median:.2f}x as fast as {self.reference}{interval}"
            # a repeat went the other way: the interval holds 1
            if ratio.has_interval and ratio.low <= 1.0 <= ratio.high and not beside_reference:
                text += f", not distinguishable from {self.reference} at {ratio.n} repeat{'s' if ratio.n != 1 else ''}"
        elif name == self.reference:
            text += " (the reference)"
        return text

    def _pick_line(self, pick: Pick) -> str:
        scope = "Fastest overall" if pick.scope == OVERALL else f"{pick.scope}"
        if pick.distinguishable:
            name = pick.leaders[0]
            only = " (the only one)" if pick.only else ""
            return f"{scope}: {name}{only} at {self._number(name)}"
        runs = min(self.engines[n].runs for n in pick.leaders)
        names = [f"{n} ({self._number(n, self.reference in pick.leaders)})" for n in pick.leaders]
        return f"{scope}: not distinguishable at {runs} repeat{'s' if runs != 1 else ''}: {_join(names)}"

    def _facts(self, name: str) -> str:
        """The pick's cost: agreement, perplexity change, memory, cold start and first build."""
        f = self.engines[name]
        parts = []
        if name != self.reference and self.reference:
            if f.agree_tokens is not None:
                parts.append(
                    f"agrees with {self.reference} on {f.agree_tokens} of {f.new_tokens} tokens "
                    "before the first divergence"
                )
            if f.ppl_diff_pct is not None and not self.random_weights:
                parts.append(f"perplexity {f.ppl_diff_pct:+.2f}% vs {self.reference}")
        if f.peak_rss_mb is not None:
            load = f" ({f.load_peak_rss_mb:.0f} at load)" if f.load_peak_rss_mb is not None else ""
            parts.append(f"peak RSS {f.peak_rss_mb:.0f} MB{load}")
        if f.cold_start_s is not None:
            parts.append(f"cold start {f.cold_start_s:.2f} s")
        if f.build_s:
            parts.append(f"one-time build {f.build_s:.2f} s")
        return "; ".join(parts)


def verdict(
    runs: Sequence[RunRecord],
    backends: Sequence[str] | None = None,
    reference: str | None = None,
    quality: Sequence[dict] | None = None,
    interleaved: bool = True,
) -> Verdict:
    """The verdict over one session's records (a bench, the window's session, a report's folder).

    `reference`: the engine speed-ups and agreement are measured against (default: the one the
    records name); `quality`: quality.csv's rows (runs.quality_files.read_quality), whose
    perplexity change vs the reference is shown beside each pick; `interleaved`: False for a
    profile's records, which ran each engine's repeats alone, one engine after another: its
    repeats are no rounds, so no round is called a slow phase of the machine."""
    runs = list(runs)
    summaries = summarize_backends(runs, list(backends) if backends else None)
    reference = reference or next((r.reference for r in runs if r.reference), "")
    random_weights = any(r.weights == "random" for r in runs)
    ppl = {
        row.get("backend"): row.get("ppl_diff_pct")
        for row in quality or ()  # against this reference only
        if row.get("ppl_diff_pct") is not None
        and math.isfinite(row["ppl_diff_pct"])
        and row.get("reference") in (None, "", reference)
    }
    ranked = [s for s in summaries if s.runs > 0 and s.ms_per_token.n > 0 and s.comparable]
    reference_measured = any(s.backend == reference for s in ranked)
    engines = {s.backend: _finding(s, runs, reference if reference_measured else "", ppl) for s in ranked}
    order = sorted(engines.values(), key=lambda f: f.ms_per_token.median)
    picks: list[Pick] = []
    tied: dict[tuple[str, ...], list[str]] = {}  # leaders -> the scopes they tie in
    scopes = [(OVERALL, order)] + [(g.value, [f for f in order if f.group == g]) for g in PrecisionGroup]
    for scope, members in scopes:
        if not members:
            continue
        pick = _pick(scope, members)
        picks.append(pick)
        if not pick.distinguishable:
            tied.setdefault(pick.leaders, []).append(scope)
    overlaps = [f"{_join(list(leaders))} ({', '.join(scopes)})" for leaders, scopes in tied.items()]
    caveats = _caveats(
        summaries,
        engines,
        reference,
        reference_measured,
        random_weights,
        overlaps,
        [s for s in summaries if s.runs > 0 and not s.comparable],
        slow_rounds(runs) if interleaved else [],
        [name for name in engines if not any(r.is_warmup for r in runs_of(runs, name))],
    )
    busy = flagged_caveat([r for r in runs if r.backend in engines])
    if busy:  # beside the slow rounds: both say the machine, not an engine, was slow
        caveats.insert(
            next((i + 1 for i, c in enumerate(caveats) if c.kind == CaveatKind.SLOW_ROUND), len(caveats)),
            Caveat(CaveatKind.BUSY_MACHINE, busy),
        )
    return Verdict(reference if reference_measured else "", engines, tuple(picks), tuple(caveats), random_weights)


def _finding(s: BackendSummary, runs: Sequence[RunRecord], reference: str, ppl: dict) -> EngineFinding:
    group = precision_group(engine_precision(s.backend, s.dtype))
    ratio = speedup(runs, s.backend, reference) if reference else None
    return EngineFinding(
        s.backend,
        group,
        s.ms_per_token,
        ratio,
        s.agree_tokens,
        s.new_tokens,
        ppl.get(s.backend),
        s.peak_rss_mb,
        s.load_peak_rss_mb,
        s.cold_start_s,
        s.build_s,
        s.runs,
    )


def _pick(scope: str, members: list[EngineFinding]) -> Pick:
    """The fastest, with every engine whose interval overlaps its own (the speed-ups' when both
    have one, else ms/token's): the data cannot tell those apart."""
    leader = members[0]
    if len(members) == 1:
        return Pick(scope, (leader.name,), only=True)
    tied = [m.name for m in members[1:] if _overlap(leader, m)]
    return Pick(scope, (leader.name, *tied))


def _overlap(a: EngineFinding, b: EngineFinding) -> bool:
    if a.speedup is not None and b.speedup is not None:
        return a.speedup.overlaps(b.speedup)
    x, y = a.ms_per_token, b.ms_per_token
    if x.n < 2 or y.n < 2 or math.isnan(x.median_ci_low) or math.isnan(y.median_ci_low):
        return True  # no interval: nothing tells them apart
    return x.median_ci_low <= y.median_ci_high and y.median_ci_low <= x.median_ci_high


def _caveats(
    summaries: list[BackendSummary],
    engines: dict[str, EngineFinding],
    reference: str,
    reference_measured: bool,
    random_weights: bool,
    overlaps: list[str],
    not_comparable: list[BackendSummary],
    slow: list[SlowRound],
    unwarmed: list[str],
) -> list[Caveat]:
    out = []
    if random_weights:
        out.append(
            Caveat(
                CaveatKind.RANDOM_WEIGHTS,
                "random weights - timing only: agreement (and perplexity) say "
                "nothing about quality here; use a real model (--model gpt2) for that",
            )
        )
    if any(s.concurrent for s in summaries):
        out.append(
            Caveat(
                CaveatKind.CONTENDED,
                "race mode: the engines ran at the same time and shared the CPU, "
                "so these timings are contended; run them in fair mode to compare",
            )
        )
    if slow:
        out.append(
            Caveat(
                CaveatKind.SLOW_ROUND,
                "a slow phase of the machine (most engines slow in the same round, not one engine's noise): "
                + "; ".join(r.text for r in slow)
                + ". The medians hold; those engines' intervals reach higher than their own noise would "
                "(a quieter machine, or more --repeats, narrows them)",
            )
        )
    if overlaps:
        repeats = min((f.runs for f in engines.values()), default=0)
        out.append(
            Caveat(
                CaveatKind.OVERLAP,
                "overlapping intervals: " + "; ".join(overlaps) + f" cannot be told "
                f"apart at {repeats} repeat{'s' if repeats != 1 else ''} (more --repeats may separate them)",
            )
        )
    failed = [s for s in summaries if s.status.is_failure]
    if failed:
        out.append(Caveat(CaveatKind.FAILED, "failed: " + "; ".join(_failure(s) for s in failed)))
    if len(engines) == 1 and len([s for s in summaries if s.runs > 0]) <= 1:
        out.append(Caveat(CaveatKind.NOTHING_TO_COMPARE, "only one engine finished: nothing to compare it with"))
    groups = sorted({f.group.value for f in engines.values()})
    if len(engines) > 1 and len(groups) == 1:
        out.append(
            Caveat(
                CaveatKind.ONE_PRECISION,
                f"only one precision ran ({groups[0]}): this says nothing about "
                "what another precision would buy (--preset one-per-precision compares them)",
            )
        )
    few = min((f.runs for f in engines.values()), default=MIN_REPEATS)
    if few < MIN_REPEATS:
        level = interval_label(few)
        out.append(
            Caveat(
                CaveatKind.FEW_REPEATS,
                f"fewer than {MIN_REPEATS} repeats ({few}): "
                + (f"the intervals are only {level}" if level else "no interval at all")
                + "; use --repeats 5 or more",
            )
        )
    if unwarmed:
        out.append(
            Caveat(
                CaveatKind.NO_WARMUP,
                f"no warm-up run for {', '.join(unwarmed)}: a first measured run carries its first-call costs "
                "(a compile, the caches' first fill) into the medians (--warmup 1 or more)",
            )
        )
    if reference and not reference_measured and engines:
        out.append(Caveat(CaveatKind.NO_REFERENCE, f"no speed-ups: the reference {reference} has no measured run"))
    for s in not_comparable:
        out.append(
            Caveat(
                CaveatKind.NOT_COMPARABLE,
                f"not ranked: {s.backend} samples in its own code, so its sampled timings are not comparable",
            )
        )
    return out


def _failure(s: BackendSummary) -> str:
    error = s.error.splitlines()[0][:90] if s.error else ""
    kept = f", {s.runs} measured run{'s' if s.runs != 1 else ''} kept" if s.runs else ""
    return f"{s.backend} ({s.status.value}{': ' + error if error else ''}{kept})"


def _join(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
