"""--repeats auto: the rule's looks and level, the stops (width, budget), and its coverage by simulation."""

from __future__ import annotations

import random

import pytest

from whistle_stop.backends.cli.main import main
from whistle_stop.backends.results.sequential import SequentialRule, look_schedule
from whistle_stop.backends.results.stats import median_interval
from whistle_stop.backends.runs.adaptive import MAX_MINUTES, MAX_REPEATS, WIDTH_REACHED, run_until_sure


class ScriptedEngine:
    """ms/token around `median` with noise `spread` (a lognormal's sigma), one value per round."""

    def __init__(self, median: float, spread: float, seed: int) -> None:
        self.rng = random.Random(seed)
        self.median, self.spread = median, spread
        self.values: list[float] = []

    def run(self, _repeat: int) -> bool:
        self.values.append(self.median * self.rng.lognormvariate(0, self.spread))
        return True


class FakeClock:
    def __init__(self, per_round_s: float) -> None:
        self.now, self.per_round_s = 0.0, per_round_s

    def __call__(self) -> float:
        return self.now


def _run(engine: ScriptedEngine, rule: SequentialRule, minutes: float = 1e9, clock: FakeClock | None = None):
    clock = clock or FakeClock(0.0)

    def round_(repeat: int) -> bool:
        clock.now += clock.per_round_s
        return engine.run(repeat)

    return run_until_sure(rule, minutes, round_, lambda: {"e": engine.values}, clock)


def test_the_looks_are_fixed_in_advance_and_reach_their_level():
    looks = look_schedule(40)
    assert looks[-1] == 40 and looks == sorted(set(looks))
    rule = SequentialRule(5.0, 40)
    assert rule.per_look_confidence == pytest.approx(1 - 0.05 / (len(looks) + 1))
    assert 1 - 2 / 2 ** looks[0] >= rule.per_look_confidence  # the first look's min..max already reaches it


def test_stops_when_the_width_is_reached():
    outcome = _run(ScriptedEngine(10.0, 0.005, seed=1), SequentialRule(5.0, 40))
    assert outcome.stopped == WIDTH_REACHED
    assert outcome.rounds == SequentialRule(5.0, 40).looks[0]
    assert outcome.widths["e"].width_pct < 5.0


def test_stops_at_max_repeats_when_too_noisy():
    outcome = _run(ScriptedEngine(10.0, 0.5, seed=2), SequentialRule(1.0, 20))
    assert outcome.stopped == MAX_REPEATS and outcome.rounds == 20
    assert outcome.widths["e"].width_pct >= 1.0
    assert any("20 repeats" in line for line in outcome.lines())


def test_stops_at_the_time_budget():
    outcome = _run(ScriptedEngine(10.0, 0.5, seed=3), SequentialRule(1.0, 40), minutes=1.0, clock=FakeClock(6.0))
    assert outcome.stopped == MAX_MINUTES and outcome.rounds == 10  # 10 rounds of 6 s fill the minute
    assert outcome.widths["e"].runs == 10


def test_coverage_holds_under_optional_stopping():
    """Over many seeds, the interval reported where the rule stopped covers the true median at least
    95% of the time (here ~99%: Bonferroni is conservative); the naive rule, a 95% interval read
    after every round, misses more often (~5%, and more the more it looks)."""
    seeds, missed, naive_missed = 600, 0, 0
    rule = SequentialRule(8.0, 30)
    for seed in range(seeds):
        engine = ScriptedEngine(1.0, 0.1, seed)
        w = _run(engine, rule).widths["e"]
        missed += not (w.low <= 1.0 <= w.high)
        # naive: stop at the first round whose plain 95% interval is narrow enough
        naive = ScriptedEngine(1.0, 0.1, seed + 10_000)
        plain = SequentialRule(8.0, 30, confidence=0.95)
        for _ in range(30):
            naive.run(0)
            if len(naive.values) >= 6:
                low, high, _ = median_interval(sorted(naive.values), 0.95)
                if 100 * (high - low) < 8.0 * plain.width(naive.values).median:
                    break
        naive_missed += not (low <= 1.0 <= high)
    assert missed / seeds <= 0.05
    assert naive_missed > missed  # why the rule exists


def test_repeats_auto_is_refused_where_it_cannot_run(capsys):
    assert main(["bench", "--model", "random:tiny", "--repeats", "auto", "--mode", "race"]) == 2
    assert "fair mode" in capsys.readouterr().err
    assert main(["bench", "--model", "random:tiny", "--repeats", "auto", "--target-width", "0"]) == 2
    assert main(["bench", "--repeats", "many"]) == 2
