"""onnx-concat (classic past/present export) on random:tiny: parity with transformers, a growing
past, its own cache folder beside the other ONNX variants."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import engine_tokens, load_engine_in_process
from whistle_stop.backends import registry
from whistle_stop.backends.engine import EngineOptions
from whistle_stop.backends.storage import artifact_cache

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from whistle_stop.backends.engines.onnx import cache as onnx_cache  # noqa: E402
from whistle_stop.backends.engines.onnx import concat_cache  # noqa: E402

LOGIT_TOL = 1e-4  # as tests/test_onnx.py: fp32 vs transformers' eager fp32, different kernels


@pytest.fixture(scope="module")
def engine(tiny_model):
    engine = load_engine_in_process("onnx-concat", tiny_model)
    yield engine
    engine.close()


def test_greedy_equals_hf(tiny_model, prompt_ids, hf_reference):
    tokens = engine_tokens("onnx-concat", tiny_model, prompt_ids, 30)
    assert tokens == hf_reference.greedy(prompt_ids, 30)


def test_present_grows_one_position_per_decode_step(engine, tiny_model, prompt_ids, hf_reference):
    config = tiny_model.gpt2_config
    ids = list(prompt_ids)
    logits = engine.prefill(ids)
    for step in range(6):
        assert len(engine.past) == 2 * config.n_layer
        assert {p.shape for p in engine.past} == {(1, config.n_head, len(ids), config.head_dim)}, step
        ids.append(int(np.argmax(logits)))
        before = engine.past
        logits = engine.decode(ids[-1])
        # A new array each step (the classic way copies), its first positions the old past's.
        np.testing.assert_array_equal(engine.past[0][:, :, : len(ids) - 1], before[0])
        assert engine.past[0] is not before[0]
    np.testing.assert_allclose(logits, hf_reference.logits(ids)[-1], rtol=LOGIT_TOL, atol=LOGIT_TOL)


def test_forward_logits_leaves_the_sequence_alone(engine, prompt_ids, hf_reference):
    first = engine.prefill(prompt_ids)
    scored = engine.forward_logits(prompt_ids)
    np.testing.assert_allclose(scored, hf_reference.logits(prompt_ids), rtol=LOGIT_TOL, atol=LOGIT_TOL)
    token = int(np.argmax(first))
    reference = hf_reference.logits(list(prompt_ids) + [token])[-1]
    np.testing.assert_allclose(engine.decode(token), reference, rtol=LOGIT_TOL, atol=LOGIT_TOL)


def test_info_and_its_own_cache_folder(engine, tiny_model):
    folder = concat_cache.variant_dir(tiny_model)
    assert folder.parent == onnx_cache.variant_dir(tiny_model, "fp32").parent and folder.name != "fp32"
    assert artifact_cache.check(folder, concat_cache.meta(tiny_model)) == ""
    assert artifact_cache.engine_folders(registry.get("onnx-concat"), tiny_model) == [folder]
    again = registry.create("onnx-concat", EngineOptions(threads=1))
    info = again.load(tiny_model, lambda *a: None)
    again.close()
    assert info.artifact_cache == "hit" and info.build_s == 0.0 and "concatenated per step" in info.notes
    estimate = tiny_model.gpt2_config.weight_bytes(4, 4)
    assert abs(info.weight_bytes_per_token - estimate) < 0.01 * estimate
    assert info.kv_bytes_per_position == tiny_model.gpt2_config.kv_bytes_per_position(4)


def test_cache_hit_does_not_import_torch(engine):
    """The worker runs the cached graph with onnxruntime alone, as the `onnx` engine does."""
    code = (
        "import sys\n"
        "from whistle_stop.backends.sources.model_files import resolve_model\n"
        "from whistle_stop.backends.engine import EngineOptions\n"
        "from whistle_stop.backends.engines.onnx.concat_engine import OnnxConcatEngine\n"
        "engine = OnnxConcatEngine('onnx-concat', EngineOptions(threads=1))\n"
        "info = engine.load(resolve_model('random:tiny'), lambda *a: None)\n"
        "print(info.artifact_cache, 'torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
        env=dict(os.environ),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["hit", "False"]
