"""The correctness oracle over the whole registry, on random:tiny: every fp32 engine's greedy tokens equal
transformers' `generate` (conftest.hf_reference), on an ordinary prompt and on the edges (a 1-token prompt,
a run that ends exactly at the model's last position, a continuation through end-of-text); every quantised
engine that no other module checks so reports its agreement. Each engine runs in a spawned child
(tests/engine_process.py), as the app runs it: a crash fails one test, not the suite."""

from __future__ import annotations

import pytest

from tests.engine_process import EngineProcess
from tests.test_end_of_text import END_OF_TEXT, PROMPT, eos_model  # noqa: F401 (eos_model: the fixture)
from whistle_stop.backends import registry
from whistle_stop.backends.registry import BUILT_IN, Role
from whistle_stop.backends.results.stats import agreement
from whistle_stop.backends.sources.prompts import prompt_of_length

N = 8
PEERS, EXTRAS, CUDA = pytest.mark.peers, pytest.mark.extras, pytest.mark.cuda

# Every fp32 engine but the calibration one (it computes nothing) and vLLM (a server in its own
# environment: tests/test_vllm_engine.py's test_real_vllm_cpu_server, marked vllm, on random:tiny-h32).
FP32 = [
    "hf",
    "hf-assisted",
    "torch-static",
    pytest.param("torch-static-cuda", marks=CUDA),
    "nanogpt",
    "onnx",
    "onnx-concat",
    "numpy",
    "native",
    "native-spec",
    pytest.param("llamacpp", marks=PEERS),
    pytest.param("llamacpp-lookup", marks=PEERS),
    pytest.param("ctranslate2", marks=PEERS),
    pytest.param("openvino", marks=PEERS),
    pytest.param("tf", marks=EXTRAS),
    pytest.param("tf-xla", marks=EXTRAS),
    pytest.param("ortgenai", marks=EXTRAS),
    pytest.param("openvino-genai", marks=EXTRAS),
]
# Quantised engines whose own module checks their token count or logits but reports no greedy agreement.
QUANTISED = [
    "native-bf16",
    "native-int8",
    "native-int4",
    "native-bf16-spec",
    pytest.param("llamacpp-bf16", marks=PEERS),
    pytest.param("llamacpp-q8_0", marks=PEERS),
    pytest.param("llamacpp-q4_0", marks=PEERS),
    pytest.param("ctranslate2-int8", marks=PEERS),
    pytest.param("openvino-int8", marks=PEERS),
    pytest.param("torch-static-compile", marks=pytest.mark.slow),  # torch.compile in load: a minute
    pytest.param("torch-static-cuda-graphs", marks=[CUDA, pytest.mark.slow]),
]
# The other quantised engines and the module that reports their agreement.
AGREEMENT_ELSEWHERE = {
    **dict.fromkeys(("hf-bf16", "hf-int8", "hf-fp16-dynamic"), "test_hf.py"),
    **dict.fromkeys(("torch-static-bf16", "torch-static-int8"), "test_torch_static.py"),
    **dict.fromkeys(("onnx-int8", "onnx-int4"), "test_onnx.py"),
    "llamacpp-f16": "test_peers_llamacpp.py",
    **dict.fromkeys(("ortgenai-int8", "ortgenai-int4"), "test_ortgenai.py"),
    **dict.fromkeys(("openvino-genai-bf16", "openvino-genai-int8", "openvino-genai-int4"), "test_openvino_genai.py"),
    "vllm-bf16": "none: a server in its own environment (made on first use), not run by the tests",
    "remote": "test_remote.py (a real llama.cpp server; text compared, its tokens are re-tokenised)",
}


def _names(params: list) -> set[str]:
    return {p if isinstance(p, str) else p.values[0] for p in params}


def _skip_unless_available(name: str) -> None:
    available, why = registry.available(name)
    if not available:
        pytest.skip(why)


def test_every_fp32_engine_is_held_to_the_oracle():
    """A new fp32 engine joins FP32 above (or says where its oracle test is)."""
    elsewhere = {"vllm"}  # tests/test_vllm_engine.py
    fp32 = {n for n, s in BUILT_IN.items() if s.precision == "fp32" and s.role is not Role.CALIBRATION}
    assert fp32 - elsewhere == _names(FP32)


def test_every_quantised_engine_reports_its_agreement():
    """A new quantised engine joins QUANTISED above (or says where its agreement is reported)."""
    quantised = {n for n, s in BUILT_IN.items() if s.precision != "fp32"}
    assert quantised == _names(QUANTISED) | set(AGREEMENT_ELSEWHERE)
    assert not _names(QUANTISED) & set(AGREEMENT_ELSEWHERE)


@pytest.mark.parametrize("name", FP32)
def test_fp32_greedy_equals_generate(name, engines, prompt_ids, hf_reference):
    _skip_unless_available(name)
    assert engines(name).tokens(prompt_ids, 24) == hf_reference.greedy(prompt_ids, 24)


@pytest.mark.parametrize("name", FP32)
def test_fp32_from_a_one_token_prompt(name, engines, hf_reference):
    _skip_unless_available(name)
    ids = prompt_of_length(1)
    assert engines(name).tokens(ids, N) == hf_reference.greedy(ids, N)


@pytest.mark.parametrize("name", FP32)
def test_fp32_up_to_the_last_position(name, engines, tiny_model, hf_reference):
    """Prompt and new tokens fill the context exactly: the last token is computed at position n_positions - 1."""
    _skip_unless_available(name)
    ids = prompt_of_length(tiny_model.context - N)
    assert engines(name).tokens(ids, N) == hf_reference.greedy(ids, N)


@pytest.fixture(scope="module")
def eos_expected(eos_model) -> list[int]:  # noqa: F811 (the imported fixture)
    """generate's greedy tokens on the end-of-text model: end-of-text comes, and text after it."""
    from tests.conftest import hf_reference  # the fixture's function, given the other model

    expected = hf_reference.__wrapped__(eos_model).greedy(PROMPT, 24)
    assert END_OF_TEXT in expected and expected[-1] != END_OF_TEXT
    return expected


@pytest.mark.slow  # a second model: every engine loads (and builds its artefacts) again, ~3 s each
@pytest.mark.parametrize("name", FP32)
def test_fp32_through_end_of_text(name, eos_model, eos_expected):  # noqa: F811 (the imported fixture)
    """End-of-text is a token like any other: greedy decoding emits it and goes on (test_end_of_text's model)."""
    _skip_unless_available(name)
    with EngineProcess(name, eos_model) as engine:
        assert engine.tokens(PROMPT, 24) == eos_expected


@pytest.mark.parametrize("name", QUANTISED)
def test_quantised_reports_agreement(name, engines, prompt_ids, hf_reference):
    _skip_unless_available(name)
    tokens = engines(name).tokens(prompt_ids, 24)
    same, first = agreement(hf_reference.greedy(prompt_ids, 24), tokens)
    print(f"{name}: {same} of 24 greedy tokens equal hf fp32 before the first divergence ({first})")
    assert len(tokens) == 24 and all(0 <= t < 50257 for t in tokens)
