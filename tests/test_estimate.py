"""Before Run: how many runs, which one-time builds are still to make, and about how long."""

import dataclasses
import json

import pytest

from tests.test_verdict import _run
from whistle_stop.backends import registry
from whistle_stop.backends.gpt2_config import GPT2Config
from whistle_stop.backends.machine import bandwidth
from whistle_stop.backends.results import engine_history
from whistle_stop.backends.runs.config import BenchConfig
from whistle_stop.backends.runs.estimate import estimate, guess_seconds
from whistle_stop.backends.storage import artifact_cache

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


def test_history_keeps_the_builds_and_speeds_of_the_last_sessions(tiny_model):
    first = [_run("hist-a", r, 10.0, build_s=18.6, cold=1.2 if r == 1 else None) for r in (1, 2, 3)]
    engine_history.remember(first, tiny_model.weights_hash)
    seen = engine_history.lookup("hist-a", tiny_model.weights_hash)
    assert seen.build_s == pytest.approx(18.6) and seen.cold_start_s == pytest.approx(1.2)
    assert seen.ms_per_token == pytest.approx(10.0) and seen.ttft_ms == pytest.approx(10.0) and seen.sessions == 1
    cached = [_run("hist-a", r, 12.0, build_s=0.0, cold=0.9 if r == 1 else None) for r in (1, 2, 3)]
    engine_history.remember(cached, tiny_model.weights_hash)
    seen = engine_history.lookup("hist-a", tiny_model.weights_hash)
    assert seen.build_s == pytest.approx(18.6)  # a cached start made no build
    assert seen.ms_per_token == pytest.approx(11.0) and seen.sessions == 2  # the median of both sessions
    assert engine_history.lookup("hist-a", "another-model") is None


@pytest.fixture
def own_history(tmp_path, monkeypatch):
    """A cache folder of this test's own: the history file it writes or spoils is no other test's."""
    monkeypatch.setenv("WHISTLE_STOP_CACHE", str(tmp_path))
    return tmp_path / engine_history.HISTORY_JSON


def _session(engine: str, ms: float, build_s: float = 0.0) -> list:
    return [_run(engine, r, ms, build_s=build_s, cold=1.0 if r == 1 else None) for r in (1, 2)]


def test_one_slow_session_does_not_move_the_estimate(tiny_model, building, own_history):
    """The estimate took each engine's last session only: one run on a cold cache or a busy machine
    set the next estimate. It is the median of the last KEEP sessions now, and the file stays small."""
    config = BenchConfig(backends=("est-plain",), new_tokens=11, repeats=3, warmup=1)
    for _ in range(4):
        engine_history.remember(_session("est-plain", 10.0), tiny_model.weights_hash)
    steady = estimate(config, tiny_model).seconds
    assert steady == pytest.approx(1.0 + 4 * 0.11)  # cold start + 4 runs x (TTFT + 10 tokens) at 10 ms
    engine_history.remember(_session("est-plain", 100.0), tiny_model.weights_hash)  # the outlier
    assert estimate(config, tiny_model).seconds == pytest.approx(steady)
    for _ in range(engine_history.KEEP):  # the machine got slower for good: the older sessions leave
        engine_history.remember(_session("est-plain", 20.0), tiny_model.weights_hash)
    assert engine_history.lookup("est-plain", tiny_model.weights_hash).ms_per_token == pytest.approx(20.0)
    entry = json.loads(own_history.read_text())["entries"][f"est-plain|{tiny_model.weights_hash}"]
    assert all(len(entry[name]) == engine_history.KEEP for name in ("ms_per_token", "ttft_ms", "cold_start_s"))


def test_the_history_keeps_the_pairs_measured_last(tiny_model, own_history, monkeypatch):
    monkeypatch.setattr(engine_history, "MAX_ENTRIES", 3)
    for name in ("h1", "h2", "h3", "h4"):
        engine_history.remember(_session(name, 10.0), tiny_model.weights_hash)
    engine_history.remember(_session("h2", 10.0), tiny_model.weights_hash)  # measured again: newest
    engine_history.remember(_session("h5", 10.0), tiny_model.weights_hash)
    kept = [key.split("|")[0] for key in json.loads(own_history.read_text())["entries"]]
    assert kept == ["h4", "h2", "h5"]


