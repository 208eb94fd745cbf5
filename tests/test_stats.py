import math

import numpy as np
import pytest

from whistle_stop.backends.results.records import TokenRecord
from whistle_stop.backends.results.stats import (
    agreement,
    median_interval,
    median_interval_level,
    pooled_summary,
    run_metrics,
    summarize,
    t95,
    t_quantile,
)
from whistle_stop.backends.results.summary import (
    SUMMARY_HEADERS,
    interval_label,
    interval_note,
    markdown_table,
    sampling_notes,
    summarize_backends,
    summary_rows,
)

from .run_records import run_record


def test_vllm_definitions():
    ms = 1_000_000
    start = 1_000 * ms
    stamps = [start + 50 * ms, start + 60 * ms, start + 75 * ms, start + 85 * ms]
    m = run_metrics(start, stamps)
    assert m.ttft_ms == pytest.approx(50)
    assert m.itl_ms == pytest.approx((10, 15, 10))  # TTFT is never an inter-token gap
    assert m.tpot_ms == pytest.approx((85 - 50) / 3)
    assert m.decode_tok_s == pytest.approx(3 / 0.035)
    assert m.e2e_s == pytest.approx(0.085)
    assert m.itl_p50_ms == pytest.approx(10)


def test_single_token_has_no_tpot():
    m = run_metrics(0, [5_000_000])
    assert m.ttft_ms == pytest.approx(5) and math.isnan(m.tpot_ms) and m.itl_ms == ()


def test_summary_pairs_the_median_with_its_own_interval():
    s = summarize([10.0, 12.0, 11.0, 13.0, 9.0])
    assert s.median == 11 and s.mean == pytest.approx(11)
    # Five values: no order-statistic pair reaches 95%, so min..max at 1 - 2/2^5 = 93.75%.
    assert (s.median_ci_low, s.median_ci_high, s.median_ci_level) == (9.0, 13.0, 0.9375)
    # The mean keeps its Student t interval.
    assert s.mean_ci95_high - 11 == pytest.approx(2.7764451 * s.std / math.sqrt(5))
    assert summarize([]).n == 0 and math.isnan(summarize([4.0]).median_ci_low)


def test_median_interval_on_known_data():
    values = list(range(1, 21))  # 20 values: x(6)..x(15), coverage 1 - 2 P(B <= 5) = 95.86%
    low, high, level = median_interval(values)
    assert (low, high) == (6, 15) and level == pytest.approx(0.958610534668)
    assert median_interval(list(range(6))) == (0, 5, pytest.approx(0.96875))  # 6 runs: min..max, 96.9%
    assert median_interval(list(range(9)))[:2] == (1, 7)  # 9 runs: 2nd smallest..2nd largest, 96.1%
    assert [median_interval_level(n, 1) for n in (2, 3, 4)] == [0.5, 0.75, 0.875]
    # An outlier moves the mean's interval, not the median's.
    s = summarize([10, 10.2, 9.9, 10.1, 10.0, 10.05, 10.1, 9.95, 500])
    assert s.median_ci_high < 10.5 and s.mean_ci95_high > 100


@pytest.mark.parametrize(
    "n, label",
    [
        (2, "50.0% (min–max)"),
        (5, "93.8% (min–max)"),
        # 6-8 values: still min..max (no narrower pair reaches 95%), at 1 - 2 * 0.5^n, above 95%.
        (6, "96.9% (min–max)"),
        (7, "98.4% (min–max)"),
        (8, "99.2% (min–max)"),
        (9, "96.1%"),
        (20, "95.9%"),  # 2nd smallest..2nd largest; 6th..15th
    ],
)
def test_interval_label_gives_the_true_level_and_names_min_max(n, label):
    assert interval_label(n) == label
    s = summarize(range(n))  # the label agrees with the interval itself
    assert f"{100 * s.median_ci_level:.1f}%" in label
    assert ("min–max" in label) == ((s.median_ci_low, s.median_ci_high) == (0, n - 1))


def test_interval_note_and_markdown_give_each_run_count_its_level():
    summaries = summarize_backends([_run("a", r, 2.0) for r in range(6)] + [_run("b", r, 2.0) for r in range(9)])
    for text in (interval_note(summaries), markdown_table(summaries)):
        assert "6 runs: 96.9% (min–max), 9 runs: 96.1%" in text
    assert interval_label(1) == "" and "runs:" not in interval_note(summarize_backends([_run("a", 1, 2.0)]))


