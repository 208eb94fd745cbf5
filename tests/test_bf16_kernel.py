"""The bf16 GEMV kernel (built with the machine's compiler), its fallback, and the engines that use it:
torch-static-bf16 keeps only the matrices in bf16, torch-static packs its fp32 linears for oneDNN."""

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


@pytest.mark.parametrize("rows, n, k, bias", [(1, 2304, 768, True), (1, 37, 13, False), (3, 50, 200, True),
                                              (1, 1, 1, False)])
def test_kernel_matches_a_float64_product(rows, n, k, bias, isolated_cache):
    from whistle_stop.backends.engines.torch_static import bf16_weights

    assert "own bf16 kernel" in bf16_weights.enable_kernel()
    gen = torch.Generator().manual_seed(n + k)
    w = torch.randn(n, k, generator=gen).to(torch.bfloat16)
    x = torch.randn(rows, k, generator=gen)
    b = torch.randn(n, generator=gen) if bias else None
    y = bf16_weights._gemv(x, w, b)
    assert y.shape == (rows, n) and y.dtype == torch.float32
    np.testing.assert_allclose(y.numpy(), _reference(w, x, b).numpy(), rtol=1e-4, atol=1e-4 * np.sqrt(k))
    # the op that compiled graphs call is the same kernel
    np.testing.assert_array_equal(torch.ops.whistle_stop.bf16_gemv(x, w, b).numpy(), y.numpy())


def test_kernel_is_cached_per_machine(isolated_cache):
    native.load.cache_clear()
    native.load("bf16_gemv")
    built = list((isolated_cache / native.KIND).glob("*/bf16_gemv/libbf16_gemv.so"))
    assert len(built) == 1
    native.load.cache_clear()
    native.load("bf16_gemv")  # a second process finds it: nothing new built
    assert list((isolated_cache / native.KIND).glob("*/bf16_gemv/libbf16_gemv.so")) == built


def test_without_a_compiler_bf16_falls_back_to_torch_and_says_so(tiny_model, monkeypatch, prompt_ids, hf_reference):
    from whistle_stop.backends.engines.torch_static import bf16_weights

    monkeypatch.setenv("CC", "/nonexistent/cc")
    native.load.cache_clear()
    try:
        engine, info = loaded("torch-static-bf16", tiny_model)
        assert "torch's bf16 kernel" in info.notes and "nonexistent" in info.notes
        assert bf16_weights._KERNEL is None
        logits = engine.prefill(prompt_ids)
        step = engine.decode(int(np.argmax(logits)))
        reference = hf_reference.logits(prompt_ids + [int(np.argmax(logits))])[-1]
        assert np.abs(step - reference).max() < 1.5  # bf16 weights: loose, catches a broken path
    finally:
        monkeypatch.delenv("CC")
        native.load.cache_clear()
        bf16_weights.enable_kernel()


def test_bf16_engine_keeps_only_matrices_in_bf16(tiny_model, prompt_ids, hf_reference):
    from whistle_stop.backends.engines.torch_static.bf16_weights import Bf16Linear

    engine, info = loaded("torch-static-bf16", tiny_model)
    net = engine.model
    linears = [m for m in net.modules() if isinstance(m, Bf16Linear)]
    assert len(linears) == 4 * tiny_model.config["n_layer"] + 1
    assert all(m.weight.dtype == torch.bfloat16 for m in linears)
    assert net.lm_head.weight is net.wte.weight  # still tied: one bf16 copy
    others = [p for name, p in net.named_parameters() if p.dtype != torch.bfloat16]
    assert others and all(p.dtype == torch.float32 for p in others)
    assert net.h[0].attn.kv_cache.k.dtype == torch.float32
    assert "own bf16 kernel" in info.notes and "float32 activations" in info.notes
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


def test_fp32_linears_are_packed_for_onednn(tiny_model, prompt_ids, hf_reference):
    from whistle_stop.backends.engines.torch_static.onednn_linear import OneDnnLinear

    engine, info = loaded("torch-static", tiny_model)
    packed = [m for m in engine.model.modules() if isinstance(m, OneDnnLinear)]
    assert len(packed) == 4 * tiny_model.config["n_layer"] + 1
    assert f"{len(packed)} linears prepacked for oneDNN" in info.notes
    np.testing.assert_allclose(engine.prefill(prompt_ids), hf_reference.logits(prompt_ids)[-1], atol=1e-4)
