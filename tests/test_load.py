"""Load runs: several streams at once against a server with a known batching behaviour, the level
arithmetic (aggregate tokens/s, pooled ITL, goodput), files, and a sweep over concurrency.

The fake server (tests/fake_vllm) gives each active request one token per step, and a step takes
STEP + PER_SEQ x (active requests) ms: at concurrency c each request's ITL is that step and the
level's aggregate is c tokens per step. The bounds are wide: they check the arithmetic and the
concurrency (c streams really overlap), not this machine's speed.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from whistle_stop.backends.engines.remote_options import RemoteOptions
from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.results.export import LOAD_CSV, LOAD_REQUESTS_CSV, read_csv, write_results
from whistle_stop.backends.results.load import (
    LOAD_HEADERS,
    LoadRequestRecord,
    Slo,
    load_levels,
    load_rows,
    request_records,
    requests_from_runs,
)
from whistle_stop.backends.results.reader import load_requests
from whistle_stop.backends.runs.bench import BenchSession
from whistle_stop.backends.runs.config import BenchConfig
from whistle_stop.backends.status import RunStatus
from whistle_stop.backends.worker.events import StreamResult

from .fake_servers import fake_vllm_server

STEP_MS, PER_SEQ_MS = 30.0, 10.0


def _config(url: str, **changes) -> BenchConfig:
    values = dict(
        model="random:tiny",
        backends=("remote",),
        prompt_tokens=8,
        new_tokens=12,
        repeats=2,
        warmup=1,
        concurrency=(1, 2, 4),
        engine_options={"remote": RemoteOptions(url=url)},
    )
    values.update(changes)
    return BenchConfig(**values)


def _levels(result, slo=Slo()):
    servers = {r.backend for r in result.load}
    return {
        lv.concurrency: lv
        for lv in load_levels(requests_from_runs(result.runs, result.tokens) + result.load, slo, servers)
    }


def test_load_levels_follow_the_servers_batching(tiny_model, tmp_path):
    with fake_vllm_server(FAKE_VLLM_STEP_MS=str(STEP_MS), FAKE_VLLM_PER_SEQ_MS=str(PER_SEQ_MS)) as server:
        config = _config(server.base_url + "/v1", slo_ttft_ms=10_000.0, slo_itl_ms=10_000.0)
        result = BenchSession(config).run()
    levels = _levels(result, config.slo)
    assert set(levels) == {1, 2, 4}
    for c, level in levels.items():
        step = STEP_MS + PER_SEQ_MS * c
        assert level.failed == 0 and level.requests == 2 * c, level
        assert level.kind == "server"
        assert 0.8 * step <= level.itl_p50_ms <= 1.8 * step, (c, level.itl_p50_ms)
        expected = c * 1000.0 / step  # tokens per second once every stream is in
        assert 0.45 * expected <= level.output_tok_s <= 1.15 * expected, (c, level.output_tok_s, expected)
        assert level.goodput_req_s == pytest.approx(level.request_s) and level.slo_met_pct == 100.0
    assert levels[4].output_tok_s > levels[2].output_tok_s > levels[1].output_tok_s
    # every request of a round had its own prefix; warm-up rounds are recorded but not summarised
    measured = [r for r in result.load if not r.is_warmup]
    assert {r.concurrency for r in result.load} == {2, 4} and len(measured) == 2 * (2 + 4)
    assert any(r.is_warmup for r in result.load)
    assert all(r.tokens_generated == 12 and len(r.gaps) == 11 for r in measured)
    # the server's own /metrics beside the client's figures, for a bench run and for a load level
    assert "server's own /metrics" in levels[4].notes and "client" in levels[4].notes
    assert any("server's own /metrics over 1 request(s)" in r.notes for r in result.runs if not r.is_warmup)
    paths = write_results(tmp_path, result.runs, result.tokens, result.environment, load=result.load, slo=config.slo)
    assert tmp_path / LOAD_CSV in paths
    rows = read_csv(tmp_path / LOAD_CSV)
    assert sorted(int(r["concurrency"]) for r in rows) == [1, 2, 4]
    assert len(load_requests(tmp_path)) == len(result.load)


def test_one_failing_request_does_not_lose_the_others(tiny_model):
    # requests: 1 warm-up + 1 measured at level 1, then 3 warm-up, then the measured round of 3: fail its 2nd
    with fake_vllm_server(FAKE_VLLM_STEP_MS="10", FAKE_VLLM_PER_SEQ_MS="2", FAKE_VLLM_FAIL_REQUEST="7") as server:
        config = _config(server.base_url + "/v1", repeats=1, new_tokens=6, concurrency=(3,))
        result = BenchSession(config).run()
    measured = [r for r in result.load if not r.is_warmup]
    assert len(measured) == 3
    failed = [r for r in measured if r.status != RunStatus.OK]
    assert len(failed) == 1 and "fake engine failure" in failed[0].error
    assert all(r.tokens_generated == 6 for r in measured if r.status == RunStatus.OK)
    level = _levels(result)[3]
    assert level.failed == 1 and level.requests == 3 and level.output_tok_s > 0
    assert result.failed  # the CLI exits 1: a request failed


def test_local_engines_are_the_concurrency_1_reference(tiny_model):
    config = BenchConfig(
        model="random:tiny", backends=("numpy",), prompt_tokens=8, new_tokens=5, repeats=2, concurrency=(1, 4)
    )
    result = BenchSession(config).run()
    assert result.load == []  # numpy serves one sequence at a time
    levels = _levels(result)
    assert list(levels) == [1] and levels[1].kind == "batch 1" and levels[1].requests == 2


def _request(ttft: float, tpot: float, status=RunStatus.OK, run_id="r1", round_s=2.0, gaps=(10.0, 20.0, 30.0)):
    return LoadRequestRecord(
        run_id, "vllm", "", 8, 4, 2, 1, False, 0, status, 4, ttft, tpot, 1.0, 0.0, round_s, " ".join(map(str, gaps))
    )


def test_goodput_arithmetic():
    requests = [
        _request(100, 20),
        _request(300, 20),
        _request(100, 60, run_id="r2", round_s=3.0),
        _request(50, 10, RunStatus.ERROR, run_id="r2", round_s=3.0),
    ]
    level = load_levels(requests, Slo(ttft_ms=200, itl_ms=50))[0]
    assert level.duration_s == pytest.approx(5.0)  # two rounds: 2 s + 3 s
    assert level.requests == 4 and level.failed == 1
    # vLLM's serving benchmark counts successful requests only: 3 of them, 4 tokens each (the failed
    # one's 4 tokens and the request itself are in neither figure; its time is in the duration)
    assert level.output_tok_s == pytest.approx(12 / 5.0)
    assert level.request_s == pytest.approx(3 / 5.0)
    assert level.goodput_req_s == pytest.approx(1 / 5.0)  # only the first meets both; a failed one never does
    assert level.slo_met_pct == pytest.approx(25.0)
    assert level.itl_p50_ms == pytest.approx(20.0)  # pooled gaps of the ok requests
    assert level.ttft_p50_ms == pytest.approx(100.0)
    only_ttft = load_levels(requests, Slo(ttft_ms=200))[0]
    assert only_ttft.goodput_req_s == pytest.approx(2 / 5.0)
    unset = load_levels(requests)[0]
    assert unset.goodput_req_s is None and unset.slo_met_pct is None
    assert load_rows([unset])[0][-2:] == ["-", "-"]
    assert math.isnan(load_levels([_request(1, 1, RunStatus.ERROR)])[0].ttft_p50_ms)


def test_a_one_token_output_meets_a_tpot_slo():
    """One token has no gap (TPOT None): vLLM's goodput counts its TPOT as 0, so a TPOT SLO holds."""
    one = replace(_request(100, None, gaps=()), new_tokens=1, tokens_generated=1)
    level = load_levels([one], Slo(ttft_ms=200, itl_ms=50))[0]
    assert level.slo_met_pct == pytest.approx(100.0) and level.goodput_req_s == pytest.approx(1 / 2.0)
    assert math.isnan(level.tpot_p50_ms)  # the TPOT column itself still has no value for it
    assert load_levels([replace(one, ttft_ms=300)], Slo(ttft_ms=200, itl_ms=50))[0].slo_met_pct == 0.0


