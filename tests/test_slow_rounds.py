"""A round where most engines ran slow at once is named as the machine's slow phase, on scripted records."""

from dataclasses import replace

from whistle_stop.backends.report.verdict_html import verdict_html
from whistle_stop.backends.results.slow_rounds import SLOW_RATIO, slow_rounds
from whistle_stop.backends.results.verdict import CaveatKind, verdict

from .run_records import ROUND_ENGINES as ENGINES
from .run_records import rounds


def test_a_round_where_most_engines_are_slow_is_named_with_each_ones_ratio():
    [found] = slow_rounds(rounds({2: ("hf", "native", "onnx")}))
    assert found.repeat == 2 and found.engines == 4
    assert {s.backend for s in found.slow} == {"hf", "native", "onnx"}
    assert all(1.9 < s.ratio < 2.1 for s in found.slow)
    assert found.text.startswith("repeat 2: 3 of 4 engines")


def test_one_slow_engine_or_a_small_slowdown_is_the_engines_own_noise():
    assert slow_rounds(rounds({2: ("hf",), 4: ("native", "onnx")})) == []  # 1 of 4, then 2 of 4 but MIN_ENGINES 3
    assert slow_rounds(rounds({2: ENGINES}, factor=SLOW_RATIO * 0.95)) == []


def test_decode_counts_as_well_as_the_first_token():
    runs = [replace(r, itl_p50_ms=6.0, tpot_ms=6.0, ms_per_token=6.0) if r.repeat == 3 else r for r in rounds({})]
    [found] = slow_rounds(runs)
    assert found.repeat == 3 and len(found.slow) == 4 and 2.9 < found.slow[0].ratio < 3.1


def test_warm_ups_races_and_short_series_have_no_rounds():
    slow = {1: ENGINES}
    assert slow_rounds([replace(r, is_warmup=True) for r in rounds(slow)]) == []
    assert slow_rounds([replace(r, concurrent=True) for r in rounds(slow)]) == []
    assert slow_rounds([r for r in rounds(slow) if r.repeat <= 2]) == []  # a median of 2 is no yardstick


def test_a_sweep_names_the_cell_and_judges_each_cell_by_its_own_medians():
    runs = rounds({3: ENGINES}, prompt=8) + [replace(r, ttft_ms=r.ttft_ms * 50) for r in rounds({}, prompt=512)]
    [found] = slow_rounds(runs)
    assert found.repeat == 3 and found.cell == "8+20 tokens" and "repeat 3 of 8+20 tokens" in found.text


def test_the_verdict_carries_it_as_a_caveat_and_keeps_the_medians():
    runs = rounds({1: ("hf", "native", "onnx")}, factor=3.0)
    result = verdict(runs, reference="hf")
    caveat = result.caveat(CaveatKind.SLOW_ROUND)
    assert caveat is not None and "slow phase of the machine" in caveat.text and "repeat 1: 3 of 4" in caveat.text
    assert result.engines["native"].runs == 5  # nothing dropped
    assert "repeat 1: 3 of 4" in verdict_html(result)  # what the window's Summary and the HTML report show
    assert verdict(rounds({}), reference="hf").caveat(CaveatKind.SLOW_ROUND) is None
    # a profile runs each engine's repeats alone, one engine after another: repeat 1 is no round
    assert verdict(runs, reference="hf", interleaved=False).caveat(CaveatKind.SLOW_ROUND) is None
