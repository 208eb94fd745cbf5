"""What a speculative engine's run leaves in the records: its counts as runs.csv's spec_* columns, its
ms/token as its TPOT (its tokens come in bursts, so its median gap is inside one), GB/s from the bytes
it counted, and its line under every table. Scripted engines in real workers (tests/fake_engines.py)."""

from __future__ import annotations

import csv
import dataclasses

import pytest

from tests import fake_engines
from whistle_stop.backends import registry
from whistle_stop.backends.results.export import write_results
from whistle_stop.backends.results.reader import load_results
from whistle_stop.backends.results.records import RunRecord
from whistle_stop.backends.results.summary import markdown_table, speculation_notes, summarize_backends
from whistle_stop.backends.results.verdict import verdict
from whistle_stop.backends.runs.bench import BenchSession
from whistle_stop.backends.runs.config import BenchConfig
from whistle_stop.backends.status import RunStatus


@pytest.fixture(scope="module")
def result(tiny_model):
    config = BenchConfig(
        model="random:tiny",
        backends=("steady", "burst"),
        prompt_tokens=4,
        new_tokens=21,
        repeats=2,
        warmup=0,
        threads=1,
        reference="steady",
    )
    specs = [fake_engines.spec("steady", decode_s=0.012), fake_engines.burst_spec("burst", burst=4, step_s=0.02)]
    with registry.use(specs):
        return BenchSession(config).run()


def test_bursts_are_timed_per_token_and_ms_per_token_is_their_tpot(result):
    steady = [r for r in result.runs if r.backend == "steady"]
    burst = [r for r in result.runs if r.backend == "burst"]
    assert all(r.status == RunStatus.OK for r in steady + burst)
    for r in steady:
        assert not r.multi_token_steps and r.ms_per_token == r.itl_p50_ms
    for r in burst:
        assert r.multi_token_steps and r.ms_per_token == r.tpot_ms
        assert r.itl_p50_ms < 1.0  # three of four gaps are inside a burst: the median says nothing per token
        assert 4.0 < r.tpot_ms < 8.0  # 20 ms per burst of 4
        assert r.spec_tokens_per_pass == pytest.approx(4.0)
        assert r.spec_acceptance == pytest.approx(15 / 20)
        assert r.spec_draft_ms_per_token == pytest.approx(0.3 * 5 * 20 / 20, rel=0.01)
        assert r.spec_verify_ms_per_token == pytest.approx(0.7 * 5 * 20 / 20, rel=0.01)
        assert r.bandwidth_gb_s == pytest.approx(250_000 * r.decode_tok_s / 1e9)  # the bytes it counted
    burst_tokens = [t for t in result.tokens if t.backend == "burst" and t.itl_ms is not None]
    assert sum(t.itl_ms < 1.0 for t in burst_tokens) >= len(burst_tokens) // 2  # stamped as yielded: bursts


def test_the_summary_ranks_by_ms_per_token_and_says_what_speculation_did(result):
    summaries = {s.backend: s for s in summarize_backends(result.runs)}
    assert summaries["burst"].ms_per_token.median == pytest.approx(
        sorted(r.tpot_ms for r in result.runs if r.backend == "burst")[0], rel=0.5
    )
    (note,) = speculation_notes(list(summaries.values()))
    assert note.startswith("burst (speculative): acceptance 75.0%, 4.00 tokens per target pass")
    assert "first to last token over those made after its first step" in note
    assert note in markdown_table(list(summaries.values()))
    older = [dataclasses.replace(r, decoded_tokens=None) for r in result.runs]  # records before the column
    (old_note,) = speculation_notes(summarize_backends(older))
    assert old_note.endswith("ms/token is its TPOT (tokens come in bursts)")
    found = verdict(result.runs, ["steady", "burst"], "steady")
    assert found.engines["burst"].ms_per_token.median == summaries["burst"].ms_per_token.median
    assert found.picks[0].leaders[0] == "burst"  # 5 ms per token against 12: by TPOT, not by its ~0 median gap


