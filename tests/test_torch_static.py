"""The torch-static engines: the project's own PyTorch GPT-2 against transformers on random:tiny.

On the CPU they decode with the project's C GEMV kernels, so each engine runs in a spawned child
(tests/engine_process.py), shared by the module's tests: a crash in C fails one test."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import engine_tokens, greedy_logits, load_engine_in_worker
from whistle_stop.backends import registry
from whistle_stop.backends.engine import EngineInfo, EngineOptions
from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.sampling import SamplingParams
from whistle_stop.backends.sources.prompts import prompt_of_length

VOCAB = 50257
ATOL_FP32 = 1e-4  # tiny's logits reach ~8; measured differences are ~6e-6
NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _load_beside(_engine, name: str, model, options: EngineOptions) -> tuple[EngineInfo, int]:
    """Another engine loaded in this child beside its own (torch is imported there already): its info
    and torch's thread count after its load, which is then set back to the child engine's 1."""
    try:
        info = registry.create(name, options).load(model, lambda *a: None)
        return info, torch.get_num_threads()
    finally:
        torch.set_num_threads(1)


def test_fp32_greedy_equals_hf(engines, prompt_ids, hf_reference):
    tokens = engines("torch-static").tokens(prompt_ids, 30)
    assert tokens == hf_reference.greedy(prompt_ids, 30)


def test_fp32_prefill_and_decode_logits_match_hf(engines, prompt_ids, hf_reference):
    engine = engines("torch-static")
    tokens, logits = greedy_logits(engine, prompt_ids, 8)
    # hf's full-sequence logits at the prompt's last position and each decoded position
    reference = hf_reference.logits(prompt_ids + tokens)[len(prompt_ids) - 1 :]
    assert logits.dtype == np.float32 and logits.shape == (9, VOCAB)
    np.testing.assert_allclose(logits, reference, atol=ATOL_FP32, rtol=0)


def test_forward_logits_match_hf_at_every_position(engines, hf_reference):
    engine = engines("torch-static")
    ids = prompt_of_length(40)
    np.testing.assert_allclose(engine.forward_logits(ids), hf_reference.logits(ids), atol=ATOL_FP32, rtol=0)


def test_a_new_prompt_starts_a_clean_sequence(engines, prompt_ids):
    """Prefill resets the cache position: a second sequence ignores the first one's slots."""
    engine = engines("torch-static")
    first_tokens, first = greedy_logits(engine, prompt_ids, 5)
    greedy_logits(engine, prompt_of_length(60), 20)  # fills slots the next sequence must not see
    again_tokens, again = greedy_logits(engine, prompt_ids, 5)
    assert again_tokens == first_tokens
    np.testing.assert_allclose(again, first, atol=1e-6, rtol=0)


def test_loads_bf16_files_with_transformer_prefix_and_lm_head(tiny_model, tmp_path):
    """save_pretrained-style keys (`transformer.`, a stored lm_head) and bf16 storage load the same."""
    from safetensors.torch import save_file

    from whistle_stop.backends.engines.torch_static.model import load_gpt2, read_tensors

    tensors = {f"transformer.{k}": t.to(torch.bfloat16) for k, t in read_tensors(tiny_model.safetensors)}
    tensors["lm_head.weight"] = tensors["transformer.wte.weight"].clone()
    save_file(tensors, str(tmp_path / "model.safetensors"))
    ours = load_gpt2(tmp_path / "model.safetensors", tiny_model.gpt2_config)
    original = load_gpt2(tiny_model.safetensors, tiny_model.gpt2_config)
    assert ours.lm_head.weight is ours.wte.weight  # tied, stored once
    for (name, got), (_, want) in zip(ours.state_dict().items(), original.state_dict().items()):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want.to(torch.bfloat16).float(), atol=0, rtol=0, msg=name)


