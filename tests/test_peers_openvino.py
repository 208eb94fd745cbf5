"""OpenVINO: our own stateful GPT-2 graph, greedy parity with transformers, the IR cache.
The engine runs in spawned children (tests/engine_process.py): a crash fails one test."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import engine_tokens, load_engine_in_worker
from whistle_stop.backends import registry

pytestmark = pytest.mark.peers
_AVAILABLE, _WHY = registry.available("openvino")  # found, not imported: only the children import it
if not _AVAILABLE:
    pytest.skip(_WHY, allow_module_level=True)


def test_fp32_greedy_equals_hf(tiny_model, prompt_ids, hf_reference):
    tokens = engine_tokens("openvino", tiny_model, prompt_ids, 24)
    assert tokens == hf_reference.greedy(prompt_ids, 24)
    assert len(set(tokens)) > 1


def test_prefill_and_decode_logits_match_hf(tiny_model, prompt_ids, hf_reference):
    with load_engine_in_worker("openvino", tiny_model) as engine:
        ids = list(prompt_ids)
        full = hf_reference.logits(ids + [11, 262, 318])
        np.testing.assert_allclose(engine.prefill(ids), full[len(ids) - 1], atol=1e-4)
        for offset, token in enumerate([11, 262, 318]):
            np.testing.assert_allclose(engine.decode(token), full[len(ids) + offset], atol=1e-4)
        # A second sequence starts from an empty KV cache (reset_state), not after the first.
        np.testing.assert_allclose(engine.prefill(ids[:5]), hf_reference.logits(ids[:5])[-1], atol=1e-4)


def _runtime_layers(engine) -> tuple[list[str], set[str]]:
    """In the engine's child: the weight element type of each FullyConnected node of the compiled
    model, and the kinds of all its nodes."""
    runtime = engine.request.get_compiled_model().get_runtime_model()
    fc = [op for op in runtime.get_ops() if op.get_rt_info()["layerType"].astype(str) == "FullyConnected"]
    kinds = {op.get_rt_info()["layerType"].astype(str) for op in runtime.get_ops()}
    return [op.input(1).get_element_type().to_string() for op in fc], kinds


def test_int8_weights_compressed_and_n_tokens(tiny_model, prompt_ids):
    with load_engine_in_worker("openvino-int8", tiny_model) as engine:
        fc_weights, kinds = engine.apply(_runtime_layers)
    assert fc_weights and all(element == "i8" for element in fc_weights)
    assert "ScaledDotProductAttention" in kinds  # the fused attention with the in-place KV cache
    tokens = engine_tokens("openvino-int8", tiny_model, prompt_ids, 15)
    assert len(tokens) == 15


def test_ir_cached_then_rebuilt_when_corrupt(tiny_model, prompt_ids, hf_reference):
    from whistle_stop.backends.storage import artifact_cache

    with load_engine_in_worker("openvino", tiny_model) as first:
        folder = first.folder
    weights = folder / "model.bin"
    stamp = (weights.stat().st_ino, weights.stat().st_mtime_ns)
    load_engine_in_worker("openvino", tiny_model).close()
    assert (weights.stat().st_ino, weights.stat().st_mtime_ns) == stamp  # not rebuilt
    with weights.open("r+b") as handle:
        handle.truncate(weights.stat().st_size - 100)
    assert artifact_cache.check(folder) != ""
    tokens = engine_tokens("openvino", tiny_model, prompt_ids, 8)
    assert artifact_cache.check(folder) == ""
    assert tokens == hf_reference.greedy(prompt_ids, 8)


def test_profile_reads_openvinos_performance_counters(tmp_path):
    import json

    from whistle_stop.backends.machine.bandwidth import Bandwidth
    from whistle_stop.backends.profilers.categories import Category
    from whistle_stop.backends.runs.config import BenchConfig
    from whistle_stop.backends.runs.profile import ProfileSession

    bandwidth = Bandwidth(10.0, 10.0, 1, 1, 1, "test", "now")
    config = BenchConfig(
        model="random:tiny",
        backends=("openvino",),
        prompt="Hello world, this is a test",
        new_tokens=10,
        repeats=1,
        warmup=1,
        threads=1,
    )
    session = ProfileSession(config, tmp_path, bandwidth=lambda threads, n_bytes, device="cpu": bandwidth)
    (profile,) = session.run().profiles
    assert profile.status == "ok", profile.error
    assert profile.profiler == "OpenVINO performance counters"
    decode = profile.decode.categories
    assert decode[Category.MATMUL.value] > 0
    assert abs(decode[Category.UNATTRIBUTED.value]) <= 0.1 * profile.decode.step_ms
    events = json.loads((tmp_path / "openvino.trace.json").read_text())["traceEvents"]
    assert any(e["name"] == "whistle_stop::decode" for e in events) and len(events) > 20
