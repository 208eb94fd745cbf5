"""OpenVINO GenAI: LLMPipeline on our own IR + OpenVINO tokenizer; parity, agreement, the cache.
The engines run in spawned children (tests/engine_process.py): a crash fails one test."""

from __future__ import annotations

import pytest

from tests.conftest import engine_tokens, load_engine_in_worker
from tests.engine_process import EngineProcess, cancelled_stream
from whistle_stop.backends import registry
from whistle_stop.backends.engine import EngineInfo
from whistle_stop.backends.results.stats import agreement
from whistle_stop.backends.sampling import SamplingParams

pytestmark = [pytest.mark.extras]
_AVAILABLE, _WHY = registry.available("openvino-genai")  # found, not imported: only the children import it
if not _AVAILABLE:
    pytest.skip(_WHY, allow_module_level=True)


def _load(name, model) -> tuple[EngineProcess, EngineInfo]:
    engine = load_engine_in_worker(name, model)
    return engine, engine.info


def test_fp32_greedy_equals_hf(tiny_model, prompt_ids, hf_reference):
    tokens = engine_tokens("openvino-genai", tiny_model, prompt_ids, 24)
    assert tokens == hf_reference.greedy(prompt_ids, 24)
    assert len(set(tokens)) > 1


@pytest.mark.parametrize("name", ["openvino-genai-int8", "openvino-genai-int4", "openvino-genai-bf16"])
def test_variants_give_exactly_n_tokens_and_report_agreement(name, tiny_model, prompt_ids, hf_reference):
    engine, info = _load(name, tiny_model)
    with engine:
        tokens = engine.tokens(prompt_ids, 24)
        assert len(engine.tokens(prompt_ids, 17)) == 17
    assert len(tokens) == 24 and all(0 <= t < 50257 for t in tokens)
    agree, first = agreement(hf_reference.greedy(prompt_ids, 24), tokens)
    print(f"{name}: {agree}/24 tokens agree with hf before the first divergence ({first})")
    assert info.samples_natively and "stamped per token" in info.notes
    if name.endswith("bf16"):
        assert "INFERENCE_PRECISION_HINT=bf16" in info.notes


def _fully_connected_weights(engine) -> list[str]:
    """In the engine's child: the weight element type of each FullyConnected node of its IR, compiled
    for the CPU at f32."""
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(
        core.read_model(engine.folder / "openvino_model.xml"),
        "CPU",
        {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0},
    )
    runtime = compiled.get_runtime_model()
    fc = [op for op in runtime.get_ops() if op.get_rt_info()["layerType"].astype(str) == "FullyConnected"]
    return [op.input(1).get_element_type().to_string() for op in fc]


def test_quantised_weights_are_compressed(tiny_model):
    """The IR's linears run as weight-compressed FullyConnected nodes (i8 / i4 weights)."""
    for name, kinds in (("openvino-genai-int8", {"i8"}), ("openvino-genai-int4", {"i4", "i8"})):
        engine, info = _load(name, tiny_model)
        with engine:
            fc = engine.apply(_fully_connected_weights)
        assert fc and set(fc) == kinds
        assert info.dtype == name.rsplit("-", 1)[1]


def test_sampling_is_native_reproducible_and_cancel_stops(tiny_model, prompt_ids):
    with load_engine_in_worker("openvino-genai", tiny_model) as engine:
        params = SamplingParams("sample", 0.8, 40, 0.9, 3)
        first = engine.tokens(prompt_ids, 12, params)
        assert "OpenVINO GenAI's own sampler" in engine.run_notes
        assert engine.tokens(prompt_ids, 12, params) == first and len(first) == 12
        tokens = engine.apply(cancelled_stream, prompt_ids, 200, params, 3)
        assert len(tokens) == 3
        assert engine.tokens(prompt_ids, 5) and engine.run_notes == ""


def test_artefact_cached_then_rebuilt_when_corrupt(tiny_model, prompt_ids, hf_reference):
    from whistle_stop.backends.engines import artifact_folders
    from whistle_stop.backends.storage import artifact_cache

    first, _ = _load("openvino-genai", tiny_model)
    folder = first.folder
    first.close()
    assert folder == artifact_folders.openvino_genai(tiny_model, "fp32")[0]
    for name in ("openvino_model.xml", "openvino_model.bin", "openvino_tokenizer.xml", "openvino_detokenizer.xml"):
        assert (folder / name).is_file()
    weights = folder / "openvino_model.bin"
    stamp = (weights.stat().st_ino, weights.stat().st_mtime_ns)
    second, info = _load("openvino-genai", tiny_model)
    second.close()
    assert info.artifact_cache == "hit" and info.build_s == 0.0
    assert (weights.stat().st_ino, weights.stat().st_mtime_ns) == stamp  # not rebuilt
    with weights.open("r+b") as handle:
        handle.truncate(weights.stat().st_size - 100)
    assert artifact_cache.check(folder) != ""
    third, info = _load("openvino-genai", tiny_model)
    with third:
        assert info.artifact_cache == "miss" and info.build_s > 0
        assert artifact_cache.check(folder) == ""
        assert third.tokens(prompt_ids, 8) == hf_reference.greedy(prompt_ids, 8)