@pytest.mark.parametrize("name", ["torch-static-bf16", "torch-static-int8"])
def test_reduced_precision_runs_and_reports_agreement(name, engines, prompt_ids, hf_reference):
    tokens = engines(name).tokens(prompt_ids, 30)
    reference = hf_reference.greedy(prompt_ids, 30)
    agree = next((i for i, (a, b) in enumerate(zip(tokens, reference)) if a != b), len(tokens))
    print(f"{name}: first {agree} of 30 greedy tokens equal hf fp32")
    assert len(tokens) == 30 and all(isinstance(t, int) and 0 <= t < VOCAB for t in tokens)
    # Random weights leave top logits close (tiny's top two differ by 0.2 here), so even the first
    # token may differ across CPUs; what must hold is that hf rates it close to its own best.
    first = hf_reference.logits(prompt_ids)[-1]
    assert first[tokens[0]] > first.max() - 0.5


@pytest.mark.parametrize("name", ["torch-static-bf16", "torch-static-int8"])
def test_reduced_precision_logits_stay_close(name, engines, prompt_ids, hf_reference):
    """A loose bound that still catches a wrong layout or a missing bias (errors of ~logit size)."""
    tokens, logits = greedy_logits(engines(name), prompt_ids, 5)
    reference = hf_reference.logits(prompt_ids + tokens)[len(prompt_ids) - 1 :]
    error = np.abs(logits - reference).max()
    print(f"{name}: max |logit - hf fp32| = {error:.3f} (max |logit| {np.abs(reference).max():.2f})")
    assert error < 1.5


def test_sampling_with_a_seed_equals_hf(engines, tiny_model, prompt_ids):
    sampling = SamplingParams("sample", 0.8, 40, 0.95, seed=1234)
    ours = engines("torch-static").tokens(prompt_ids, 25, sampling)
    assert ours == engine_tokens("hf", tiny_model, prompt_ids, 25, sampling)


def _int8_layers(engine) -> tuple[int, int, torch.dtype]:
    """In the engine's child: its int8 linears, its float nn.Linear layers, and lm_head's weight dtype."""
    from torch import nn

    from whistle_stop.backends.engines.torch_util import count_int8_linears

    model = engine.model
    return (
        count_int8_linears(model),
        len([m for m in model.modules() if type(m) is nn.Linear]),
        model.lm_head.weight().dtype,
    )


def test_int8_quantises_every_matmul(tiny_model, engines):
    engine = engines("torch-static-int8")
    int8_linears, float_linears, lm_head_dtype = engine.apply(_int8_layers)
    expected = 4 * tiny_model.config["n_layer"] + 1  # c_attn, c_proj, c_fc, mlp.c_proj per layer + lm_head
    assert int8_linears == expected
    assert not float_linears  # no float matmul left
    assert f"{expected} int8 linears" in engine.info.notes
    assert lm_head_dtype == torch.qint8


# On the CPU, bf16 is weights-only: matrices 2 bytes, norms/biases/positions and the KV cache float32.
@pytest.mark.parametrize(
    "name, matrix, other, kv",
    [("torch-static", 4, 4, 4), ("torch-static-bf16", 2, 4, 4), ("torch-static-int8", 1, 4, 4)],
)
def test_engine_info(name, matrix, other, kv, tiny_model, engines):
    info, threads = engines("torch-static").apply(_load_beside, name, tiny_model, EngineOptions(threads=2))
    assert info.device == "cpu"
    assert info.weight_bytes_per_token == tiny_model.gpt2_config.weight_bytes(matrix, other)
    assert info.kv_bytes_per_position == tiny_model.gpt2_config.kv_bytes_per_position(kv)
    assert "threads=2" in info.notes and "static KV cache 1024" in info.notes
    assert threads == 2


def test_prompt_at_the_context_limit(engines):
    ids = prompt_of_length(1023)
    engine = engines("torch-static")
    assert len(engine.tokens(ids, 1)) == 1
    logits = engine.decode(int(np.argmax(engine.prefill(ids))))  # fills position 1023, the last one
    assert np.isfinite(logits).all()
    with pytest.raises(UsageError, match="context is full"):
        engine.decode(int(np.argmax(logits)))
    with pytest.raises(UsageError, match="1 to 1024"):
        engine.prefill(prompt_of_length(1025))