def test_a_round_ends_when_its_last_request_ends_an_error_included():
    """A request that hung until a timeout fails after the others' last token: the round (and the
    level's duration) runs until then, as vLLM's benchmark waits for every request."""
    ms = 1_000_000
    streams = [
        StreamResult(0, 0, (100 * ms, 200 * ms), ended_ns=200 * ms),
        StreamResult(1, 0, (150 * ms,), "read timed out", ended_ns=5_000 * ms),
    ]
    records = request_records("r1", "vllm", "", 8, 2, 2, 1, False, 0, streams)
    assert [r.round_s for r in records] == [pytest.approx(5.0)] * 2
    level = load_levels(records)[0]
    assert level.duration_s == pytest.approx(5.0) and level.request_s == pytest.approx(1 / 5.0)
    assert level.output_tok_s == pytest.approx(2 / 5.0)  # the ok request's tokens only
    # a result without `ended_ns` ends at its last token, as before
    plain = [replace(s, ended_ns=0) for s in streams]
    assert request_records("r1", "vllm", "", 8, 2, 2, 1, False, 0, plain)[0].round_s == pytest.approx(0.2)


def test_the_load_table_pools_one_gap_per_streamed_chunk_as_vllm_does():
    """A server that sends 4 tokens an event every 40 ms: vLLM's ITL is 40 ms a chunk, not three
    near-zero gaps and a long one (p50 ~0); a token a step keeps its own gaps."""
    ms = 1_000_000
    stamps = tuple(t * ms + i for t in (10, 50, 90) for i in range(4))  # each event's tokens microseconds apart
    steps = tuple(i // 4 for i in range(12))
    chunked = StreamResult(0, 0, stamps, ended_ns=stamps[-1], token_steps=steps)
    (record,) = request_records("r1", "remote", "", 8, 12, 1, 1, False, 0, [chunked])
    assert record.gaps == pytest.approx([40.0, 40.0])
    plain = replace(chunked, token_steps=())
    (each,) = request_records("r1", "remote", "", 8, 12, 1, 1, False, 0, [plain])
    assert len(each.gaps) == 11 and min(each.gaps) < 0.01


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"concurrency": (0, 2)}, "--concurrency"),
        ({"concurrency": (2,), "mode": "race"}, "fair mode"),
        ({"slo_ttft_ms": -1.0}, "--slo-ttft-ms"),
        ({"slo_itl_ms": 0.0}, "--slo-itl-ms"),
    ],
)
def test_bad_load_settings_get_one_line(changes, message):
    with pytest.raises(UsageError, match=message):
        BenchConfig(**{"backends": ("remote",), **changes}).validate()