def test_the_columns_survive_the_files_and_older_files_read_as_before(result, tmp_path):
    write_results(tmp_path, result.runs, result.tokens, result.environment)
    runs, _, _ = load_results(tmp_path)
    for written, read in zip(result.runs, runs):
        assert read.ms_per_token == pytest.approx(written.ms_per_token, rel=1e-5)  # 6 digits in the file
        assert (
            read.spec_tokens_per_pass == written.spec_tokens_per_pass
            and read.multi_token_steps == written.multi_token_steps
        )
    with (tmp_path / "summary.csv").open() as handle:
        rows = [r for r in csv.DictReader(handle) if r["backend"] == "burst" and r["metric"] == "ms_per_token"]
    assert rows and "speculative" in rows[0]["note"]
    # a runs.csv from before the columns: ms/token is its median ITL, as it always was
    old = RunRecord(
        **{
            **{
                f: getattr(result.runs[0], f)
                for f in (
                    "run_id",
                    "backend",
                    "model",
                    "weights",
                    "device",
                    "dtype",
                    "threads",
                    "prompt_tokens",
                    "new_tokens",
                    "decoding",
                    "temperature",
                    "top_k",
                    "top_p",
                    "seed",
                    "repeat",
                    "is_warmup",
                    "import_s",
                    "load_s",
                    "ttft_ms",
                    "tpot_ms",
                    "itl_p50_ms",
                    "itl_p90_ms",
                    "itl_p99_ms",
                    "decode_tok_s",
                    "e2e_s",
                    "peak_rss_mb",
                    "status",
                )
            }
        }
    )
    assert old.ms_per_token == old.itl_p50_ms


def test_tokens_made_on_a_runtime_s_thread_keep_its_times_when_handed_over_late(tiny_model):
    """CTranslate2, OpenVINO GenAI and transformers' assisted generation make tokens on threads of
    their own and stamp them as made: a worker thread that gets them late (no free core) must not
    turn steady 10 ms steps into a late first token and a burst of zero gaps."""
    config = BenchConfig(
        model="random:tiny", backends=("late",), prompt_tokens=4, new_tokens=8, repeats=1, warmup=0, threads=1
    )
    with registry.use([fake_engines.late_handover_spec("late", step_s=0.01)]):
        result = BenchSession(config).run()
    (run,) = result.runs
    assert run.status == RunStatus.OK and run.ttft_ms < 40  # its first token, not its eighth (80 ms in)
    gaps = [t.itl_ms for t in result.tokens if t.itl_ms is not None]
    assert len(gaps) == 7 and min(gaps) > 8.0 and 8.0 < run.ms_per_token < 15.0


def test_tokens_the_first_step_made_are_in_the_ttft_not_in_ms_per_token(tiny_model):
    """Assisted generation checks its first drafts with the prompt: those tokens come with the first,
    their time is the TTFT's. ms/token and tokens/s count the tokens decoded after that step (vLLM's
    TPOT keeps its own definition); when the first step made them all, there is no decode to time."""
    config = BenchConfig(
        model="random:tiny", backends=("first",), prompt_tokens=4, new_tokens=20, repeats=1, warmup=0, threads=1
    )
    spec = fake_engines.burst_spec("first", burst=4, step_s=0.02, first=4)
    with registry.use([spec]):
        (run,) = BenchSession(config).run().runs
        short = BenchSession(dataclasses.replace(config, new_tokens=4)).run().runs[0]
    assert run.decoded_tokens == 16  # four passes of four after the first step's four
    assert 4.5 < run.ms_per_token < 6.0  # 20 ms a pass of four; 80 ms over 19 tokens (TPOT) would say 4.2
    assert run.tpot_ms == pytest.approx(run.ms_per_token * 16 / 19)
    assert run.decode_tok_s == pytest.approx(1e3 / run.ms_per_token)
    assert short.status == RunStatus.OK and short.decoded_tokens == 0
    assert short.ms_per_token is None and short.decode_tok_s is None and "nothing decoded after it" in short.notes
    assert load_results_roundtrip(run).ms_per_token == pytest.approx(run.ms_per_token)


def load_results_roundtrip(run: RunRecord) -> RunRecord:
    """The record written to runs.csv and read back."""
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp())
    write_results(folder, [run], [], {})
    return load_results(folder)[0][0]


def test_a_speculative_engines_tokens_carry_their_step_to_the_window():
    """The worker's relay hands on each token's step (StampedToken.step), so the window's live line
    can count what the first step made as the record does (gui/live.py)."""
    import threading
    import time

    from whistle_stop.backends.engine import EngineOptions
    from whistle_stop.backends.sampling import Sampler, SamplingParams
    from whistle_stop.backends.sources.tokenizer import IncrementalDetokenizer
    from whistle_stop.backends.worker.child import _relay
    from whistle_stop.backends.worker.events import RunRequest

    engine = fake_engines.BurstEngine("first", EngineOptions(), burst=4, step_s=0.001, first=3)
    request = RunRequest("r", (1, 2, 3), 11, SamplingParams())
    sampler = Sampler(request.sampling)
    tokens = list(_relay(engine, request, sampler, IncrementalDetokenizer(), threading.Event(), time.perf_counter_ns()))
    assert [t.step for t in tokens] == [0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