# Positions must not cause a recompile: load() compiled every graph (compile_s is load time).
def _greedy_without_recompile(engine, ids: list[int], steps: int) -> tuple[list[int], np.ndarray]:
    with torch._dynamo.config.patch(error_on_recompile=True):
        return greedy_logits(engine, ids, steps)


def _last_slot_without_recompile(engine) -> np.ndarray:
    with torch._dynamo.config.patch(error_on_recompile=True):
        return engine.decode(int(np.argmax(engine.prefill(prompt_of_length(1023)))))


@pytest.mark.slow
def test_compiled_decode(tiny_model, prompt_ids, hf_reference, engines):
    """Compile runs in load (reported as compile_s); prefill stays right after compiled decode steps."""
    with load_engine_in_worker("torch-static-compile", tiny_model) as engine:
        info = engine.info
        assert info.dtype == "bf16" and "compile_s=" in info.notes
        eager = engines("torch-static-bf16")
        for ids in (prompt_of_length(60), prompt_ids):  # the second sequence must not see the first's slots
            tokens, logits = engine.apply(_greedy_without_recompile, ids, 10)
            _, eager_logits = greedy_logits(eager, ids, 0)
            reference = hf_reference.logits(ids + tokens)[len(ids) - 1 :]
            np.testing.assert_array_equal(logits[0], eager_logits[0])  # prefill is eager in both
            assert np.abs(logits - reference).max() < 1.5  # bf16: loose, catches a broken mask or cache
        first = hf_reference.logits(prompt_ids)[-1]
        assert first[tokens[0]] > first.max() - 0.5  # as for eager bf16: a near-tie may flip
        # the compiled engine at the context limit: fixed shapes still hold at the last slot
        logits = engine.apply(_last_slot_without_recompile)
    assert np.isfinite(logits).all()


@pytest.fixture
def no_cxx(monkeypatch, tmp_path):
    """A machine without a C++ compiler: no $CXX and nothing on PATH (an empty folder)."""
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    return tmp_path


