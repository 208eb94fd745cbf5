"""ONNX Runtime GenAI engines on random:tiny: parity with transformers, agreement of the quantised
variants, native sampling, and the artefact cache. The engines run in spawned children
(tests/engine_process.py): a crash fails one test, not the suite."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.conftest import engine_tokens, load_engine_in_worker
from tests.engine_process import EngineProcess, cancelled_stream
from whistle_stop.backends import registry
from whistle_stop.backends.engine import EngineInfo
from whistle_stop.backends.engines import artifact_folders
from whistle_stop.backends.engines.ortgenai import cache as genai_cache
from whistle_stop.backends.results.stats import agreement
from whistle_stop.backends.sampling import Sampler, SamplingParams
from whistle_stop.backends.storage import artifact_cache

pytestmark = [pytest.mark.extras]
_AVAILABLE, _WHY = registry.available("ortgenai")  # onnxruntime_genai, onnx, torch (the export): found, not imported
if not _AVAILABLE:
    pytest.skip(_WHY, allow_module_level=True)

N = 24
SAMPLED = SamplingParams("sample", 0.8, 40, 0.9, 7)


def load(model, variant: str = "fp32") -> tuple[EngineProcess, EngineInfo]:
    engine = load_engine_in_worker("ortgenai" if variant == "fp32" else f"ortgenai-{variant}", model)
    return engine, engine.info


def tokens_of(engine: EngineProcess, ids, n: int, params: SamplingParams = SamplingParams()) -> list[int]:
    return engine.tokens(ids, n, params)


def _genai_version(_engine) -> str:
    import onnxruntime_genai as og

    return og.__version__


@pytest.fixture(scope="module")
def fp32(tiny_model):
    engine, info = load(tiny_model)
    yield engine, info
    engine.close()


def _search_options_of_a_run(engine, ids: list[int], sampling: SamplingParams) -> list[dict]:
    """In the engine's child: the search options each Generator of one run was given."""
    og, seen = engine.og, []
    real = og.GeneratorParams

    class Recording:
        def __init__(self, model) -> None:
            self.params = real(model)

        def set_search_options(self, **options) -> None:
            seen.append(options)
            self.params.set_search_options(**options)

    generator = og.Generator
    og.GeneratorParams, og.Generator = Recording, lambda model, params: generator(model, params.params)
    try:
        list(engine.stream(ids, 3, Sampler(sampling)))
    finally:
        og.GeneratorParams, og.Generator = real, generator
    return seen


def test_every_run_seeds_genai_so_no_request_waits_on_the_cpu_s_entropy(fp32, prompt_ids):
    """Without a seed each Generator seeds its sampler from std::random_device: RDSEED retries took
    12-15 ms a request on a VM that traps it, greedy runs included, and sat in every TTFT."""
    for sampling in (SamplingParams(), SAMPLED):
        (options,) = fp32[0].apply(_search_options_of_a_run, list(prompt_ids), sampling)
        assert options["random_seed"] == sampling.seed


def test_fp32_greedy_equals_hf(fp32, prompt_ids, hf_reference):
    tokens = tokens_of(fp32[0], prompt_ids, N)
    assert tokens == hf_reference.greedy(prompt_ids, N)
    assert len(set(tokens)) > 1


def test_fp32_logits_match_hf(fp32, prompt_ids, hf_reference):
    # Same math, other kernels: measured ~5e-6 on logits of magnitude ~10.
    np.testing.assert_allclose(fp32[0].forward_logits(prompt_ids), hf_reference.logits(prompt_ids), atol=1e-4)


def test_info_and_folder(fp32, tiny_model):
    engine, info = fp32
    assert info.samples_natively and "tokens from GenAI's own loop" in info.notes
    assert f"onnxruntime-genai {engine.apply(_genai_version)}" in info.notes and "threads=1" in info.notes
    assert info.kv_bytes_per_position == tiny_model.gpt2_config.kv_bytes_per_position(4)
    estimate = tiny_model.gpt2_config.weight_bytes(4, 4)
    assert abs(info.weight_bytes_per_token - estimate) < 0.01 * estimate
    # The folder the registry's light function names (page-cache eviction for --cold).
    assert artifact_folders.ortgenai(tiny_model, "fp32") == [engine.folder]
    assert artifact_cache.engine_folders(registry.get("ortgenai"), tiny_model) == [engine.folder]
    assert (engine.folder / "genai_config.json").is_file()


@pytest.mark.parametrize("variant", ["int8", "int4"])
def test_quantised_runs_and_reports_agreement(variant, fp32, tiny_model, prompt_ids, hf_reference):
    engine, info = load(tiny_model, variant)
    try:
        tokens = tokens_of(engine, prompt_ids, N)
        same, first = agreement(hf_reference.greedy(prompt_ids, N), tokens)
        print(f"ortgenai-{variant}: {same} of {N} greedy tokens equal to hf fp32 before the first divergence ({first})")
        assert len(tokens) == N and all(0 <= t < 50257 for t in tokens)
        assert info.weight_bytes_per_token < fp32[1].weight_bytes_per_token
        assert f"MatMulNBits {variant[3:]}-bit" in info.notes
        correlation = np.corrcoef(
            engine.forward_logits(prompt_ids).ravel(), fp32[0].forward_logits(prompt_ids).ravel()
        )[0, 1]
        print(f"ortgenai-{variant}: logit correlation with fp32 {correlation:.4f}")
        assert correlation > 0.9
    finally:
        engine.close()


def test_sampling_is_native_reproducible_and_cancellable(fp32, prompt_ids):
    engine = fp32[0]
    first, second = tokens_of(engine, prompt_ids, N, SAMPLED), tokens_of(engine, prompt_ids, N, SAMPLED)
    assert first == second and len(first) == N
    assert "GenAI's own sampler" in engine.run_notes
    got = engine.apply(cancelled_stream, prompt_ids, 50, SAMPLED, 3)
    assert len(got) == 3


def test_cache_hit_then_rebuilt_when_corrupt(fp32, tiny_model, prompt_ids, hf_reference):
    engine, info = load(tiny_model)
    folder = engine.folder
    engine.close()
    assert info.artifact_cache == "hit" and info.build_s == 0.0
    # Half the weights, as a new file: the fp32 fixture's session may still map the old one.
    weights = folder / "model.onnx.data"
    half = weights.with_name("half.tmp")
    half.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    os.replace(half, weights)
    assert artifact_cache.check(folder, genai_cache.meta(tiny_model, "fp32")) != ""
    rebuilt, info = load(tiny_model)
    try:
        assert info.artifact_cache == "miss" and info.build_s > 0
        assert artifact_cache.check(folder, genai_cache.meta(tiny_model, "fp32")) == ""
        assert tokens_of(rebuilt, prompt_ids, 8) == hf_reference.greedy(prompt_ids, 8)
    finally:
        rebuilt.close()


def test_registry_names_give_exact_token_counts(tiny_model, prompt_ids):
    assert len(engine_tokens("ortgenai-int4", tiny_model, prompt_ids, 17)) == 17
