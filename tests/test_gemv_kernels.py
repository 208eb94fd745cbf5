"""The GEMV kernels (built with the machine's compiler), their fallback, and the engines that use them:
torch-static decodes its fp32 linears with them, torch-static-bf16 keeps only the matrices in bf16.
The kernels run in spawned children (tests/engine_process.py): a crash in C fails one test."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest
import torch

from tests.conftest import load_engine_in_worker
from whistle_stop.backends.kernels import native
from whistle_stop.backends.sources.prompts import prompt_of_length

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="needs a C compiler")


def _reference(w16: torch.Tensor, x: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    y = x.double() @ w16.double().t()
    return (y if b is None else y + b.double()).float()


def _inputs(dtype, rows, n, k, bias) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Weights, rows and bias from a seeded generator: the child and the test make the same ones."""
    gen = torch.Generator().manual_seed(n + k)
    w = torch.randn(n, k, generator=gen).to(dtype)
    x = torch.randn(rows, k, generator=gen)
    b = torch.randn(n, generator=gen) if bias else None
    return w, x, b


def _kernel_product(_engine, dtype, rows, n, k, bias):
    """In the engine's child: the kernel's note, its product (shape, dtype, values) and the compiled graphs' op."""
    from whistle_stop.backends.engines.torch_static import gemv_linear

    note = gemv_linear.enable_kernels()
    w, x, b = _inputs(dtype, rows, n, k, bias)
    y = gemv_linear._gemv(x, w, b)
    return note, tuple(y.shape), y.dtype, y.numpy(), torch.ops.whistle_stop_kernels.gemv(x, w, b).numpy()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "rows, n, k, bias",
    [(1, 2304, 768, True), (1, 37, 13, False), (3, 50, 200, True), (1, 1, 1, False), (1, 7, 64, True)],
)
def test_kernel_matches_a_float64_product(dtype, rows, n, k, bias, engines):
    note, shape, y_dtype, y, op = engines("torch-static").apply(_kernel_product, dtype, rows, n, k, bias)
    assert "own kernel" in note
    w, x, b = _inputs(dtype, rows, n, k, bias)
    assert shape == (rows, n) and y_dtype == torch.float32
    np.testing.assert_allclose(y, _reference(w, x, b).numpy(), rtol=1e-4, atol=1e-4 * np.sqrt(k))
    # the op that compiled graphs call is the same kernel
    np.testing.assert_array_equal(op, y)


def _load_gemv_afresh(_engine) -> None:
    native.load.cache_clear()  # as a new process: open the cached build, or build it
    native.load("gemv")


def test_kernel_is_cached_per_machine(isolated_cache, engines):
    engine = engines("torch-static")
    engine.apply(_load_gemv_afresh)
    built = list((isolated_cache / native.KIND).glob("*/gemv/libgemv.so"))
    assert len(built) == 1
    engine.apply(_load_gemv_afresh)  # a second process finds it: nothing new built
    assert list((isolated_cache / native.KIND).glob("*/gemv/libgemv.so")) == built


class Layout(NamedTuple):
    """What an engine's child says of its model: the dtypes its tests check."""

    linears: list[torch.dtype]  # of every GemvLinear's weight
    tied: bool  # lm_head shares the embedding's weight
    others: list[torch.dtype]  # of every parameter that is not bf16
    kv: torch.dtype  # of the first layer's key cache
    kernels: list[torch.dtype]  # the weight dtypes the GEMV kernels serve


def _layout(engine) -> Layout:
    from whistle_stop.backends.engines.torch_static.gemv_linear import _KERNELS, GemvLinear

    net = engine.model
    return Layout(
        linears=[m.weight.dtype for m in net.modules() if isinstance(m, GemvLinear)],
        tied=net.lm_head.weight is net.wte.weight,
        others=[p.dtype for _, p in net.named_parameters() if p.dtype != torch.bfloat16],
        kv=net.h[0].attn.kv_cache.k.dtype,
        kernels=list(_KERNELS),
    )


def test_without_a_compiler_bf16_falls_back_to_torch_and_says_so(tiny_model, monkeypatch, prompt_ids, hf_reference):
    monkeypatch.setenv("CC", "/nonexistent/cc")  # set before the spawn: the child inherits it
    with load_engine_in_worker("torch-static-bf16", tiny_model) as engine:
        info = engine.info
        assert "torch's kernels" in info.notes and "nonexistent" in info.notes
        assert not engine.apply(_layout).kernels
        logits = engine.prefill(prompt_ids)
        step = engine.decode(int(np.argmax(logits)))
    reference = hf_reference.logits(prompt_ids + [int(np.argmax(logits))])[-1]
    assert np.abs(step - reference).max() < 1.5  # bf16 weights: loose, catches a broken path


def test_bf16_engine_keeps_only_matrices_in_bf16(tiny_model, prompt_ids, hf_reference, engines):
    engine = engines("torch-static-bf16")
    info, layout = engine.info, engine.apply(_layout)
    assert len(layout.linears) == 4 * tiny_model.config["n_layer"] + 1
    assert all(dtype == torch.bfloat16 for dtype in layout.linears)
    assert layout.tied  # still tied: one bf16 copy
    assert layout.others and all(dtype == torch.float32 for dtype in layout.others)
    assert layout.kv == torch.float32
    assert "own kernel" in info.notes and "float32 activations" in info.notes
    # float32 arithmetic on bf16 weights stays close to the fp32 model over a whole greedy run
    tokens, ids = [], list(prompt_ids)
    logits = engine.prefill(ids)
    for _ in range(8):
        tokens.append(int(np.argmax(logits)))
        logits = engine.decode(tokens[-1])
    reference = hf_reference.logits(prompt_ids + tokens)[-1]
    assert np.abs(logits - reference).max() < 0.5


@pytest.mark.slow  # torch.compile in load: a minute or more (as test_torch_static.py::test_compiled_decode)
def test_compiled_bf16_decode_equals_eager_bf16(tiny_model, engines):
    eager = engines("torch-static-bf16")
    with load_engine_in_worker("torch-static-compile", tiny_model) as compiled:
        assert "dynamic cache length" in compiled.info.notes
        ids = prompt_of_length(40)
        for engine in (compiled, eager):
            engine.prefill(ids)
        for token in (5, 17, 300, 9):  # the same kernel for every matrix: only the fused rest may differ
            np.testing.assert_allclose(compiled.decode(token), eager.decode(token), atol=2e-3)


def test_fp32_engine_decodes_with_the_kernel_and_keeps_hf_tokens(tiny_model, prompt_ids, hf_reference, engines):
    engine = engines("torch-static")
    linears, info = engine.apply(_layout).linears, engine.info
    assert len(linears) == 4 * tiny_model.config["n_layer"] + 1
    assert all(dtype == torch.float32 for dtype in linears) and "own kernel" in info.notes
    tokens, logits = [], engine.prefill(prompt_ids)
    for _ in range(20):
        tokens.append(int(np.argmax(logits)))
        logits = engine.decode(tokens[-1])
    assert tokens == hf_reference.greedy(prompt_ids, 20)
    np.testing.assert_allclose(logits, hf_reference.logits(prompt_ids + tokens)[-1], atol=1e-4)
