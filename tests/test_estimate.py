"""Before Run: how many runs, which one-time builds are still to make, and about how long."""

import dataclasses

import pytest

from tests.test_verdict import _run
from whistle_stop.backends import registry
from whistle_stop.backends.runs.config import BenchConfig
from whistle_stop.backends.runs.estimate import estimate
from whistle_stop.backends.storage import artifact_cache, engine_history

KIND = "estimate-test"


def folders(model, **_kwargs):
    """A building engine's cached folder (as backends/engines/artifact_folders.py names them)."""
    return [artifact_cache.cache_dir(KIND, model.weights_hash) / "v1"]


@pytest.fixture
def building(monkeypatch):
    from tests import fake_engines

    spec = dataclasses.replace(fake_engines.spec("est-builder"), artifacts="tests.test_estimate:folders")
    monkeypatch.setitem(registry.ENGINES, "est-builder", spec)
    monkeypatch.setitem(registry.ENGINES, "est-plain", fake_engines.spec("est-plain"))
    return spec


def test_history_keeps_the_last_build_and_the_last_speed(tiny_model):
    first = [_run("hist-a", r, 10.0, build_s=18.6, cold=1.2 if r == 1 else None) for r in (1, 2, 3)]
    engine_history.remember(first, tiny_model.weights_hash)
    seen = engine_history.lookup("hist-a", tiny_model.weights_hash)
    assert seen.build_s == pytest.approx(18.6) and seen.cold_start_s == pytest.approx(1.2)
    assert seen.ms_per_token == pytest.approx(10.0) and seen.ttft_ms == pytest.approx(10.0)
    cached = [_run("hist-a", r, 12.0, build_s=0.0, cold=0.9 if r == 1 else None) for r in (1, 2, 3)]
    engine_history.remember(cached, tiny_model.weights_hash)
    seen = engine_history.lookup("hist-a", tiny_model.weights_hash)
    assert seen.build_s == pytest.approx(18.6) and seen.ms_per_token == pytest.approx(12.0)  # a cached start keeps it
    assert engine_history.lookup("hist-a", "another-model") is None


def test_estimate_names_missing_builds_with_their_last_duration(tiny_model, building):
    config = BenchConfig(backends=("est-builder", "est-plain"), new_tokens=11, repeats=3, warmup=1)
    before = estimate(config, tiny_model)
    assert before.runs == 8 and [b.engine for b in before.builds] == ["est-builder"]
    assert before.seconds is None and "time: unknown" in before.lines()[-1]
    assert "one-time builds first: never timed here: est-builder" in before.lines()[1]
    engine_history.remember(
        [_run("est-builder", r, 10.0, build_s=5.0, cold=1.0 if r == 1 else None) for r in (1, 2)],
        tiny_model.weights_hash,
    )
    timed = estimate(config, tiny_model)
    # cold start 1 s + build 5 s + 4 runs x (TTFT 10 ms + 10 x 10 ms) = 6.44 s; plain never ran here
    assert timed.seconds == pytest.approx(6.44) and timed.untimed == ("est-plain",)
    assert "one-time builds first: est-builder (last 5.0 s)" in timed.lines()[1]
    assert "about 6 s, not counting est-plain" in timed.lines()[-1]
    artifact_cache.ensure(KIND, tiny_model.weights_hash, "v1", lambda folder: (folder / "w.bin").write_bytes(b"x"))
    assert estimate(config, tiny_model).builds == ()


def test_without_the_model_builds_are_unknown(building):
    assert "not known until the model is here" in " ".join(
        estimate(BenchConfig(backends=("est-builder",)), None).lines()
    )


def test_cached_model_finds_files_already_here_and_never_makes_them(tiny_model):
    from whistle_stop.backends.sources.model_files import cached_model

    assert cached_model("random:tiny").weights_hash == tiny_model.weights_hash
    assert cached_model("random:gpt2-large") is None  # (the isolated cache never made it; nor does this)
    assert cached_model("random:gpt2-large") is None and cached_model("./no-such-folder") is None
