"""The null engine (no compute), the per-token engine/harness split, and the harness calibration."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import live_workers
from whistle_stop.backends import registry
from whistle_stop.backends.cli.main import main
from whistle_stop.backends.engine import Capabilities, EngineOptions
from whistle_stop.backends.engines.null_engine import NullEngine
from whistle_stop.backends.registry import EngineSpec
from whistle_stop.backends.results.summary import harness_note
from whistle_stop.backends.runs.bench import BenchConfig, BenchSession
from whistle_stop.backends.runs.calibration import calibrate_harness
from whistle_stop.backends.sampling import SamplingParams
from whistle_stop.backends.worker.events import RunRequest
from whistle_stop.backends.worker.process import Worker


class StreamingNullEngine(NullEngine):
    """A null engine with its own `stream` (as a server or a native generator has): the child
    can only relay its tokens, so engine_ns is unknown."""

    capabilities = Capabilities(own_loop=True)

    def stream(self, token_ids, new_tokens, sampler, cancel=None):
        for _ in range(new_tokens):
            yield sampler(self.prefill(token_ids))
            if cancel is not None and cancel.is_set():
                return


def _session(backends, specs=None, new_tokens=30, sampling=None, **config):
    cfg = BenchConfig(
        model="random:tiny",
        backends=tuple(backends),
        prompt_tokens=8,
        new_tokens=new_tokens,
        repeats=1,
        warmup=0,
        threads=1,
        sampling=sampling or SamplingParams(),
        **config,
    )
    with registry.use((specs or {}).values()):  # the session takes its engines' specs now
        return BenchSession(cfg)


def test_null_is_listed_like_any_engine(capsys):
    assert "null" in registry.names()
    spec = registry.get("null")
    assert spec.requires == ("numpy",) and spec.precision == "fp32"
    assert registry.available("null") == (True, "")
    assert main(["backends"]) == 0
    assert "null" in capsys.readouterr().out


def test_null_engine_returns_fixed_logits_of_the_vocab(tiny_model):
    engine = registry.create("null", EngineOptions(threads=1))
    info = engine.load(tiny_model, lambda *a, **k: None)
    first = engine.prefill([1, 2, 3])
    assert first.dtype == np.float32 and first.shape == (tiny_model.gpt2_config.vocab_size,)
    assert engine.decode(5) is first  # the same array: no compute at all
    assert not first.flags.writeable
    assert info.weight_bytes_per_token == 0 and info.dtype == "fp32"


def test_null_logits_are_spread_and_cost_no_numpy_random():
    """Its cold start is the floor under every engine's, so its load imports nothing they do not:
    numpy.random is imported on first use, ~5-15 ms that no other engine pays before Ready."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np; from whistle_stop.backends.engines.null_engine import fixed_logits; "
        "l = fixed_logits(50257); top = np.sort(l)[-2:]; "
        "print('numpy.random' in sys.modules, round(float(l.std()), 1), len(np.unique(l)) > 50000, "
        "top[1] > top[0])"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.split() == ["False", "3.0", "True", "True"]


def test_null_runs_and_its_split_adds_up_to_the_itl(tiny_model):
    result = _session(["null"]).run()
    (run,) = result.runs
    assert run.status == "ok" and run.tokens_generated == 30
    tokens = [t for t in result.tokens if t.run_id == run.run_id]
    assert len({t.token_id for t in tokens}) == 1  # greedy over fixed logits: one token, repeated
    for token in tokens:
        gap = token.t_ms if token.itl_ms is None else token.itl_ms  # token 0's gap is its TTFT
        assert token.engine_ms >= 0 and token.harness_ms >= 0
        assert token.engine_ms + token.harness_ms <= gap * 1.05 + 0.05
    assert run.harness_ms_per_token is not None and run.harness_ms_per_token >= 0
    assert run.cpu_s_per_token is not None and run.cpu_s_per_token > 0
    assert run.load_peak_rss_mb > 0 and run.peak_rss_mb > 0
    assert run.build_s == 0 and run.artifact_cache == "none" and run.native_sampling is False
    assert run.bandwidth_gb_s is None  # it reads no weights
    assert not live_workers()