def test_sweep_over_concurrency_writes_and_resumes(tiny_model, tmp_path):
    from whistle_stop.backends.runs.sweep import SweepGrid, SweepSession

    with fake_vllm_server(FAKE_VLLM_STEP_MS="5", FAKE_VLLM_PER_SEQ_MS="1") as server:
        config = _config(server.base_url + "/v1", repeats=1, concurrency=(2,))
        session = SweepSession(config, SweepGrid((8, 16), (4,)), tmp_path, measure_bandwidth=False)
        result = session.run()
        cells = {(r.prompt_tokens, r.concurrency) for r in result.load if not r.is_warmup}
        assert cells == {(8, 2), (16, 2)}
        rows = read_csv(tmp_path / LOAD_REQUESTS_CSV)
        assert len(rows) == len(result.load)
        again = SweepSession(config, SweepGrid((8, 16), (4,)), tmp_path, measure_bandwidth=False)
        plan = again.prepare()
        assert plan.cells == [] and len(plan.previous_load) == len(result.load)  # nothing left: all read back


def test_requests_that_end_early_are_counted_apart_and_never_meet_the_slo():
    """A server that interrupts one stream for another (llama-cpp-python's server does by default) or
    stops at end-of-text ends requests early without an error: the table says how many."""
    full = _request(100, 20)
    early = replace(_request(100, 20), tokens_generated=1)
    level = load_levels([full, early], Slo(ttft_ms=200, itl_ms=50))[0]
    assert (level.requests, level.failed, level.short) == (2, 0, 1)
    assert level.slo_met_pct == pytest.approx(50.0)  # the one that sent 1 of 4 tokens does not count
    assert "1 of 2 requests ended early" in level.notes
    row = dict(zip(LOAD_HEADERS, load_rows([level])[0]))
    assert (row["failed"], row["short"]) == ("0", "1")