def test_without_a_cxx_compiler_compile_is_unavailable_in_one_line(no_cxx, monkeypatch, capsys):
    """torch.compile on the CPU failed deep inside torch at load; now `backends` and `bench` say why first."""
    from whistle_stop.backends.cli.main import main

    why = "needs a C++ compiler for torch.compile on the CPU (g++ not found: install it, or set $CXX)"
    assert registry.available("torch-static-compile") == (False, why)
    assert registry.available("torch-static-bf16")[0]  # no compile: PyTorch's own kernels stand in
    assert main(["backends"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "torch-static-compile" in line)
    assert why in row and "│ no " in row
    assert main(["bench", "--backends", "torch-static-compile", "--out", str(no_cxx / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: backend 'torch-static-compile' is unavailable: {why}"
    compiler = no_cxx / "bin" / "clang++"  # $CXX names another compiler: inductor calls that one
    compiler.parent.mkdir()
    compiler.write_text("#!/bin/sh\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("CXX", str(compiler))
    assert registry.available("torch-static-compile") == (True, "")
    monkeypatch.setenv("CXX", str(no_cxx / "missing" / "g++"))
    assert registry.available("torch-static-compile")[1].endswith(f"($CXX='{no_cxx / 'missing' / 'g++'}' not found)")


def test_compile_on_cuda_needs_triton_s_c_compiler_not_g_plus_plus(no_cxx, monkeypatch):
    """On CUDA inductor writes Triton kernels: no g++ needed, but Triton builds its launcher with $CC,
    else gcc, else clang, and failed at the first compiled call without one (the spec is asked
    directly: the registry's availability also needs a GPU)."""
    from whistle_stop.backends.engines.torch_static import inductor

    monkeypatch.delenv("CC", raising=False)
    spec = registry.get("torch-static-cuda-graphs")
    why = "needs a C compiler for Triton's kernels on CUDA (gcc or clang not found: install one, or set $CC)"
    assert registry.unmet_requirement(spec) == why
    assert inductor.compile_requirement(compile=False, device="cuda") == ""  # eager CUDA runs no Triton
    compiler = no_cxx / "bin" / "gcc"
    compiler.parent.mkdir()
    compiler.write_text("#!/bin/sh\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("PATH", str(compiler.parent))
    assert registry.unmet_requirement(spec) == ""  # g++ is still missing: CUDA does not need it
    monkeypatch.setenv("CC", str(no_cxx / "missing" / "cc"))
    assert registry.unmet_requirement(spec).endswith(f"($CC='{no_cxx / 'missing' / 'cc'}' not found)")


def test_the_compiler_asked_for_is_the_one_inductor_calls(monkeypatch):
    """inductor.py mirrors torch._inductor.config.cpp.cxx without importing torch: (conda's g++, opt-in only;
    then $CXX, else g++), read when torch's config is imported (so a child process for $CXX)."""
    import subprocess
    import sys

    from torch._inductor import config

    from whistle_stop.backends.engines.torch_static import inductor

    assert config.cpp.cxx == (None, inductor.cxx_compiler())
    monkeypatch.setenv("CXX", "/opt/x/clang++-99")
    code = "from torch._inductor import config; print(config.cpp.cxx[-1])"
    torch_says = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert torch_says.stdout.strip() == inductor.cxx_compiler() == "/opt/x/clang++-99"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
@pytest.mark.parametrize("name", ["torch-static-cuda", "torch-static-cuda-graphs"])
def test_cuda_variants_fail_clearly_without_a_gpu(name, tiny_model, engines):
    assert registry.available(name)[0] is False
    with pytest.raises(UsageError, match="needs a CUDA GPU"):
        engines("torch-static").apply(_load_beside, name, tiny_model, EngineOptions(threads=1))


def test_unsupported_device_and_int8_on_cuda_are_refused(tiny_model, engines):
    engine = engines("torch-static")
    for device in ("mps", "gpu"):  # a device torch knows but we do not, and one it does not know
        with pytest.raises(UsageError, match="runs on 'cpu' or 'cuda'"):
            engine.apply(_load_beside, "torch-static", tiny_model, EngineOptions(device=device))
    with pytest.raises(UsageError, match="CUDA|CPU only"):
        engine.apply(_load_beside, "torch-static-int8", tiny_model, EngineOptions(device="cuda"))


@pytest.mark.cuda
@NEEDS_CUDA
def test_cuda_fp32_matches_hf(prompt_ids, hf_reference, engines):
    engine = engines("torch-static-cuda")
    assert engine.info.device == "cuda" and engine.info.dtype == "fp32"
    tokens, logits = greedy_logits(engine, prompt_ids, 8)
    reference = hf_reference.logits(prompt_ids + tokens)[len(prompt_ids) - 1 :]
    np.testing.assert_allclose(logits, reference, atol=1e-3, rtol=0)
    assert engine.tokens(prompt_ids, 30) == hf_reference.greedy(prompt_ids, 30)


@pytest.mark.cuda
@pytest.mark.slow
@NEEDS_CUDA
def test_cuda_graphs(prompt_ids, hf_reference, engines):
    engine = engines("torch-static-cuda-graphs")
    info = engine.info
    assert info.device == "cuda" and info.dtype == "bf16" and "compile_s=" in info.notes
    for ids in (prompt_of_length(60), prompt_ids):  # replays after a longer sequence stay right
        tokens, logits = greedy_logits(engine, ids, 10)
        reference = hf_reference.logits(ids + tokens)[len(ids) - 1 :]
        assert np.abs(logits - reference).max() < 1.5
    assert len(engine.tokens(prompt_ids, 20, SamplingParams())) == 20
