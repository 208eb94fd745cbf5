"""The transformers engines against transformers' own `generate`."""

import threading

import pytest
import torch

from tests.conftest import engine_tokens, load_engine_in_process
from whistle_stop.backends import registry
from whistle_stop.backends.engine import EngineOptions
from whistle_stop.backends.sampling import SamplingParams

N = 24


def test_hf_greedy_equals_generate(tiny_model, prompt_ids, hf_reference):
    assert engine_tokens("hf", tiny_model, prompt_ids, N) == hf_reference.greedy(prompt_ids, N)


@pytest.mark.parametrize("name", ["hf-bf16", "hf-int8", "hf-fp16-dynamic"])
def test_low_precision_engines_report_agreement(name, tiny_model, prompt_ids, hf_reference):
    from whistle_stop.backends.results.stats import agreement

    tokens = engine_tokens(name, tiny_model, prompt_ids, N)
    assert len(tokens) == N and all(0 <= t < 50257 for t in tokens)
    same, first = agreement(hf_reference.greedy(prompt_ids, N), tokens)
    assert 0 <= same <= N  # reported, not required: quantisation may diverge


def test_hf_logits_match_transformers(tiny_model, prompt_ids, hf_reference):
    import numpy as np

    engine = load_engine_in_process("hf", tiny_model)
    full = hf_reference.logits(prompt_ids + [5, 6, 7])
    np.testing.assert_allclose(engine.prefill(prompt_ids), full[len(prompt_ids) - 1], atol=1e-4)
    for offset, token in enumerate([5, 6, 7]):
        np.testing.assert_allclose(engine.decode(token), full[len(prompt_ids) + offset], atol=1e-4)


def test_int8_really_quantises_every_matmul(tiny_model):
    import torch
    from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantLinear

    from whistle_stop.backends.engines.torch_util import count_int8_linears

    engine = registry.create("hf-int8", EngineOptions(threads=1))
    info = engine.load(tiny_model, lambda *a: None)
    expected = 4 * tiny_model.config["n_layer"] + 1  # 49 on GPT-2 124M
    assert count_int8_linears(engine.model) == expected
    block = engine.model.transformer.h[0]
    for layer in (block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj, engine.model.lm_head):
        assert isinstance(layer, DynamicQuantLinear) and layer.weight().dtype == torch.qint8
    assert f"{expected} int8 linears" in info.notes


def test_fp16_dynamic_converts_only_the_lm_head_and_says_so(tiny_model):
    """The founding write-up's quantize_dynamic(float16) on the unmodified model: GPT-2's blocks
    are Conv1D, so only lm_head (an nn.Linear) converts; the notes say so."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantLinear
    from transformers.pytorch_utils import Conv1D

    engine = registry.create("hf-fp16-dynamic", EngineOptions(threads=1))
    info = engine.load(tiny_model, lambda *a: None)
    assert isinstance(engine.model.lm_head, DynamicQuantLinear)
    assert engine.model.lm_head._packed_params.dtype == torch.float16
    assert isinstance(engine.model.transformer.h[0].mlp.c_fc, Conv1D)
    assert "converted lm_head (" in info.notes and "torchao" in info.notes
    config = tiny_model.gpt2_config
    assert info.weight_bytes_per_token == config.weight_bytes(4) - 2 * config.vocab_size * config.n_embd


def test_shared_sampling_is_reproducible(tiny_model, prompt_ids):
    params = SamplingParams("sample", 0.9, 50, 0.95, 1234)
    first = engine_tokens("hf", tiny_model, prompt_ids, N, params)
    assert first == engine_tokens("hf", tiny_model, prompt_ids, N, params)
    assert first != engine_tokens("hf", tiny_model, prompt_ids, N, SamplingParams("sample", 0.9, 50, 0.95, 99))


def test_prompt_at_the_context_limit(tiny_model):
    from whistle_stop.backends.sources.prompts import prompt_of_length

    ids = prompt_of_length(tiny_model.context - 1)
    assert len(engine_tokens("hf", tiny_model, ids, 1)) == 1


def test_hf_uses_transformers_supported_cache_api(tiny_model, prompt_ids, hf_reference):
    """transformers 5.24 deprecates past_key_values (gone in 5.40): hf's prefill and decode must
    use the supported form, silently, and still give generate's tokens. The warnings are recorded
    here, so pyproject's ignore::DeprecationWarning cannot hide one."""
    import warnings

    from tests.conftest import greedy_logits

    engine = load_engine_in_process("hf", tiny_model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tokens, _ = greedy_logits(engine, prompt_ids, N)
    deprecations = [
        f"{w.category.__name__}: {w.message}"
        for w in caught
        if issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning, FutureWarning))
    ]
    assert deprecations == []
    assert tokens == hf_reference.greedy(prompt_ids, N)


