"""The torch-free numpy engine: parity with transformers, zero-copy weights, no torch anywhere."""

from __future__ import annotations

import mmap
import subprocess
import textwrap

import numpy as np
import pytest

from tests.conftest import engine_tokens
from whistle_stop.backends.engine import EngineOptions
from whistle_stop.backends.sampling import SamplingParams
from whistle_stop.backends.sources.prompts import prompt_of_length

# fp32 against fp32 with different summation orders: logits of the tiny model reach ~10, and
# differences seen are ~5e-6. 1e-4 absolute is 20x that and still far below a token's margin.
ATOL, RTOL = 1e-4, 1e-5


@pytest.fixture()
def engine(tiny_model):
    from whistle_stop.backends import registry

    engine = registry.create("numpy", EngineOptions(threads=1))
    engine.load(tiny_model, lambda *a: None)
    yield engine
    engine.close()


def test_greedy_tokens_equal_hf(tiny_model, prompt_ids, hf_reference):
    tokens = engine_tokens("numpy", tiny_model, prompt_ids, 30)
    assert tokens == hf_reference.greedy(prompt_ids, 30)
    assert len(set(tokens)) > 1  # the reference varies, so equality says something


def test_prefill_and_decode_logits_match_hf(engine, prompt_ids, hf_reference):
    ids = list(prompt_ids)
    logits = engine.prefill(ids)
    for _ in range(5):  # prefill, then 5 decode steps (each against a full HF forward)
        assert logits.dtype == np.float32 and logits.shape == (50257,)
        np.testing.assert_allclose(logits, hf_reference.logits(ids)[-1], atol=ATOL, rtol=RTOL)
        ids.append(int(np.argmax(logits)))
        logits = engine.decode(ids[-1])


def test_forward_logits_match_hf_and_leave_the_sequence_alone(engine, prompt_ids, hf_reference):
    first = engine.prefill(prompt_ids)
    all_logits = engine.forward_logits(prompt_ids[:7])
    assert all_logits.dtype == np.float32 and all_logits.shape == (7, 50257)
    np.testing.assert_allclose(all_logits, hf_reference.logits(prompt_ids[:7]), atol=ATOL, rtol=RTOL)
    token = int(np.argmax(first))  # the open sequence goes on as if forward_logits never ran
    expected = hf_reference.logits(list(prompt_ids) + [token])[-1]
    np.testing.assert_allclose(engine.decode(token), expected, atol=ATOL, rtol=RTOL)


def test_sampling_with_a_seed_equals_hf(tiny_model, prompt_ids):
    params = SamplingParams("sample", temperature=0.9, top_k=50, top_p=0.95, seed=1234)
    ours = engine_tokens("numpy", tiny_model, prompt_ids, 25, params)
    assert ours == engine_tokens("hf", tiny_model, prompt_ids, 25, params)
    assert ours != engine_tokens("numpy", tiny_model, prompt_ids, 25, SamplingParams())


def _mapping_of(array: np.ndarray) -> object:
    """The object at the end of the .base chain: an mmap.mmap for a zero-copy view."""
    base = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return base


def test_weights_are_views_of_the_memory_map(engine):
    p = engine.model.params
    matrices = [("attn", "c_attn"), ("attn", "c_proj"), ("mlp", "c_fc"), ("mlp", "c_proj")]
    big = [p["wte"], p["wpe"]] + [layer[group][name]["w"] for layer in p["blocks"] for group, name in matrices]
    maps = {id(_mapping_of(w)) for w in big}
    for w in big:
        assert type(w) is np.ndarray and w.dtype == np.float32  # plain ndarray: no np.memmap hooks per op
        assert not w.flags.owndata and not w.flags.writeable and w.flags.aligned and w.flags.c_contiguous
        assert isinstance(_mapping_of(w), mmap.mmap)
    assert len(maps) == 1  # one map of the one file
    assert isinstance(engine.model.eps, np.float32)  # a float64 eps would upcast every layer norm


