import math

import pytest

from whistle_stop.backends.results.stats import agreement, run_metrics, summarize


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


def test_summary_interval():
    s = summarize([10.0, 12.0, 11.0, 13.0, 9.0])
    assert s.median == 11 and s.mean == pytest.approx(11)
    assert s.ci95_low < 11 < s.ci95_high
    assert s.ci95_high - 11 == pytest.approx(2.776 * s.std / math.sqrt(5))
    assert summarize([]).n == 0


def test_agreement():
    assert agreement([1, 2, 3, 4], [1, 2, 3, 4]) == (4, None)
    assert agreement([1, 2, 3, 4], [1, 2, 9, 4]) == (2, 2)
    assert agreement([1, 2, 3, 4], [1, 2]) == (2, 2)
