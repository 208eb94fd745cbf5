"""llama.cpp: our own GGUF (names, metadata, tokenizer), parity with transformers, the GGUF cache."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from whistle_stop.backends.sampling import Sampler, SamplingParams
from tests.conftest import load_engine_in_process, engine_tokens

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")
pytestmark = pytest.mark.peers
N = 24


def test_f32_greedy_equals_hf(tiny_model, prompt_ids, hf_reference):
    tokens = engine_tokens("llamacpp", tiny_model, prompt_ids, N)
    assert tokens == hf_reference.greedy(prompt_ids, N)
    assert len(set(tokens)) > 1


def test_f32_logits_close_to_hf(tiny_model, prompt_ids, hf_reference):
    engine = load_engine_in_process("llamacpp", tiny_model)
    try:
        ids = list(prompt_ids)
        full = hf_reference.logits(ids + [11, 262])
        # ggml's GELU goes through an f16 lookup table, hence a looser bound than fp32 engines.
        np.testing.assert_allclose(engine.prefill(ids), full[len(ids) - 1], atol=2e-2)
        np.testing.assert_allclose(engine.decode(11), full[len(ids)], atol=2e-2)
        np.testing.assert_allclose(engine.decode(262), full[len(ids) + 1], atol=2e-2)
        # a new sequence forgets the old one's KV cache
        np.testing.assert_allclose(engine.prefill(ids[:5]), hf_reference.logits(ids[:5])[-1], atol=2e-2)
    finally:
        engine.close()


def test_f16_agreement_with_hf(tiny_model, prompt_ids, hf_reference):
    """f16 weights need not give HF's exact tokens; the agreement is reported, the count is exact."""
    tokens = engine_tokens("llamacpp-f16", tiny_model, prompt_ids, N)
    reference = hf_reference.greedy(prompt_ids, N)
    agree = sum(a == b for a, b in zip(tokens, reference))
    print(f"llamacpp-f16 agrees with HF fp32 on {agree}/{N} greedy tokens")
    assert len(tokens) == N and tokens[0] == reference[0]


@pytest.mark.parametrize("name", ["llamacpp-bf16", "llamacpp-q8_0", "llamacpp-q4_0"])
def test_quantised_variants_give_n_tokens(tiny_model, prompt_ids, name):
    engine = load_engine_in_process(name, tiny_model)
    try:
        cancel = threading.Event()
        tokens = list(engine.stream(prompt_ids, 9, Sampler(SamplingParams("sample", 0.9, 50, 0.95, 1)), cancel))
        assert len(tokens) == 9 and all(0 <= t < 50257 for t in tokens)
        quant = name.split("-")[1]
        assert quant in engine.folder.name
    finally:
        engine.close()


def test_gguf_metadata_and_tokenizer(tiny_model):
    import gguf
    import llama_cpp

    from whistle_stop.backends.engines.llamacpp.engine import GGUF_FILE, ensure_gguf
    from whistle_stop.backends.sources.tokenizer import encode

    path = ensure_gguf(tiny_model, "f32", 1, lambda *a: None) / GGUF_FILE
    reader = gguf.GGUFReader(str(path))
    field = lambda key: reader.fields[key].contents()  # noqa: E731
    assert field("general.architecture") == "gpt2" and field("tokenizer.ggml.pre") == "gpt-2"
    assert field("gpt2.context_length") == 1024 and field("gpt2.block_count") == 2
    assert field("tokenizer.ggml.bos_token_id") == field("tokenizer.ggml.eos_token_id") == 50256
    assert len(reader.fields["tokenizer.ggml.tokens"].data) == 50257
    assert "output.weight" not in {t.name for t in reader.tensors}  # tied: llama.cpp reuses token_embd
    del reader
    vocab_only = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    try:
        text = "Hello world! It's 2024, naïve café — ok?\n  indented   spaces"
        assert vocab_only.tokenize(text.encode(), add_bos=False, special=False) == encode(text)
    finally:
        vocab_only.close()


def test_gguf_cached_then_rebuilt_when_corrupt(tiny_model, prompt_ids, hf_reference):
    from whistle_stop.backends.storage import artifact_cache

    first = load_engine_in_process("llamacpp-q8_0", tiny_model)
    q8_folder = first.folder
    first.close()
    f32_file = q8_folder.parent / "f32" / "model.gguf"
    stamps = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (f32_file, q8_folder / "model.gguf")}
    load_engine_in_process("llamacpp-q8_0", tiny_model).close()
    load_engine_in_process("llamacpp", tiny_model).close()
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in stamps} == stamps  # nothing rebuilt
    with f32_file.open("r+b") as handle:
        handle.truncate(f32_file.stat().st_size // 3)
    assert artifact_cache.check(f32_file.parent) != ""
    tokens = engine_tokens("llamacpp", tiny_model, prompt_ids, 8)
    assert artifact_cache.check(f32_file.parent) == ""
    assert tokens == hf_reference.greedy(prompt_ids, 8)


def test_profile_uses_llamacpps_own_timings(tmp_path):
    """llama.cpp times its graph evaluation as a whole: that is "engine (not split)", the
    binding around it framework + Python, and the categories add up to the measured step."""
    from whistle_stop.backends.profile.categories import Category
    from whistle_stop.backends.results.bandwidth import Bandwidth
    from whistle_stop.backends.runs.config import BenchConfig
    from whistle_stop.backends.runs.profile import ProfileSession

    bandwidth = Bandwidth(10.0, 10.0, 1, 1, 1, "test", "now")
    config = BenchConfig(model="random:tiny", backends=("llamacpp",), prompt="Hello world, this is a test",
                         new_tokens=10, repeats=1, warmup=1, threads=1)
    (profile,) = ProfileSession(config, tmp_path, bandwidth=lambda threads, n_bytes, device="cpu": bandwidth).run().profiles
    assert profile.status == "ok", profile.error
    assert profile.profiler.startswith("llama.cpp timings")
    decode = profile.decode.categories
    assert decode[Category.ENGINE_UNSPLIT.value] > 0 and decode[Category.FRAMEWORK.value] >= 0
    assert abs(decode[Category.UNATTRIBUTED.value]) <= 0.1 * profile.decode.step_ms
    assert (tmp_path / "llamacpp.trace.json").exists()
