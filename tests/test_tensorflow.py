"""The TensorFlow engines (`tf`, `tf-xla`): our TF 2 GPT-2 against transformers on random:tiny.

Skipped when tensorflow is not installed (the [tf] extra). One engine of each kind is loaded per
module, in a spawned child (tests/engine_process.py: a crash fails one test; TensorFlow's start-up
and the traces cost seconds), and every test starts a new sequence. TensorFlow is imported only there.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import greedy_logits
from whistle_stop.backends import registry
from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.sources.prompts import prompt_of_length

pytestmark = [pytest.mark.extras]
_AVAILABLE, _WHY = registry.available("tf")  # found, not imported
if not _AVAILABLE:
    pytest.skip(_WHY, allow_module_level=True)

VOCAB = 50257
ATOL_FP32 = 1e-4  # tiny's logits reach ~8
NAMES = ["tf", "tf-xla"]


@pytest.mark.parametrize("name", NAMES)
def test_greedy_equals_hf(name, engines, prompt_ids, hf_reference):
    tokens = engines(name).tokens(prompt_ids, 24)
    assert tokens == hf_reference.greedy(prompt_ids, 24)


@pytest.mark.parametrize("name", NAMES)
def test_prefill_and_decode_logits_match_hf(name, engines, prompt_ids, hf_reference):
    engine = engines(name)
    tokens, logits = greedy_logits(engine, prompt_ids, 6)
    reference = hf_reference.logits(prompt_ids + tokens)[len(prompt_ids) - 1 :]
    assert logits.dtype == np.float32 and logits.shape == (7, VOCAB)
    np.testing.assert_allclose(logits, reference, atol=ATOL_FP32, rtol=0)


def _traces(engine, xla: bool) -> tuple[int, int, str | None]:
    """In the engine's child: how often decode and prefill were traced, and decode's HLO under XLA."""
    decode, prefill = engine.model.decode_fn, engine.model.prefill_fn
    counts = decode.experimental_get_tracing_count(), prefill.experimental_get_tracing_count()
    return *counts, decode.experimental_get_compiler_ir(np.int32(0), np.int32(0))(stage="hlo") if xla else None


@pytest.mark.parametrize("name", NAMES)
def test_decode_is_traced_once(name, engines, prompt_ids):
    """One graph for every position (and every prompt length): no retracing, no XLA recompile."""
    engine = engines(name)
    for ids in (prompt_ids, prompt_of_length(30)):
        greedy_logits(engine, ids, 5)
    decode_traces, prefill_traces, hlo = engine.apply(_traces, name == "tf-xla")
    assert decode_traces == 1
    assert prefill_traces == 1
    if name == "tf-xla":
        assert hlo


@pytest.mark.parametrize("name", NAMES)
def test_a_new_prompt_starts_a_clean_sequence(name, engines, prompt_ids):
    engine = engines(name)
    first_tokens, first = greedy_logits(engine, prompt_ids, 4)
    greedy_logits(engine, prompt_of_length(60), 10)  # fills slots the next sequence must not see
    again_tokens, again = greedy_logits(engine, prompt_ids, 4)
    assert again_tokens == first_tokens
    np.testing.assert_allclose(again, first, atol=1e-6, rtol=0)


def test_forward_logits_match_hf_at_every_position(engines, hf_reference):
    engine = engines("tf")
    ids = prompt_of_length(40)
    np.testing.assert_allclose(engine.forward_logits(ids), hf_reference.logits(ids), atol=ATOL_FP32, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_prompt_at_the_context_limit(name, engines, tiny_model, hf_reference):
    engine = engines(name)
    ids = prompt_of_length(tiny_model.context - 1)
    first = engine.prefill(ids)
    token = int(np.argmax(first))
    last = engine.decode(token)  # fills position 1023, the last one
    np.testing.assert_allclose(last, hf_reference.logits(ids + [token])[-1], atol=ATOL_FP32, rtol=0)
    with pytest.raises(UsageError, match="context is full"):
        engine.decode(int(np.argmax(last)))
    with pytest.raises(UsageError, match="1 to 1024"):
        engine.prefill(prompt_of_length(1025))


def _tf_version(_engine) -> str:
    import tensorflow as tf

    return tf.__version__


@pytest.mark.parametrize("name", NAMES)
def test_engine_info(name, engines, tiny_model):
    info = engines(name).info
    tf_version = engines(name).apply(_tf_version)
    config = tiny_model.gpt2_config
    assert (info.device, info.dtype) == ("cpu", "fp32")
    assert info.weight_bytes_per_token == config.weight_bytes(4)
    assert info.kv_bytes_per_position == config.kv_bytes_per_position(4)
    assert f"TensorFlow {tf_version}" in info.notes and "threads=" in info.notes
    assert ("XLA" in info.notes) == (name == "tf-xla")


def _read_weights(_engine, path) -> dict[str, np.ndarray]:
    """In the engine's child: the TF model's reader (its module imports TensorFlow)."""
    from whistle_stop.backends.engines.tensorflow.model import read_weights

    return read_weights(path)


def test_reads_bf16_and_prefixed_safetensors(tiny_model, tmp_path, engines):
    """save_pretrained-style keys (`transformer.`, a stored lm_head) and bf16 storage read the same."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file

    tensors = {f"transformer.{k}": t.to(torch.bfloat16) for k, t in load_file(str(tiny_model.safetensors)).items()}
    tensors["lm_head.weight"] = tensors["transformer.wte.weight"].clone()
    save_file(tensors, str(tmp_path / "model.safetensors"))
    engine = engines("tf")
    ours = engine.apply(_read_weights, tmp_path / "model.safetensors")
    original = engine.apply(_read_weights, tiny_model.safetensors)
    assert sorted(ours) == sorted(original) and "lm_head.weight" not in ours
    for name, want in original.items():
        assert ours[name].dtype == np.float32
        np.testing.assert_array_equal(ours[name], torch.from_numpy(want).to(torch.bfloat16).float().numpy())


def _device_and_tf32(_engine) -> tuple[list, bool]:
    import tensorflow as tf

    return tf.config.get_visible_devices("GPU"), tf.config.experimental.tensor_float_32_execution_enabled()


@pytest.mark.parametrize("name", NAMES)
def test_no_gpu_and_no_tf32_whatever_the_build(name, engines):
    """A GPU build ran ops on the GPU with TF32 products while the records said cpu and fp32."""
    assert engines(name).apply(_device_and_tf32) == ([], False)