def test_t_quantiles_for_any_degrees_of_freedom():
    assert t95(1) == pytest.approx(12.7062047, rel=1e-7)
    assert t95(4) == pytest.approx(2.7764451, rel=1e-7)
    assert t95(30) == pytest.approx(2.0422725, rel=1e-7)
    assert t95(40) == pytest.approx(2.0210754, rel=1e-7)  # the old table jumped to 1.96 after 30
    assert t95(100) == pytest.approx(1.9839715, rel=1e-7)
    assert t95(10**6) == pytest.approx(1.959966, rel=1e-6)
    assert t_quantile(0.025, 40) == pytest.approx(-2.0210754, rel=1e-7) and math.isnan(t95(0))


def test_pooled_percentiles_over_every_gap():
    gaps = list(range(1, 101))  # 1..100
    pooled = pooled_summary(gaps)
    assert pooled.n == 100 and pooled.median == pytest.approx(50.5)
    assert pooled.p90 == pytest.approx(np.percentile(gaps, 90)) and pooled.p99 == pytest.approx(99.01)
    assert math.isnan(pooled.median_ci_low)  # gaps of one run are not independent: no interval


def _run(backend, repeat, itl_p50, warmup=False, native=False, decoding="greedy", status="ok"):
    return run_record(
        backend,
        repeat,
        itl=itl_p50,
        weights="random",
        prompt_tokens=4,
        new_tokens=4,
        decoding=decoding,
        is_warmup=warmup,
        import_s=1.0,
        load_s=0.1,
        ttft_ms=10.0 + repeat,
        itl_p90_ms=None,
        itl_p99_ms=None,
        e2e_s=0.1,
        status=status,
        native_sampling=native,
    )


def _tokens(run, gaps):
    rows = [TokenRecord(run.run_id, run.backend, run.repeat, run.is_warmup, 0, 1, "x", 5.0, None, "prefill")]
    rows += [
        TokenRecord(run.run_id, run.backend, run.repeat, run.is_warmup, i + 1, 1, "x", 5.0, g, "decode")
        for i, g in enumerate(gaps)
    ]
    return rows


def test_summaries_pool_the_gaps_of_measured_runs_only():
    runs = [_run("a", 0, 99.0, warmup=True), _run("a", 1, 2.0), _run("a", 2, 3.0), _run("a", 3, 50.0, status="error")]
    tokens = _tokens(runs[0], [1000.0] * 3) + _tokens(runs[1], [1.0, 2.0, 3.0]) + _tokens(runs[2], [4.0, 5.0, 100.0])
    tokens += _tokens(runs[3], [1000.0] * 3)
    (a,) = summarize_backends(runs, tokens=tokens)
    assert a.itl_pooled_ms.n == 6 and a.itl_pooled_ms.median == pytest.approx(3.5)
    assert a.itl_pooled_ms.p99 == pytest.approx(np.percentile([1, 2, 3, 4, 5, 100], 99))
    assert a.itl_p50_ms.median == 2.5  # the per-run medians, beside
    row = summary_rows([a])[0]
    assert (
        row[SUMMARY_HEADERS.index("ITL p50/p90/p99 ms")] == "3.50/52.50/95.25"
        and row[SUMMARY_HEADERS.index("TTFT ms")] == "11.5 [11.0–12.0]"
    )


def test_native_sampling_is_marked_only_when_sampling():
    sampled = [_run("hf", 1, 2.0, decoding="sample"), _run("ct2", 1, 2.0, native=True, decoding="sample")]
    summaries = summarize_backends(sampled)
    assert [s.comparable for s in summaries] == [True, False]
    assert [row[0] for row in summary_rows(summaries)] == ["hf", "ct2 †"]
    (note,) = sampling_notes(summaries)
    assert "ct2" in note and "not comparable" in note and "not comparable" in markdown_table(summaries)
    greedy = summarize_backends([_run("ct2", 1, 2.0, native=True)])
    assert greedy[0].comparable and summary_rows(greedy)[0][0] == "ct2"
    assert "greedy runs are comparable" in sampling_notes(greedy)[0]
    assert "93.8%" in interval_note(summarize_backends([_run("a", r, 2.0) for r in range(5)]))


def test_agreement():
    assert agreement([1, 2, 3, 4], [1, 2, 3, 4]) == (4, None)
    assert agreement([1, 2, 3, 4], [1, 2, 9, 4]) == (2, 2)
    assert agreement([1, 2, 3, 4], [1, 2]) == (2, 2)