def test_assisted_greedy_equals_generate_and_reports_what_it_drafted(tiny_model, hf_reference):
    """hf-assisted: transformers' assisted generation with the int8 copy as assistant. Greedy tokens
    equal the model's own (code, accents/CJK/emoji, plain); tokens come several per target pass."""
    from tests.prompt_set import PROMPTS
    from whistle_stop.backends.engines.hf_options import AssistedOptions
    from whistle_stop.backends.sampling import Sampler
    from whistle_stop.backends.sources.tokenizer import encode

    engine = registry.create("hf-assisted", EngineOptions(threads=1, settings=AssistedOptions(assistant_confidence=0)))
    info = engine.load(tiny_model, lambda *a: None)
    assert info.multi_token_steps and info.samples_natively and "int8 linears" in info.notes
    for text in PROMPTS.values():
        ids = encode(text)
        assert list(engine.stream(ids, 40, Sampler(SamplingParams()))) == hf_reference.greedy(ids, 40)
        stats = engine.speculation
        assert stats.drafted > 0 and 0 < stats.tokens < 40
        assert stats.tokens_per_pass > 1.0 and 0 < stats.accepted <= stats.drafted
    cancel = threading.Event()
    tokens = []
    for token in engine.stream(encode(PROMPTS["plain"]), 40, Sampler(SamplingParams()), cancel):
        tokens.append(token)
        cancel.set()
    assert 1 <= len(tokens) < 40  # stops within a pass
    assert AssistedOptions(assistant_tokens="x").problem()
    assert AssistedOptions(assistant_confidence="0.2").assistant_confidence == 0.2  # the form gives text
    engine.close()


def test_assisted_says_when_its_confidence_threshold_cut_the_drafts_short(tiny_model, prompt_ids, hf_reference):
    from whistle_stop.backends.sampling import Sampler
    from whistle_stop.backends.speculation import SpeculationStats

    engine = registry.create("hf-assisted", EngineOptions(threads=1))  # transformers' defaults: threshold 0.4
    engine.load(tiny_model, lambda *a: None)
    assert list(engine.stream(prompt_ids, 30, Sampler(SamplingParams()))) == hf_reference.greedy(prompt_ids, 30)
    # Where scikit-learn is installed, transformers moves the threshold within a run (its ROC fit), so how
    # short the drafts come depends on the environment; the note must follow what the run measured.
    stats = engine.speculation
    short = stats.drafted <= 1.5 * stats.target_passes
    assert ("--hf-assistant-confidence 0" in engine.run_notes) == short, (stats, engine.run_notes)
    engine.speculation = SpeculationStats(tokens=29, target_passes=29, drafted=29)  # one token a pass
    assert "drafted 1.00 tokens per pass" in engine._short_drafts_note()
    engine.speculation = SpeculationStats(tokens=29, target_passes=7, drafted=23)  # long drafts: no such note
    assert engine._short_drafts_note() == ""
    engine.close()


def test_assisted_sampling_without_top_k_draws_from_the_whole_vocabulary(tiny_model, prompt_ids):
    """--top-k 0 is no limit for hf-assisted too: at temperature 100 nearly every draw lies outside each
    position's top 50 (transformers' default top_k, which a None top_k became)."""
    from whistle_stop.backends.sampling import Sampler

    engine = load_engine_in_process("hf-assisted", tiny_model)
    tokens = list(engine.stream(prompt_ids, 8, Sampler(SamplingParams("sample", 100.0, 0, 1.0, 3))))
    logits = engine.prefill(prompt_ids)
    ranks = []
    for token in tokens:  # each token's rank among its position's logits, from the same fp32 model
        ranks.append(int((logits > logits[token]).sum()))
        logits = engine.decode(token)
    engine.close()
    assert len(tokens) == 8
    assert sum(rank >= 50 for rank in ranks) >= 4, ranks
