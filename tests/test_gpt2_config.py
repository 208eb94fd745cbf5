"""The one GPT-2 config object and the one rule for which configurations the engines run."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests.conftest import CRASH_PRONE, engine_tokens, load_engine_in_process, load_engine_in_worker
from whistle_stop.backends import registry
from whistle_stop.backends.gpt2_config import TANH_GELU, GPT2Config
from whistle_stop.backends.sources.model_files import resolve_model
from whistle_stop.backends.storage.paths import CONFIGS_DIR

_CORE = ["hf", "torch-static", "onnx", "numpy"]
_PEERS = ["llamacpp", "ctranslate2", "openvino"]


def test_from_json_fills_transformers_defaults():
    config = GPT2Config.from_json(CONFIGS_DIR / "gpt2.json")
    assert (config.n_layer, config.n_head, config.n_embd, config.vocab_size) == (12, 12, 768, 50257)
    assert config.n_inner == 4 * 768 and config.head_dim == 64 and config.supported() == ""
    bare = GPT2Config.from_dict({"n_layer": 2, "n_head": 4, "n_embd": 64, "vocab_size": 50257})
    assert (bare.n_positions, bare.activation_function, bare.layer_norm_epsilon) == (1024, "gelu_new", 1e-5)


def test_weight_bytes_of_gpt2_small():
    """124,439,808 parameters, less the position table (one row per token), at 4 bytes each."""
    config = GPT2Config.from_json(CONFIGS_DIR / "gpt2.json")
    assert config.weight_bytes(4, 4) == 4 * (124_439_808 - 1024 * 768)


@pytest.mark.parametrize(
    "change,why",
    [
        ({"activation_function": "gelu"}, "activation_function=gelu"),
        ({"activation_function": "relu"}, "activation_function=relu"),
        ({"scale_attn_weights": False}, "scale_attn_weights=false"),
        ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx=true"),
        ({"reorder_and_upcast_attn": True}, "reorder_and_upcast_attn=true"),
        ({"tie_word_embeddings": False}, "tie_word_embeddings=false"),
        ({"layer_norm_epsilon": 1e-6}, "layer_norm_epsilon=1e-06"),
        ({"n_head": 3}, "not a multiple of n_head"),
    ],
)
def test_supported_says_why_not(change, why):
    config = GPT2Config.from_dict({**json.loads((CONFIGS_DIR / "tiny.json").read_text()), **change})
    assert why in config.supported()
    with pytest.raises(ValueError, match="numpy cannot run this model"):
        config.require_supported("numpy")


def test_tanh_gelu_names_compute_the_same_function():
    torch = pytest.importorskip("torch")
    from transformers.activations import ACT2FN

    x = torch.linspace(-12, 12, 20001)
    reference = ACT2FN["gelu_new"](x)
    for name in TANH_GELU:
        assert (ACT2FN[name](x) - reference).abs().max() < 1e-6, name
    assert (ACT2FN["gelu"](x) - reference).abs().max() > 1e-4  # the exact erf form is another function


def _variant(tiny_model, tmp_path, **change):
    folder = tmp_path / "variant"
    shutil.copytree(tiny_model.folder, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **change}))
    return resolve_model(str(folder))


def _available(name: str) -> None:
    ok, why = registry.available(name)
    if not ok:
        pytest.skip(why)


@pytest.mark.parametrize("name", _CORE + _PEERS)
def test_every_engine_refuses_the_same_unsupported_config(name, tiny_model, tmp_path):
    _available(name)
    model = _variant(tiny_model, tmp_path, activation_function="gelu")
    with pytest.raises(ValueError, match=f"{name} cannot run this model: .*activation_function=gelu"):
        if name.startswith(CRASH_PRONE):  # native code: loaded in a spawned child, as the app does
            load_engine_in_worker(name, model).close()
        else:
            load_engine_in_process(name, model)


@pytest.mark.parametrize("name", ["numpy", "torch-static"])
def test_gelu_fast_runs_and_equals_hf(name, tiny_model, tmp_path, prompt_ids):
    model = _variant(tiny_model, tmp_path, activation_function="gelu_fast")
    tokens = engine_tokens(name, model, prompt_ids, 20)
    assert tokens == engine_tokens("hf", model, prompt_ids, 20)
    assert np.all(np.asarray(tokens) < 50257)


def test_kv_bytes_per_position_is_every_layers_key_and_value_row():
    from whistle_stop.backends.gpt2_config import GPT2Config

    small = GPT2Config(n_layer=12, n_head=12, n_embd=768, vocab_size=50257)
    assert small.kv_bytes_per_position(4) == 12 * 2 * 768 * 4 == 73728
    assert small.kv_bytes_per_position(2) == 36864