def test_the_first_format_still_loads(tiny_model, own_history):
    """The first format kept each engine's last figures as plain numbers: each is one session now."""
    key = f"old-a|{tiny_model.weights_hash}"
    old = {
        "build_s": 18.6,
        "cold_start_s": 1.2,
        "measured_at": "2025-01-01T00:00:00+0000",
        "ms_per_token": 10.0,
        "ttft_ms": 30.0,
    }
    own_history.write_text(json.dumps({key: old, f"old-b|{tiny_model.weights_hash}": {"build_s": 2.0}}, indent=1))
    seen = engine_history.lookup("old-a", tiny_model.weights_hash)
    assert seen == engine_history.EngineHistory(18.6, 1.2, 30.0, 10.0, "2025-01-01T00:00:00+0000", sessions=1)
    assert engine_history.lookup("old-b", tiny_model.weights_hash).build_s == 2.0
    engine_history.remember(_session("old-a", 12.0), tiny_model.weights_hash)
    data = json.loads(own_history.read_text())
    assert data["format"] == engine_history.FORMAT and data["entries"][key]["ms_per_token"] == [10.0, 12.0]
    assert engine_history.lookup("old-a", tiny_model.weights_hash).ms_per_token == pytest.approx(11.0)
    assert engine_history.lookup("old-b", tiny_model.weights_hash).build_s == 2.0


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\xff not json",
        b"[1, 2]",
        b'{"format": 99, "entries": {"h|x": {"ms_per_token": [1.0]}}}',
        b'{"format": 2, "entries": []}',
        b'{"h|x": "fast", "bad|x": {"ms_per_token": "fast", "ttft_ms": [true, -1, NaN, "1"], "measured_at": 5}}',
    ],
    ids=["bytes", "list", "later-format", "no-entries", "bad-values"],
)
def test_a_history_it_cannot_read_counts_as_empty(content, own_history):
    own_history.write_bytes(content)
    assert engine_history.lookup("h", "x") is None and engine_history.lookup("bad", "x") is None
    engine_history.remember(_session("h", 10.0), "x")  # and is replaced by a good one
    assert engine_history.lookup("h", "x").ms_per_token == pytest.approx(10.0)


def test_estimate_names_missing_builds_with_their_last_duration(tiny_model, building):
    config = BenchConfig(backends=("est-builder", "est-plain"), new_tokens=11, repeats=3, warmup=1)
    before = estimate(config, tiny_model)
    assert before.runs == 8 and [b.engine for b in before.builds] == ["est-builder"]
    assert before.guessed == ("est-builder", "est-plain") and "builds never timed not counted" in before.lines()[-1]
    assert "one-time builds first: never timed here: est-builder" in before.lines()[1]
    engine_history.remember(
        [_run("est-builder", r, 10.0, build_s=5.0, cold=1.0 if r == 1 else None) for r in (1, 2)],
        tiny_model.weights_hash,
    )
    timed = estimate(config, tiny_model)
    # cold start 1 s + build 5 s + 4 runs x (TTFT 10 ms + 10 x 10 ms) = 6.44 s; plain never ran here: guessed
    plain = guess_seconds(config, tiny_model.gpt2_config, "fp32", False, None)
    assert timed.seconds == pytest.approx(6.44 + plain) and timed.guessed == ("est-plain",)
    assert "one-time builds first: est-builder (about 5.0 s here)" in timed.lines()[1]
    assert "a rough guess for est-plain (never run here" in timed.lines()[-1]
    artifact_cache.ensure(KIND, tiny_model.weights_hash, "v1", lambda folder: (folder / "w.bin").write_bytes(b"x"))
    assert estimate(config, tiny_model).builds == ()


def test_an_engine_never_run_here_is_guessed_from_the_models_size_and_the_machine(tiny_model, building):
    """With no history the time was unknown, or minutes for a 2-layer model (a gpt2-sized cost per
    token): the guess scales with the weights read per token and uses the cached bandwidth probe."""
    config = BenchConfig(backends=("est-plain",), new_tokens=64, repeats=3, warmup=1, threads=2)
    assumed = estimate(config, tiny_model)
    assert assumed.guessed == ("est-plain",) and assumed.seconds is not None and not assumed.probed
    assert "a rough guess for est-plain" in assumed.lines()[-1] and "none probed here yet" in assumed.lines()[-1]
    assert assumed.seconds < 10  # 2 layers, 64 tokens, 4 runs: seconds, never minutes

    def decode_s(gpt2: GPT2Config, precision: str = "fp32", machine=None) -> float:  # one run's 64 more tokens
        longer = dataclasses.replace(config, new_tokens=128)
        return (
            guess_seconds(longer, gpt2, precision, False, machine)
            - guess_seconds(config, gpt2, precision, False, machine)
        ) / 4

    gpt2 = GPT2Config(n_layer=12, n_head=12, n_embd=768, vocab_size=50257)
    tiny = tiny_model.gpt2_config
    assert decode_s(gpt2) > 10 * decode_s(tiny)  # ~37x the weights per token
    assert decode_s(gpt2, "int8") < decode_s(gpt2) / 2  # a quarter of the bytes

    fast = bandwidth.Bandwidth(100.0, 90.0, 1 << 30, 2, 5, "cpu", "now", compute_gflops=500.0)
    bandwidth.write_probe_cache(bandwidth.CACHE_FILE, bandwidth.probe_key(2), fast.as_dict())
    probed = estimate(config, tiny_model)
    assert probed.probed and "this machine's bandwidth" in probed.lines()[-1]
    assert probed.seconds < assumed.seconds and decode_s(gpt2, machine=fast) < decode_s(gpt2) / 5


def test_without_the_model_builds_are_unknown(building):
    assert "not known until the model is here" in " ".join(
        estimate(BenchConfig(backends=("est-builder",)), None).lines()
    )


def test_cached_model_finds_files_already_here_and_never_makes_them(tiny_model):
    from whistle_stop.backends.sources.model_files import cached_model

    assert cached_model("random:tiny").weights_hash == tiny_model.weights_hash
    assert cached_model("random:gpt2-large") is None  # (the isolated cache never made it; nor does this)
    assert cached_model("random:gpt2-large") is None and cached_model("./no-such-folder") is None
