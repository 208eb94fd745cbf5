"""Open-loop load (`bench --request-rate`): the arrival process, a scripted server run at a couple of
rates, saturation shown plainly, and bad settings refused in one line.

The fake server (tests/fake_vllm) steps its active requests every STEP_MS; with FAKE_VLLM_MAX_SEQS=1
it serves one request at a time (a batch-1 server): a request of NEW_TOKENS takes about
(NEW_TOKENS + 1) steps, so it keeps up with a slow rate and falls behind a fast one. The bounds
check the arithmetic and the flag, not this machine's speed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from whistle_stop.backends.cli.main import main
from whistle_stop.backends.engines.remote_options import RemoteOptions
from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.results.export import LOAD_CSV, LOAD_REQUESTS_CSV, read_csv, write_results
from whistle_stop.backends.results.load import load_levels, open_loop_levels, rate_rows, saturation_lines
from whistle_stop.backends.results.reader import load_requests
from whistle_stop.backends.runs.arrivals import (
    RateMode,
    RateSpec,
    arrival_offsets_ms,
    parse_request_rate,
    sweep_rates,
)
from whistle_stop.backends.runs.bench import BenchSession
from whistle_stop.backends.runs.config import BenchConfig

from .fake_servers import fake_vllm_server

STEP_MS, NEW_TOKENS, REQUESTS = 10.0, 3, 8


# --- the arrival process --------------------------------------------------------------------------
@pytest.mark.parametrize("burstiness", [1.0, 0.25, 4.0])
def test_gaps_are_gamma_with_mean_one_over_rate_and_shape_burstiness(burstiness):
    rate, n = 10.0, 20_000
    offsets = np.asarray(arrival_offsets_ms(rate, n, burstiness, seed=3))
    gaps = np.diff(offsets) / 1000.0
    assert offsets[0] == 0.0 and len(offsets) == n and np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.03)
    # a gamma of shape k has a coefficient of variation 1/sqrt(k): 1 for Poisson
    assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(burstiness), rel=0.05)


def test_a_seed_gives_the_same_schedule_and_inf_sends_everything_at_once():
    assert arrival_offsets_ms(4.0, 50, 1.0, seed=7) == arrival_offsets_ms(4.0, 50, 1.0, seed=7)
    assert arrival_offsets_ms(4.0, 50, 1.0, seed=7) != arrival_offsets_ms(4.0, 50, 1.0, seed=8)
    assert arrival_offsets_ms(math.inf, 5, 1.0, seed=0) == (0.0,) * 5


def test_request_rate_parses_lists_inf_and_sweep():
    assert parse_request_rate("4, 1,inf").rates == (1.0, 4.0, math.inf)
    assert parse_request_rate("sweep").mode == RateMode.SWEEP
    assert sweep_rates(0.5)[:3] == (0.5, 1.0, 2.0)  # a quarter, half, once the batch-1 rate (2 req/s)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--request-rate", "fast"], "'fast' is not a rate"),
        (["--request-rate", "0,2"], "must be > 0"),
        (["--request-rate", "sweep,2"], "R[,R2,...]"),
        (["--request-rate", "2", "--burstiness", "0"], "--burstiness must be a number > 0"),
        (["--request-rate", "2", "--rate-requests", "0"], "--rate-requests must be 1 to"),
        (["--burstiness", "2"], "give it too"),
        (["--request-rate", "2", "--mode", "race"], "--request-rate needs fair mode"),
    ],
)
def test_bad_rate_settings_get_one_line(argv, message, capsys, tmp_path):
    code = main(["bench", "--model", "random:tiny", "--out", str(tmp_path), *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1, err


def test_bad_rate_spec_is_a_usage_error():
    with pytest.raises(UsageError, match="--rate-requests"):
        RateSpec(rates=(1.0,), requests=0).validate()


# --- a scripted server at a couple of rates ------------------------------------------------------
def _config(url: str, spec: RateSpec) -> BenchConfig:
    return BenchConfig(
        model="random:tiny",
        backends=("remote",),
        prompt_tokens=8,
        new_tokens=NEW_TOKENS,
        repeats=1,
        warmup=1,
        rate=spec,
        engine_options={"remote": RemoteOptions(url=url)},
    )


def test_a_batch_1_server_keeps_up_with_a_slow_rate_and_is_flagged_saturated_at_a_fast_one(tiny_model, tmp_path):
    spec = RateSpec(RateMode.LIST, (5.0, 200.0), requests=REQUESTS)
    env = dict(FAKE_VLLM_STEP_MS=str(STEP_MS), FAKE_VLLM_PER_SEQ_MS="0", FAKE_VLLM_MAX_SEQS="1")
    with fake_vllm_server(**env) as server:
        config = _config(server.base_url + "/v1", spec)
        result = BenchSession(config).run()
    levels = {lv.request_rate: lv for lv in open_loop_levels(load_levels(result.load))}
    assert set(levels) == {5.0, 200.0}
    slow, fast = levels[5.0], levels[200.0]
    for level in (slow, fast):
        assert level.requests == REQUESTS and level.failed == 0 and level.concurrency == 0, level
        assert level.burstiness == 1.0
    # sent as scheduled: the measured send rate is the schedule's, within the clock's slack
    schedule = arrival_offsets_ms(5.0, REQUESTS, 1.0, config.sampling.seed)
    assert slow.sent_req_s == pytest.approx((REQUESTS - 1) / (schedule[-1] / 1000), rel=0.05)
    assert not slow.saturated and slow.achieved_req_s == pytest.approx(slow.sent_req_s, rel=0.1)
    # one request at a time: completions come one service time apart, far below 200 req/s
    service_s = (NEW_TOKENS + 1) * STEP_MS / 1000
    assert fast.saturated and fast.achieved_req_s < 0.5 * fast.sent_req_s
    assert fast.achieved_req_s == pytest.approx(1 / service_s, rel=0.5)
    assert fast.ttft_p90_ms > 3 * slow.ttft_p50_ms  # the queue shows in TTFT
    lines = saturation_lines(list(levels.values()))
    assert len(lines) == 1 and lines[0].startswith("SATURATED: remote falls behind from 200 req/s")
    rows = rate_rows([slow, fast])
    assert [r[4] for r in rows] == ["no", "SATURATED"]
    # the files keep the offered rate and read back whole
    write_results(tmp_path, result.runs, result.tokens, result.environment, load=result.load)
    assert {r.request_rate for r in load_requests(tmp_path) if not r.is_warmup} == {5.0, 200.0}
    written = [row for row in read_csv(tmp_path / LOAD_CSV) if row["request_rate"]]
    assert {row["saturated"] for row in written} == {"true", "false"}
    assert (tmp_path / LOAD_REQUESTS_CSV).exists()
    assert result.environment["settings"]["rate"]["rates"] == ["5", "200"]
    # the report draws the rate curve and says the saturation plainly
    pytest.importorskip("pyqtgraph")
    from whistle_stop.backends.report.folder_data import load_folder
    from whistle_stop.backends.report.html import build_report
    from whistle_stop.backends.report.markdown import measurement_markdown

    page = build_report([tmp_path], tmp_path / "report").read_text(encoding="utf-8")
    assert "Latency vs offered request rate" in page and (tmp_path / "report" / "1-rate_curve.png").exists()
    assert "<b>SATURATED: remote falls behind from 200 req/s" in page
    markdown = measurement_markdown(load_folder(tmp_path))
    assert "--request-rate 5,200 --burstiness 1" in markdown and "| remote | 200 |" in markdown


def test_a_sweep_stops_at_the_first_rate_the_server_cannot_keep_up_with(tiny_model):
    env = dict(FAKE_VLLM_STEP_MS=str(STEP_MS), FAKE_VLLM_PER_SEQ_MS="0", FAKE_VLLM_MAX_SEQS="1")
    with fake_vllm_server(**env) as server:
        result = BenchSession(_config(server.base_url + "/v1", RateSpec(RateMode.SWEEP, requests=6))).run()
    levels = sorted(open_loop_levels(load_levels(result.load)), key=lambda lv: lv.request_rate)
    assert levels[-1].saturated and not any(lv.saturated for lv in levels[:-1])
    assert len(levels) < 8  # stopped before the ladder's end


def test_bench_prints_the_open_loop_table_and_says_saturated_plainly(tiny_model, tmp_path, capsys):
    env = dict(FAKE_VLLM_STEP_MS=str(STEP_MS), FAKE_VLLM_PER_SEQ_MS="0", FAKE_VLLM_MAX_SEQS="1")
    with fake_vllm_server(**env) as server:
        argv = ["bench", "--model", "random:tiny", "--backends", "remote", "--remote-url", server.base_url + "/v1"]
        argv += ["--prompt-tokens", "8", "--new-tokens", str(NEW_TOKENS), "--repeats", "1", "--warmup", "0"]
        argv += ["--request-rate", "inf", "--rate-requests", "4", "--no-harness-calibration", "--out", str(tmp_path)]
        code = main(argv)
    out = capsys.readouterr().out
    assert code == 0
    assert "open loop: 8-token prompts, 3 new tokens, Poisson arrivals, seed 0" in out
    assert "SATURATED: remote falls behind from inf req/s offered" in out
    rows = [row for row in read_csv(tmp_path / LOAD_CSV) if row["request_rate"]]
    assert [(row["request_rate"], row["saturated"], row["concurrency"]) for row in rows] == [("inf", "true", "0")]
