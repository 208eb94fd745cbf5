"""The verdict on scripted records: who is fastest, when the data cannot tell, and every caveat."""

import pytest

from whistle_stop.backends import registry
from whistle_stop.backends.results.speedup import speedup
from whistle_stop.backends.results.verdict import OVERALL, CaveatKind, verdict
from whistle_stop.backends.status import RunStatus

from .run_records import run_record


def _run(
    backend,
    repeat,
    itl,
    dtype="fp32",
    status="ok",
    weights="real",
    concurrent=False,
    agree=None,
    warmup=False,
    error="",
    build_s=0.0,
    cold=None,
):
    return run_record(
        backend,
        repeat,
        itl=itl,
        run_id=f"{backend}/{'w' if warmup else 'r'}{repeat}",
        weights=weights,
        dtype=dtype,
        is_warmup=warmup,
        status=status,
        error=error,
        reference="hf",
        agree_tokens=agree,
        concurrent=concurrent,
        build_s=build_s,
        cold_start_s=cold,
        load_peak_rss_mb=120.0,
    )


def _engine(backend, itls, **kwargs):
    return [_run(backend, i + 1, itl, **kwargs) for i, itl in enumerate(itls)]


def _session(**engines):
    """{name: (itl per repeat, dtype)} -> records; hf is the reference at 40 ms/token."""
    runs = _engine("hf", [40.0, 44.0, 42.0, 41.0, 43.0])
    for name, (itls, dtype) in engines.items():
        runs += _engine(name.replace("_", "-"), itls, dtype=dtype, agree=20 if dtype == "fp32" else 7)
    return runs


def test_a_clear_winner_is_named_with_its_paired_speed_up_and_interval():
    runs = _session(fast=([10.0, 11.0, 10.5, 10.2, 10.8], "fp32"), slow=([30.0, 31.0, 29.0, 30.5, 30.2], "fp32"))
    result = verdict(runs, reference="hf")
    overall = result.pick(OVERALL)
    assert overall.leaders == ("fast",) and overall.distinguishable
    ratio = speedup(runs, "fast", "hf")
    # repeat by repeat: 40/10, 44/11, 42/10.5, 41/10.2, 43/10.8 -> all about 4; 5 pairs: min-max at 93.8%
    assert ratio.n == 5 and ratio.median == pytest.approx(4.0) and ratio.low <= 4.0 <= ratio.high
    text = result.text()
    assert "Fastest overall: fast at 10.50 ms/token, 4.00x as fast as hf [" in text and "93.8% (min–max)" in text
    assert "agrees with hf on 20 of 20 tokens" in text and "peak RSS 100 MB (120 at load)" in text
    assert result.caveat(CaveatKind.ONE_PRECISION) is not None  # every engine here is fp32
    assert result.caveat(CaveatKind.OVERLAP) is None and result.caveat(CaveatKind.FAILED) is None


def test_overlapping_intervals_are_not_distinguishable():
    runs = _session(
        a=([10.0, 12.0, 11.0, 10.5, 11.5], "int8"),
        b=([10.8, 11.2, 11.9, 10.1, 12.2], "int8"),
        c=([20.0, 21.0, 20.5, 20.2, 20.8], "fp32"),
    )
    result = verdict(runs, reference="hf")
    overall = result.pick(OVERALL)
    assert set(overall.leaders) == {"a", "b"} and not overall.distinguishable
    assert "Fastest overall: not distinguishable at 5 repeats: a (" in result.text()
    assert result.pick("int8").leaders == overall.leaders and result.pick("fp32").leaders == ("c",)
    overlap = result.caveat(CaveatKind.OVERLAP)
    assert overlap is not None and "a and b (overall, int8)" in overlap.text


def test_failed_engines_are_named_with_their_status_and_left_out_of_the_ranking():
    runs = _session(fast=([10.0, 11.0, 10.5, 10.2, 10.8], "fp32"))
    runs.append(_run("boom", 0, None, status="error", error="load failed: no such file"))
    runs.append(_run("hang", 1, None, status="timeout"))
    result = verdict(runs, backends=["hf", "fast", "boom", "hang"], reference="hf")
    assert "boom" not in result.engines and "hang" not in result.engines
    failed = result.caveat(CaveatKind.FAILED).text
    assert "boom (error: load failed: no such file)" in failed and "hang (timeout)" in failed


def test_one_precision_few_repeats_and_random_weights_are_caveats():
    runs = [_run("hf", r, 40.0 + r, weights="random") for r in (1, 2)]
    runs += [_run("fast", r, 10.0 + r, weights="random", agree=3) for r in (1, 2)]
    result = verdict(runs, reference="hf")
    kinds = {c.kind for c in result.caveats}
    assert {CaveatKind.RANDOM_WEIGHTS, CaveatKind.ONE_PRECISION, CaveatKind.FEW_REPEATS} <= kinds
    text = result.text()
    assert "random weights - timing only" in text and "fewer than 3 repeats (2)" in text and "50.0% (min–max)" in text