def test_pure_functions_stay_float32():
    from whistle_stop.backends.engines.numpy_runtime.model import attention, gelu_new, layer_norm

    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 8), dtype=np.float32)
    expected = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x.astype(np.float64) ** 3)))
    out = gelu_new(x.copy())
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected, atol=1e-6)
    ones, zeros = np.ones(8, np.float32), np.zeros(8, np.float32)
    normed = layer_norm(x, ones, zeros, np.float32(1e-5))
    assert normed.dtype == np.float32
    np.testing.assert_allclose(normed.mean(-1), 0, atol=1e-6)
    q, k, v = (rng.standard_normal((2, 3, 4), dtype=np.float32) for _ in range(3))
    out = attention(q, k, v)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out[:, 0], v[:, 0], atol=1e-6)  # the first query sees only the first key


def test_prompt_at_the_context_limit(engine, tiny_model, hf_reference):
    ids = prompt_of_length(tiny_model.context - 1)  # 1023 tokens, then 1 new fills the context
    assert engine_tokens("numpy", tiny_model, ids, 2) == hf_reference.greedy(ids, 2)
    logits = engine.prefill(ids)
    np.testing.assert_allclose(logits, hf_reference.logits(ids)[-1], atol=ATOL, rtol=RTOL)
    engine.decode(int(np.argmax(logits)))
    with pytest.raises(ValueError, match="context is full"):
        engine.decode(0)
    with pytest.raises(ValueError, match="1 to 1024"):
        engine.prefill(prompt_of_length(tiny_model.context + 1))


_BLOCK_TORCH = textwrap.dedent('''
    """Test bootstrap: log that this process started and refuse every import of torch."""
    import os, sys

    _LOG = os.environ["WS_TORCH_BLOCK_LOG"]

    def _log(line):
        with open(_LOG, "a") as f:
            f.write(line + "\\n")

    class _NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                _log(f"blocked {name} {os.getpid()}")
                raise ImportError(f"torch is blocked in this process ({name})")
            return None

    sys.meta_path.insert(0, _NoTorch())
    _log(f"loaded {os.getpid()}")
''')


@pytest.fixture()
def torch_blocked(tmp_path, monkeypatch):
    """Spawned workers start in a Python whose sitecustomize blocks torch (this environment's packages
    otherwise); every interpreter they start is that one too."""
    import multiprocessing.spawn

    from tests.pythons import make_venv

    python = make_venv(tmp_path / "venv", with_this_environment=True, sitecustomize=_BLOCK_TORCH)
    log = tmp_path / "torch-block.log"
    monkeypatch.setenv("WS_TORCH_BLOCK_LOG", str(log))
    probe = subprocess.run([str(python), "-c", "import torch"], capture_output=True, text=True)
    assert probe.returncode != 0 and "torch is blocked" in probe.stderr  # the block works at all
    log.write_text("")
    before = multiprocessing.spawn.get_executable()
    multiprocessing.spawn.set_executable(str(python))
    yield log
    multiprocessing.spawn.set_executable(before)


def test_runs_in_a_spawned_worker_where_torch_cannot_be_imported(torch_blocked, tiny_model, prompt_ids, hf_reference):
    from whistle_stop.backends import registry
    from whistle_stop.backends.worker.events import RunRequest
    from whistle_stop.backends.worker.process import Worker

    worker = Worker(registry.get("numpy"), tiny_model, EngineOptions(threads=1))
    try:
        ready = worker.start()
        outcome = worker.run(RunRequest("r0", tuple(prompt_ids), 10, SamplingParams()))
    finally:
        worker.close()
    assert outcome.status == "ok", outcome.failure
    assert [t.token_id for t in outcome.tokens] == hf_reference.greedy(prompt_ids, 10)
    assert "mmap zero-copy" in ready.notes and "threads=1" in ready.notes  # set although numpy came first
    log = torch_blocked.read_text().splitlines()
    assert f"loaded {worker.pid}" in log  # the child really ran under the block...
    assert not [line for line in log if line.startswith("blocked")], log  # ...and never reached for torch