def test_driving_prefill_and_decode_gives_the_tokens_of_engine_stream(tiny_model, prompt_ids):
    """The child drives prefill/decode itself (to time them); the tokens are Engine.stream's."""
    from whistle_stop.backends.sampling import Sampler

    sampling = SamplingParams("sample", 0.9, 20, 0.95, 7)
    engine = registry.create("numpy", EngineOptions(threads=1))
    engine.load(tiny_model, lambda *a, **k: None)
    expected = {
        "greedy": list(engine.stream(prompt_ids, 8, Sampler(SamplingParams()))),
        "sample": list(engine.stream(prompt_ids, 8, Sampler(sampling))),
    }
    worker = Worker(registry.get("numpy"), tiny_model, EngineOptions(threads=1))
    try:
        worker.start()
        for label, params in (("greedy", SamplingParams()), ("sample", sampling)):
            outcome = worker.run(RunRequest(f"numpy/{label}", tuple(prompt_ids), 8, params))
            assert outcome.status == "ok"
            assert [t.token_id for t in outcome.tokens] == expected[label]
            assert all(t.engine_ns is not None and t.engine_ns > 0 for t in outcome.tokens)
    finally:
        worker.close()


def test_an_engine_with_its_own_stream_has_no_engine_time(tiny_model):
    spec = EngineSpec(
        name="streams", target="tests.test_null_engine:StreamingNullEngine", description="relayed", requires=("numpy",)
    )
    result = _session(["streams"], specs={"streams": spec}, new_tokens=10).run()
    (run,) = result.runs
    assert run.status == "ok" and run.tokens_generated == 10
    tokens = [t for t in result.tokens if t.run_id == run.run_id]
    assert all(t.engine_ms is None and t.harness_ms is not None and t.harness_ms >= 0 for t in tokens)
    for token in tokens[1:]:
        assert token.harness_ms <= token.itl_ms * 1.05 + 0.05


def test_calibration_gives_the_null_engines_median_itl(tiny_model, prompt_ids):
    sampling = SamplingParams("sample", 0.8, 40, 0.9, 1)
    harness = calibrate_harness(tiny_model, prompt_ids, sampling, tokens=50)
    assert "error" not in harness, harness
    assert harness["sampling"] == "greedy" and harness["tokens"] == 50
    assert harness["null_itl_us_median"] > 0 and harness["harness_us_median"] >= 0
    assert 0 < harness["null_cold_start_s"] < 60
    assert harness["sampled"]["null_itl_us_median"] > 0
    assert harness["sampled"]["sampling"]["top_k"] == 40
    line = harness_note(harness)
    assert line.startswith("harness cost per token (null engine): ") and "(greedy)" in line and "(sampled)" in line
    assert f"its cold start {harness['null_cold_start_s']:.2f} s" in line
    assert not live_workers()


def test_calibration_is_off_unless_asked_and_lands_in_environment(tiny_model):
    assert "harness" not in _session(["null"], new_tokens=3).run().environment
    environment = _session(["null"], new_tokens=3, calibrate_harness=True).run().environment
    assert environment["harness"]["null_itl_us_median"] > 0
    json.dumps(environment)  # environment.json must be able to hold it


@pytest.mark.parametrize(
    "harness, text",
    [
        (None, ""),
        ({"error": "cancelled"}, "not measured (cancelled)"),
        ({"null_itl_us_median": 41.7}, "harness cost per token (null engine): 42 us (greedy)"),
        (
            {"null_itl_us_median": 41.7, "null_cold_start_s": 0.3412},
            "harness cost per token (null engine): 42 us (greedy); its cold start 0.34 s",
        ),
    ],
)
def test_harness_note(harness, text):
    assert text in harness_note(harness) and (text or harness_note(harness) == "")