def test_a_race_is_flagged_contended():
    runs = [_run(b, r, itl + r, concurrent=True) for b, itl in (("hf", 40.0), ("fast", 10.0)) for r in (1, 2, 3)]
    result = verdict(runs, reference="hf")
    assert "race mode" in result.caveat(CaveatKind.CONTENDED).text


def test_each_precision_gets_its_fastest_and_the_quality_cost_is_shown():
    runs = _session(
        native_int8=([5.0, 5.1, 5.2, 5.0, 5.3], "int8"),
        slow_int8=([9.0, 9.5, 9.2, 9.1, 9.3], "int8"),
        half=([20.0, 20.5, 21.0, 20.2, 20.8], "bf16"),
    )
    quality = [{"backend": "native-int8", "ppl_diff_pct": 0.8}, {"backend": "hf", "ppl_diff_pct": None}]
    result = verdict(runs, reference="hf", quality=quality)
    assert result.pick(OVERALL).leaders == ("native-int8",)
    assert result.pick("int8").leaders == ("native-int8",) and result.pick("bf16/f16").only
    assert result.pick("fp32").leaders == ("hf",)
    text = result.text()
    assert "- int8: native-int8 (the fastest overall)" in text
    assert "perplexity +0.80% vs hf" in text and "agrees with hf on 7 of 20 tokens" in text
    assert result.caveat(CaveatKind.ONE_PRECISION) is None


def test_the_registry_gives_the_precision_not_the_records_dtype(monkeypatch):
    from tests import fake_engines

    spec = fake_engines.spec("quant")
    monkeypatch.setitem(registry.ENGINES, "quant", type(spec)(**{**spec.__dict__, "precision": "int4"}))
    runs = _session(quant=([5.0, 5.1, 5.2, 5.0, 5.3], "fp32"))
    assert verdict(runs, reference="hf").pick("int4").leaders == ("quant",)


def test_build_time_is_said_apart_from_cold_start_and_without_a_reference_there_are_no_speed_ups():
    runs = [
        _run("onnx-ish", r, 10.0, build_s=18.2 if r == 1 else 18.2, cold=1.1 if r == 1 else None) for r in (1, 2, 3)
    ]
    result = verdict(runs, reference="hf")
    text = result.text()
    assert "cold start 1.10 s" in text and "one-time build 18.20 s" in text
    assert "x [" not in text and result.caveat(CaveatKind.NO_REFERENCE) is not None
    assert result.caveat(CaveatKind.NOTHING_TO_COMPARE) is not None


def test_markdown_holds_the_same_lines():
    runs = _session(fast=([10.0, 11.0, 10.5, 10.2, 10.8], "int8"))
    result = verdict(runs, reference="hf")
    markdown = result.markdown()
    assert markdown.startswith("### Verdict")
    for line in result.lines():
        assert line in markdown


def test_the_speed_up_interval_states_the_level_of_its_pairs_not_of_the_runs():
    # hf lost repeat 3 and fast repeat 2: 4 runs each, but only repeats 1, 4 and 5 pair up
    runs = _engine("hf", [40.0, 44.0, 42.0, 41.0, 43.0]) + _engine("fast", [10.0, 11.0, 10.5, 10.2, 10.8])
    for run in runs:
        if run.run_id in ("hf/r3", "fast/r2"):
            run.status = RunStatus.ERROR
    ratio = speedup(runs, "fast", "hf")
    assert (ratio.n, ratio.level) == (3, 0.75)
    headline = verdict(runs, reference="hf").lines()[0]
    assert "median of 4 measured runs" in headline
    assert "distribution-free at 75.0% (min–max)" in headline and "87.5%" not in headline


def test_an_engine_measured_without_a_warm_up_is_named():
    """--warmup 0: each engine's first measured run carries its first-call costs into the medians."""
    warmed = [_run(name, 1, 40.0, warmup=True) for name in ("hf", "fast")]
    runs = _session(fast=([10.0, 11.0, 10.5, 10.2, 10.8], "fp32"))
    (caveat,) = [c for c in verdict(runs, reference="hf").caveats if c.kind == CaveatKind.NO_WARMUP]
    assert "no warm-up run for hf, fast" in caveat.text
    assert not [c for c in verdict(warmed + runs, reference="hf").caveats if c.kind == CaveatKind.NO_WARMUP]
    (caveat,) = [c for c in verdict(warmed[:1] + runs, reference="hf").caveats if c.kind == CaveatKind.NO_WARMUP]
    assert "no warm-up run for fast:" in caveat.text


def test_a_speed_up_whose_interval_holds_1_is_said_not_distinguishable_from_the_reference():
    """'27.92x as fast as hf [0.21–31.14]' read as a clear speed-up though one repeat went the other way."""
    runs = _session(lone=([10.0, 200.0, 10.5, 10.2, 10.8], "int8"))
    text = verdict(runs, reference="hf").text()
    assert "as fast as hf [0.22–4.02], not distinguishable from hf at 5 repeats" in text
    clear = verdict(_session(lone=([10.0, 11.0, 10.5, 10.2, 10.8], "int8")), reference="hf").text()
    assert "not distinguishable from hf" not in clear
