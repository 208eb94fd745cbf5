"""The nanogpt engine: nanoGPT's generate (no KV cache, whole sequence per token) against transformers."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from tests.conftest import engine_tokens, greedy_logits, load_engine_in_process
from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.sources.model_files import resolve_model
from whistle_stop.backends.sources.prompts import prompt_of_length

VOCAB = 50257
ATOL_FP32 = 1e-4  # as for torch-static: tiny's logits reach ~8, fp32 differences are ~1e-5


def lengths_seen(engine) -> list[int]:
    """Record the sequence length of every forward pass the engine's model makes."""
    seen: list[int] = []
    engine.model.register_forward_pre_hook(lambda module, args: seen.append(args[0].shape[1]))
    return seen


def test_greedy_equals_hf(tiny_model, prompt_ids, hf_reference):
    tokens = engine_tokens("nanogpt", tiny_model, prompt_ids, 30)
    assert tokens == hf_reference.greedy(prompt_ids, 30)


def test_every_token_recomputes_the_whole_sequence(tiny_model, prompt_ids, hf_reference):
    engine = load_engine_in_process("nanogpt", tiny_model)
    seen = lengths_seen(engine)
    tokens, logits = greedy_logits(engine, prompt_ids, 8)
    assert seen == [len(prompt_ids) + step for step in range(9)]  # no cache: 12, 13, ..., 20 positions
    reference = hf_reference.logits(prompt_ids + tokens)[len(prompt_ids) - 1 :]
    assert logits.dtype == np.float32 and logits.shape == (9, VOCAB)
    np.testing.assert_allclose(logits, reference, atol=ATOL_FP32, rtol=0)


def test_decoding_past_the_context_crops_to_its_last_positions(tiny_model, hf_reference):
    """nanoGPT's idx_cond. A bench refuses prompt + new tokens beyond the context (prepare_bench),
    so the crop is reached here by calling decode directly past tiny's 1024 positions."""
    context = tiny_model.gpt2_config.n_positions
    engine = load_engine_in_process("nanogpt", tiny_model)
    seen = lengths_seen(engine)
    ids = prompt_of_length(context)
    tokens, logits = greedy_logits(engine, ids, 2)  # sequences of 1025 and 1026 tokens
    assert seen == [context] * 3
    sequence = ids + tokens
    for step in (1, 2):
        window = sequence[len(ids) + step - context : len(ids) + step]  # the last `context` tokens
        np.testing.assert_allclose(logits[step], hf_reference.logits(window)[-1], atol=ATOL_FP32, rtol=0)


def test_forward_logits_match_hf_at_every_position(tiny_model, hf_reference):
    engine = load_engine_in_process("nanogpt", tiny_model)
    ids = prompt_of_length(40)
    logits = engine.forward_logits(ids)
    assert logits.dtype == np.float32 and logits.shape == (40, VOCAB)
    np.testing.assert_allclose(logits, hf_reference.logits(ids), atol=ATOL_FP32, rtol=0)
    with pytest.raises(UsageError, match="1 to 1024"):
        engine.forward_logits(prompt_of_length(1025))


def test_a_new_prompt_starts_a_clean_sequence(tiny_model, prompt_ids):
    engine = load_engine_in_process("nanogpt", tiny_model)
    first_tokens, first = greedy_logits(engine, prompt_ids, 5)
    greedy_logits(engine, prompt_of_length(60), 10)
    again_tokens, again = greedy_logits(engine, prompt_ids, 5)
    assert again_tokens == first_tokens
    np.testing.assert_allclose(again, first, atol=1e-6, rtol=0)


def test_engine_info_and_threads(tiny_model):
    from whistle_stop.backends import registry
    from whistle_stop.backends.engine import EngineOptions

    engine = registry.create("nanogpt", EngineOptions(threads=2))
    info = engine.load(tiny_model, lambda *a: None)
    try:
        assert (info.device, info.dtype, info.kv_bytes_per_position) == ("cpu", "fp32", 0)
        assert info.weight_bytes_per_token == tiny_model.gpt2_config.weight_bytes(4, 4)
        assert "no KV cache: recomputes the whole sequence for every token (nanoGPT's generate)" in info.notes
        assert "threads=2" in info.notes and torch.get_num_threads() == 2
        assert engine.model.lm_head.weight is engine.model.transformer.wte.weight  # tied, stored once
    finally:
        torch.set_num_threads(1)


def test_refuses_an_unsupported_config(tiny_model, tmp_path):
    folder = tmp_path / "variant"
    shutil.copytree(tiny_model.folder, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "activation_function": "gelu"}))
    with pytest.raises(ValueError, match="nanogpt cannot run this model: .*activation_function=gelu"):
        load_engine_in_process("nanogpt", resolve_model(str(folder)))
