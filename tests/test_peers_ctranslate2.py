"""CTranslate2: greedy parity with transformers, exact token counts, the conversion cache.
The engine runs in spawned children (tests/engine_process.py): a crash fails one test."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import engine_tokens, load_engine_in_worker
from tests.engine_process import cancelled_stream
from whistle_stop.backends import registry
from whistle_stop.backends.sampling import SamplingParams

pytestmark = pytest.mark.peers
_AVAILABLE, _WHY = registry.available("ctranslate2")  # found, not imported: only the children import it
if not _AVAILABLE:
    pytest.skip(_WHY, allow_module_level=True)


def test_fp32_greedy_equals_hf(tiny_model, prompt_ids, hf_reference):
    tokens = engine_tokens("ctranslate2", tiny_model, prompt_ids, 24)
    assert tokens == hf_reference.greedy(prompt_ids, 24)
    assert len(set(tokens)) > 1


def test_int8_gives_exactly_n_tokens(tiny_model, prompt_ids):
    tokens = engine_tokens("ctranslate2-int8", tiny_model, prompt_ids, 17)
    assert len(tokens) == 17 and all(0 <= t < 50257 for t in tokens)


def test_forward_logits_match_hf(tiny_model, prompt_ids, hf_reference):
    with load_engine_in_worker("ctranslate2", tiny_model) as engine:
        np.testing.assert_allclose(engine.forward_logits(prompt_ids), hf_reference.logits(prompt_ids), atol=1e-3)


def test_sampling_is_noted_and_cancel_stops(tiny_model, prompt_ids):
    with load_engine_in_worker("ctranslate2", tiny_model) as engine:
        tokens = engine.apply(cancelled_stream, prompt_ids, 50, SamplingParams("sample", 0.8, 40, 0.9, 3), 3)
        assert len(tokens) == 3
        assert "CTranslate2's own sampler" in engine.run_notes


def test_conversion_cached_then_rebuilt_when_corrupt(tiny_model, prompt_ids, hf_reference):
    from whistle_stop.backends.storage import artifact_cache

    with load_engine_in_worker("ctranslate2", tiny_model) as first:
        folder = first.folder
    weights = folder / "model.bin"
    stamp = (weights.stat().st_ino, weights.stat().st_mtime_ns)
    load_engine_in_worker("ctranslate2", tiny_model).close()
    assert (weights.stat().st_ino, weights.stat().st_mtime_ns) == stamp  # not rebuilt
    with weights.open("r+b") as handle:
        handle.truncate(weights.stat().st_size // 2)
    assert artifact_cache.check(folder) != ""
    tokens = engine_tokens("ctranslate2", tiny_model, prompt_ids, 8)
    assert artifact_cache.check(folder) == ""
    assert tokens == hf_reference.greedy(prompt_ids, 8)


def test_gemm_backend_follows_the_cpu_vendor_and_the_note_says_which():
    """MKL's int8 GEMM is slow on AMD CPUs (16x here): oneDNN there; Intel keeps what measured best."""
    from whistle_stop.backends.engines.ctranslate2_engine import choose_use_mkl, gemm_note

    assert choose_use_mkl("int8", "AuthenticAMD") == "0" and choose_use_mkl("float32", "AuthenticAMD") == "0"
    assert choose_use_mkl("int8", "GenuineIntel") == "1" and choose_use_mkl("float32", "GenuineIntel") == "0"
    assert gemm_note("int8", "0", "AuthenticAMD", "chosen").startswith("GEMM backend oneDNN (CT2_USE_MKL=0")
    forced = gemm_note("int8", "1", "AuthenticAMD", "set by the user")
    assert "GEMM backend MKL" in forced and "set CT2_USE_MKL=0" in forced
    assert "GEMM backend MKL (CT2_USE_MKL=unset" in gemm_note("int8", "", "GenuineIntel", "default")


def test_loaded_engine_records_its_gemm_backend(tiny_model):
    from whistle_stop.backends.engines.ctranslate2_engine import cpu_vendor

    with load_engine_in_worker("ctranslate2-int8", tiny_model) as engine:
        info = engine.info
    assert "GEMM backend " in info.notes and (cpu_vendor() or "unknown") in info.notes
