"""The GEMV kernels (built with the machine's compiler), their fallback, and the engines that use them:
torch-static decodes its fp32 linears with them, torch-static-bf16 keeps only the matrices in bf16."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from whistle_stop.backends import registry
from whistle_stop.backends.engine import EngineOptions
from whistle_stop.backends.kernels import native

from whistle_stop.backends.sources.prompts import prompt_of_length

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="needs a C compiler")


def loaded(name, model, threads=1):
    engine = registry.create(name, EngineOptions(threads=threads))
    return engine, engine.load(model, lambda *a: None)


def _reference(w16: torch.Tensor, x: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    y = x.double() @ w16.double().t()
    return (y if b is None else y + b.double()).float()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows, n, k, bias", [(1, 2304, 768, True), (1, 37, 13, False), (3, 50, 200, True),
                                              (1, 1, 1, False), (1, 7, 64, True)])
def test_kernel_matches_a_float64_product(dtype, rows, n, k, bias, isolated_cache):
    from whistle_stop.backends.engines.torch_static import gemv_linear

    assert "own kernel" in gemv_linear.enable_kernels()
    gen = torch.Generator().manual_seed(n + k)
    w = torch.randn(n, k, generator=gen).to(dtype)
    x = torch.randn(rows, k, generator=gen)
    b = torch.randn(n, generator=gen) if bias else None
    y = gemv_linear._gemv(x, w, b)
    assert y.shape == (rows, n) and y.dtype == torch.float32
    np.testing.assert_allclose(y.numpy(), _reference(w, x, b).numpy(), rtol=1e-4, atol=1e-4 * np.sqrt(k))
    # the op that compiled graphs call is the same kernel
    np.testing.assert_array_equal(torch.ops.whistle_stop_kernels.gemv(x, w, b).numpy(), y.numpy())


def test_kernel_is_cached_per_machine(isolated_cache):
    native.load.cache_clear()
    native.load("gemv")
    built = list((isolated_cache / native.KIND).glob("*/gemv/libgemv.so"))
    assert len(built) == 1
    native.load.cache_clear()
    native.load("gemv")  # a second process finds it: nothing new built
    assert list((isolated_cache / native.KIND).glob("*/gemv/libgemv.so")) == built


def test_without_a_compiler_bf16_falls_back_to_torch_and_says_so(tiny_model, monkeypatch, prompt_ids, hf_reference):
    from whistle_stop.backends.engines.torch_static import gemv_linear

    monkeypatch.setenv("CC", "/nonexistent/cc")
    native.load.cache_clear()
    try:
        engine, info = loaded("torch-static-bf16", tiny_model)
        assert "torch's kernels" in info.notes and "nonexistent" in info.notes
        assert not gemv_linear._KERNELS
        logits = engine.prefill(prompt_ids)
        step = engine.decode(int(np.argmax(logits)))
        reference = hf_reference.logits(prompt_ids + [int(np.argmax(logits))])[-1]
        assert np.abs(step - reference).max() < 1.5  # bf16 weights: loose, catches a broken path
    finally:
        monkeypatch.delenv("CC")
        native.load.cache_clear()
        gemv_linear.enable_kernels()


def test_bf16_engine_keeps_only_matrices_in_bf16(tiny_model, prompt_ids, hf_reference):
    from whistle_stop.backends.engines.torch_static.gemv_linear import GemvLinear

    engine, info = loaded("torch-static-bf16", tiny_model)
    net = engine.model
    linears = [m for m in net.modules() if isinstance(m, GemvLinear)]
    assert len(linears) == 4 * tiny_model.config["n_layer"] + 1
    assert all(m.weight.dtype == torch.bfloat16 for m in linears)
    assert net.lm_head.weight is net.wte.weight  # still tied: one bf16 copy
    others = [p for name, p in net.named_parameters() if p.dtype != torch.bfloat16]
    assert others and all(p.dtype == torch.float32 for p in others)
    assert net.h[0].attn.kv_cache.k.dtype == torch.float32
    assert "own kernel" in info.notes and "float32 activations" in info.notes
    # float32 arithmetic on bf16 weights stays close to the fp32 model over a whole greedy run
    tokens, ids = [], list(prompt_ids)
    logits = engine.prefill(ids)
    for _ in range(8):
        tokens.append(int(np.argmax(logits)))
        logits = engine.decode(tokens[-1])
    reference = hf_reference.logits(prompt_ids + tokens)[-1]
    assert np.abs(logits - reference).max() < 0.5


def test_compiled_bf16_decode_equals_eager_bf16(tiny_model):
    compiled, info = loaded("torch-static-compile", tiny_model)
    eager, _ = loaded("torch-static-bf16", tiny_model)
    assert "dynamic cache length" in info.notes
    ids = prompt_of_length(40)
    for engine in (compiled, eager):
        engine.prefill(ids)
    for token in (5, 17, 300, 9):  # the same kernel for every matrix: only the fused rest may differ
        np.testing.assert_allclose(compiled.decode(token), eager.decode(token), atol=2e-3)


def test_fp32_engine_decodes_with_the_kernel_and_keeps_hf_tokens(tiny_model, prompt_ids, hf_reference):
    from whistle_stop.backends.engines.torch_static.gemv_linear import GemvLinear

    engine, info = loaded("torch-static", tiny_model)
    linears = [m for m in engine.model.modules() if isinstance(m, GemvLinear)]
    assert len(linears) == 4 * tiny_model.config["n_layer"] + 1
    assert all(m.weight.dtype == torch.float32 for m in linears) and "own kernel" in info.notes
    tokens, logits = [], engine.prefill(prompt_ids)
    for _ in range(20):
        tokens.append(int(np.argmax(logits)))
        logits = engine.decode(tokens[-1])
    assert tokens == hf_reference.greedy(prompt_ids, 20)
    np.testing.assert_allclose(logits, hf_reference.logits(prompt_ids + tokens)[-1], atol=1e-4)
