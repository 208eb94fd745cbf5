"""End-of-text is a token like any other: engines that generate in their runtime's own loop neither stop
there nor mask it (a minimum length would), so their greedy tokens are the shared sampler's, end-of-text
included, and the sequence goes on after it. The engines run in spawned children (tests/engine_process.py)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from tests.engine_process import EngineProcess
from whistle_stop.backends import registry
from whistle_stop.backends.sources.model_files import resolve_model

END_OF_TEXT = 50256
PROMPT = list(range(100, 112))
N = 24
# random:tiny with end-of-text's embedding (tied: its logit) 3x as long: with PROMPT, greedy tokens 19-21
# are end-of-text and ordinary ones follow (checked below)
EOS_SCALE = 3.0


@pytest.fixture(scope="module")
def eos_model(tmp_path_factory):
    tiny = resolve_model("random:tiny")
    folder = tmp_path_factory.mktemp("eos-model")
    shutil.copy(tiny.folder / "config.json", folder / "config.json")
    tensors = load_file(str(tiny.safetensors))
    tensors["wte.weight"][END_OF_TEXT] *= np.float32(EOS_SCALE)
    save_file(tensors, str(folder / "model.safetensors"))
    return resolve_model(str(folder))


@pytest.fixture(scope="module")
def reference(eos_model) -> list[int]:
    """The shared sampler's greedy tokens over hf's prefill and decode calls (Engine.stream)."""
    with EngineProcess("hf", eos_model) as engine:
        tokens = engine.tokens(PROMPT, N)
    assert END_OF_TEXT in tokens and tokens[-1] != END_OF_TEXT  # end-of-text comes, and text after it
    return tokens


@pytest.mark.parametrize(
    "name",
    [
        "hf-assisted",
        pytest.param("ortgenai", marks=pytest.mark.extras),
        pytest.param("openvino-genai", marks=pytest.mark.extras),
    ],
)
def test_own_loop_emits_end_of_text_and_goes_on(name, eos_model, reference):
    available, why = registry.available(name)
    if not available:
        pytest.skip(why)
    with EngineProcess(name, eos_model) as engine:
        assert engine.tokens(PROMPT, N) == reference


def test_the_parity_oracle_s_generate_emits_end_of_text_as_the_engines_do(eos_model, reference):
    """The tests' transformers reference (conftest.hf_reference) runs generate without end-of-text, not
    with min_new_tokens, which would mask it and make every fp32 engine disagree where it comes."""
    from tests.conftest import hf_reference

    oracle = hf_reference.__wrapped__(eos_model)
    assert oracle.greedy(PROMPT, N) == reference
