"""`--repeats auto`: the fair order's rounds go on until every engine's median interval (of ms per
token) is narrower than the target, at the looks the rule fixes in advance (results/sequential.py),
or until --max-repeats or --max-minutes ends them."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..results.sequential import SequentialRule, Width

WIDTH_REACHED, MAX_REPEATS, MAX_MINUTES, CANCELLED = "width reached", "max repeats", "max minutes", "cancelled"


@dataclass
class AdaptiveOutcome:
    """What environment.json's `adaptive_repeats` says: the rule, why the rounds stopped, and each
    engine's repeats and interval at the last look."""

    rule: SequentialRule
    rounds: int = 0
    stopped: str = ""
    widths: dict[str, Width | None] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "target_width_pct": self.rule.target_width_pct,
            "max_repeats": self.rule.max_repeats,
            "confidence": self.rule.confidence,
            "looks": self.rule.looks,
            "per_look_confidence": self.rule.per_look_confidence,
            "rounds": self.rounds,
            "stopped": self.stopped,
            "engines": {name: (w.as_dict() if w else None) for name, w in self.widths.items()},
        }

    def lines(self) -> list[str]:
        return describe(self.as_dict())


def describe(record: dict) -> list[str]:
    """environment.json's `adaptive_repeats` as the lines bench prints and the window's verdict shows (a
    reopened session has only the record)."""
    looks = ", ".join(map(str, record.get("looks", ())))
    target = record.get("target_width_pct", 0.0)
    out = [
        f"--repeats auto: {record.get('rounds', 0)} rounds, stopped: {record.get('stopped', '')} (target {target:g}% "
        f"of the median at {record.get('confidence', 0.0):.0%} overall, {record.get('per_look_confidence', 0.0):.2%} "
        f"per look at rounds {looks})"
    ]
    for name, width in (record.get("engines") or {}).items():
        if not width:
            out.append(f"  {name}: no interval (fewer than 2 measured runs)")
            continue
        short = "" if width["width_pct"] < target else " (target not reached)"
        share = f"{width['width_pct']:.1f}% of its median"
        out.append(f"  {name}: {width['repeats']} repeats, median interval {share}{short}")
    return out


def run_until_sure(
    rule: SequentialRule,
    max_minutes: float,
    run_round: Callable[[int], bool],
    values: Callable[[], dict[str, list[float]]],
    clock: Callable[[], float] = time.monotonic,
) -> AdaptiveOutcome:
    """Run rounds 1, 2, ... (`run_round(repeat)`: False when cancelled) and look at the rule's round
    counts. `values()`: each engine's measured ms per token so far."""
    outcome = AdaptiveOutcome(rule)
    looks = set(rule.looks)
    deadline = clock() + 60.0 * max_minutes
    for repeat in range(1, rule.max_repeats + 1):
        if clock() >= deadline:
            outcome.stopped = MAX_MINUTES
            break
        if not run_round(repeat):
            outcome.stopped = CANCELLED
            break
        outcome.rounds = repeat
        if repeat in looks:
            outcome.widths = {name: rule.width(v) for name, v in values().items()}
            if rule.narrow(outcome.widths):
                outcome.stopped = WIDTH_REACHED
                return outcome
    else:
        outcome.stopped = MAX_REPEATS
    # the budget's or the cap's look: its own share of alpha (sequential.py)
    outcome.widths = {name: rule.width(v) for name, v in values().items()}
    return outcome