def test_the_servers_own_itl_is_set_beside_one_client_gap_per_server_event():
    """vLLM's inter-token histogram has one observation per engine step (a speculative step of 4
    tokens is one): the client's mean beside it is one gap per event, not per token (a quarter)."""
    from whistle_stop.backends.engine import ServerEngine
    from whistle_stop.backends.server_metrics import HistogramTotals, ServerMetrics
    from whistle_stop.backends.worker.load_runner import server_cross_check

    class Server(ServerEngine):
        def load(self, model, progress):
            raise NotImplementedError

        def prefill(self, token_ids):
            raise NotImplementedError

        def decode(self, token_id):
            raise NotImplementedError

        def server_metrics(self):  # after: 1 request, TTFT 10 ms, two steps of 40 ms
            return ServerMetrics(HistogramTotals(0.010, 1), HistogramTotals(0.080, 2))

    before = ServerMetrics(HistogramTotals(0.0, 0), HistogramTotals(0.0, 0))
    ms = 1_000_000
    stamps = [t * ms + i for t in (10, 50, 90) for i in range(4)]  # 4 tokens an event, 40 ms apart
    steps = [i // 4 for i in range(12)]
    note = server_cross_check(Server("remote", None), before, [(0, stamps, steps)])
    assert "mean ITL 40.00 ms (client 40.00 ms)" in note, note


def test_a_round_cut_by_cancel_is_left_out_of_the_figures_and_counted():
    """Cancel mid-round stops every stream: its requests read as failed and its cut wall time would
    drag tokens/s down (a level with only that round read 0 tok/s, every request failed)."""
    full = [_request(100, 20, run_id="r1"), _request(100, 20, run_id="r1")]
    cut = [
        replace(_request(100, 20, RunStatus.CANCELLED, run_id="r2", round_s=0.5), tokens_generated=2),
        replace(_request(100, 20, run_id="r2", round_s=0.5), stream=1),
    ]
    level = load_levels(full + cut)[0]
    assert (level.requests, level.failed, level.duration_s) == (2, 0, pytest.approx(2.0))
    assert level.output_tok_s == pytest.approx(8 / 2.0) and level.request_s == pytest.approx(1.0)
    assert "2 requests of 1 round(s) cut by Cancel left out" in level.notes
    (only_cut,) = load_levels(cut)
    assert only_cut.requests == 0 and math.isnan(only_cut.output_tok_s) and "cut by Cancel" in only_cut.notes
    row = dict(zip(LOAD_HEADERS, load_rows([only_cut])[0]))
    assert (row["failed"], row["output tok/s"], row["req/s"]) == ("0", "-", "-")


def test_the_terminals_round_line_counts_the_tokens_the_load_table_counts():
    """Each round's progress line gave every request's tokens over the round (239 tok/s) where the
    table gave the completed requests' (191): one round, two figures. Both count completed ones."""
    from rich.console import Console

    from whistle_stop.backends.cli.common import progress_printer
    from whistle_stop.backends.runs.events import LoadRecorded

    ms = 1_000_000
    streams = [
        StreamResult(0, 0, tuple(t * ms for t in range(10, 110, 10)), ended_ns=100 * ms),
        StreamResult(1, 0, tuple(t * ms for t in range(10, 60, 10)), "malformed event", ended_ns=100 * ms),
    ]
    records = request_records("remote/c2/r1", "remote", "", 8, 10, 2, 1, False, 0, streams)
    console = Console(record=True, width=300)
    progress_printer(console)(LoadRecorded(records))
    assert f"{load_levels(records)[0].output_tok_s:.1f} output tok/s" in console.export_text()  # 10 / 0.1 s


def test_a_server_asked_for_level_1_only_is_a_server():
    """`bench --backends remote,numpy --concurrency 1`: the remote server's row said "batch 1" (a local
    engine's kind) and the footer that no selected engine serves concurrently."""
    from types import SimpleNamespace

    from rich.console import Console

    from whistle_stop.backends.cli.load_table import print_load
    from whistle_stop.backends.results.load import session_levels
    from whistle_stop.backends.results.records import TokenRecord
    from whistle_stop.backends.runs.arrivals import RateSpec

    from .run_records import run_record

    runs = [run_record(name, 1, itl=5.0, new_tokens=4, tokens_generated=4, e2e_s=0.05) for name in ("remote", "numpy")]
    tokens = [
        TokenRecord(r.run_id, r.backend, 1, False, i, 100 + i, "x", 20.0 + 5 * i, None if i == 0 else 5.0, "decode")
        for r in runs
        for i in range(4)
    ]
    kinds = {lv.backend: lv.kind for lv in session_levels(runs, tokens, [])}
    assert kinds == {"remote": "server", "numpy": "batch 1"}
    console = Console(record=True, width=400)
    config = SimpleNamespace(slo=Slo(), concurrency=(1,), rate=RateSpec())
    print_load(SimpleNamespace(config=config, runs=runs, tokens=tokens, load=[]), console)
    assert "no engine served concurrently" not in console.export_text()


def test_a_round_whose_server_went_silent_ends_after_the_timeout():
    """The worker's progress messages kept the token clock alive: a hung server held a round for the remote
    engine's own 60 s read timeout, whatever --timeout said, and its requests read 'error'."""
    from whistle_stop.backends.worker.timeouts import Timeouts

    # the bench's run at level 1 is request 1; the round of 2 (requests 2 and 3) gets no token
    with fake_vllm_server(FAKE_VLLM_STEP_MS="5", FAKE_VLLM_PER_SEQ_MS="1", FAKE_VLLM_STALL_FROM="2") as server:
        config = _config(server.base_url + "/v1", repeats=1, warmup=0, new_tokens=4, concurrency=(2,))
        result = BenchSession(replace(config, timeouts=Timeouts(token_s=1.0))).run()
    measured = [r for r in result.load if not r.is_warmup]
    assert [r.status for r in measured] == [RunStatus.TIMEOUT, RunStatus.TIMEOUT]
    assert "no token from any stream for 1 s" in measured[0].error


def test_a_level_with_no_completed_request_states_no_throughput():
    """Every request failed: level 1 (failed bench runs, no duration) read '-' and a server's level above
    it '0.0' in the same table."""
    ms = 1_000_000
    streams = [StreamResult(i, 0, (), "connection refused", ended_ns=5 * ms) for i in range(2)]
    level = load_levels(request_records("r1", "remote", "", 8, 2, 2, 1, False, 0, streams))[0]
    assert level.failed == 2 and math.isnan(level.output_tok_s) and math.isnan(level.request_s)
    assert load_rows([level])[0][6:8] == ["-", "-"]
