"""Speculative decoding on the own C runtime (`native-spec` and its variants). Greedy output equals the
target engine's alone, token for token, on code, accents, CJK, emoji and plain prompts; a verify pass's
logits equal a one-token decode's bit for bit at every position, and both KV caches hold exactly the
kept tokens after each rejection. The C code runs in spawned children (tests/engine_process.py)."""

from __future__ import annotations

import numpy as np
import pytest

from whistle_stop.backends import registry
from whistle_stop.backends.engine import EngineOptions
from whistle_stop.backends.engines.speculative.draft_length import DraftLength
from whistle_stop.backends.engines.speculative_options import SpeculativeOptions
from whistle_stop.backends.kernels import native
from whistle_stop.backends.sampling import Sampler, SamplingParams
from whistle_stop.backends.sources.tokenizer import encode

from .engine_process import EngineProcess, in_child
from .prompt_set import PROMPTS

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="needs a C compiler")


class FixedLength(DraftLength):
    """Every round drafts `k_max` tokens (room allowing): rejections and rollbacks on every prompt,
    where the engine's own policy would turn a draft as slow as its target off (random:tiny)."""

    def choose(self, room: int) -> int:
        return min(self.k_max, room)


def _forced(
    engine, ids: list[int], new_tokens: int, k: int, sampling: SamplingParams | None = None, rows: bool = True
) -> dict:
    """In the engine's child: its stream with k drafts every round, its counts, and (greedy, `rows`) what
    each model's logits were wherever the loop used them, beside a one-token decode's on the same tokens
    (a decode from the prompt on for every draft row: quadratic in the tokens, so only where it is asked)."""
    decoder = engine.decoder
    decoder.policy, decoder.k_max = FixedLength, k
    seen: list[tuple[str, int, int, np.ndarray]] = []
    decoder.observer = lambda role, position, token, logits: seen.append((role, position, token, logits.copy()))
    try:
        tokens = [int(t) for t in engine.stream(ids, new_tokens, Sampler(sampling or SamplingParams()))]
    finally:
        decoder.observer = None
    stats = engine.speculation
    mismatched = []
    if sampling is None and rows:
        history = list(ids) + tokens
        target, draft = engine.target.model, engine.draft.model
        alone = {"target": [target.prefill(np.asarray(ids, np.int32))], "draft": []}
        for token in tokens[:-1]:  # the target alone, decoding the output token by token
            alone["target"].append(target.decode(token))
        view: list[int] = []
        previous = "target"
        for role, position, token, row in seen:
            if role == "target":
                ok = token == history[position] and np.array_equal(row, alone["target"][position - len(ids) + 1])
            else:  # the draft's cache: the kept tokens before its round, then the round's own drafts
                view = history[:position] if previous == "target" else view[:position]
                sequence = view + [token]
                draft.prefill(np.asarray(sequence[: len(ids)], np.int32))  # as the loop began: the prompt
                expected = None
                for j in range(len(ids), len(sequence)):  # then one token at a time
                    draft.pos = j
                    expected = draft.decode(sequence[j])
                ok = expected is not None and np.array_equal(row, expected)
                view = sequence
            previous = role
            if not ok:
                mismatched.append((role, position))
    return {"tokens": tokens, "mismatched": mismatched, "stats": stats, "rows": len(seen)}


@pytest.fixture(scope="module")
def spec_engines(tiny_model):
    started: dict[tuple[str, str], EngineProcess] = {}

    def engine(name: str, draft: str = "") -> EngineProcess:
        key = (name, draft)
        if key not in started or not started[key].alive:
            options = EngineOptions(threads=2, settings=SpeculativeOptions(draft=draft or None))
            started[key] = EngineProcess(name, tiny_model, options=options)
        return started[key]

    yield engine
    for process in started.values():
        process.close()


@pytest.mark.parametrize("prompt", list(PROMPTS))
def test_greedy_tokens_equal_the_targets_alone(prompt, spec_engines, engines):
    ids = encode(PROMPTS[prompt])
    for name, target in (("native-spec", "native"), ("native-bf16-spec", "native-bf16")):
        expected = engines(target, threads=2).tokens(ids, 100)
        assert spec_engines(name).tokens(ids, 100) == expected  # its own policy (on tiny: the target alone)
        for k in (1, 3, 8):  # the tokens only: the rows the loop used are checked below
            assert spec_engines(name).apply(_forced, ids, 100, k, rows=False)["tokens"] == expected, (name, k)


@pytest.mark.parametrize("draft", ["native-int8", "native-int4"])
def test_every_position_the_loop_used_equals_a_one_token_decode_bit_for_bit(draft, spec_engines, prompt_ids):
    """Both caches roll back after each rejection: every target row the loop decided with is the target
    alone's at that position, and every draft row is the draft's on the kept tokens and its round's drafts."""
    result = spec_engines("native-spec", draft).apply(_forced, prompt_ids, 80, 6)
    stats = result["stats"]
    assert result["mismatched"] == [] and result["rows"] > 80
    assert stats.drafted > 0 and stats.accepted < stats.drafted  # rejections happened: rollbacks exercised
    assert stats.tokens == 79 and stats.target_passes < 79


def _verify_equals_decode(name: str, dtype: str) -> list[str]:
    """In a child: one exact forward over 9 tokens against 9 one-token decodes, per stored type."""
    from whistle_stop.backends.engines.native.engine import NativeEngine
    from whistle_stop.backends.sources.model_files import resolve_model

    engine = NativeEngine(name, EngineOptions(threads=2), dtype=dtype)
    engine.load(resolve_model("random:tiny"), lambda *a: None)
    model = engine.model
    model.prefill(np.arange(100, 120, dtype=np.int32))
    tokens = np.random.default_rng(0).integers(0, 50257, 9).astype(np.int32)
    stepped = np.stack([model.decode(int(t)) for t in tokens])
    together = model.forward(tokens, 20, True, exact=True)
    return [] if np.array_equal(stepped, together) else [f"{dtype}: max |diff| {np.abs(stepped - together).max()}"]


@pytest.mark.parametrize(
    "name, dtype", [("native", "fp32"), ("native-bf16", "bf16"), ("native-int8", "int8"), ("native-int4", "int4")]
)
def test_an_exact_forward_equals_one_token_decodes_bit_for_bit(tiny_model, name, dtype):
    assert in_child(_verify_equals_decode, name, dtype) == []


def test_sampled_runs_keep_their_seed_and_report_their_counts(spec_engines, prompt_ids):
    params = SamplingParams("sample", 0.9, 40, 0.95, 7)
    first = spec_engines("native-spec").apply(_forced, prompt_ids, 40, 4, params)
    again = spec_engines("native-spec").apply(_forced, prompt_ids, 40, 4, params)
    assert first["tokens"] == again["tokens"] and len(first["tokens"]) == 40
    assert first["stats"].drafted > 0


def test_a_draft_of_another_model_keeps_the_targets_tokens(tiny_model, engines, prompt_ids):
    """--spec-draft-model: the draft is another model of GPT-2's vocabulary (here random weights of
    another shape, which hardly ever agree): the output stays the target's, every round's rejections
    roll both caches back, and the notes name the draft's model."""
    expected = engines("native", threads=2).tokens(prompt_ids, 60)
    options = EngineOptions(threads=2, settings=SpeculativeOptions(draft_model="random:tiny-h32"))
    with EngineProcess("native-spec", tiny_model, options=options) as spec:
        assert "random:tiny-h32" in spec.info.notes, spec.info.notes
        assert spec.tokens(prompt_ids, 60) == expected  # its own policy
        forced = spec.apply(_forced, prompt_ids, 60, 4)
        assert forced["tokens"] == expected and forced["mismatched"] == []
        assert forced["stats"].accepted < forced["stats"].drafted / 2  # another model's drafts mostly lose


def test_settings_pick_the_pair_and_refuse_an_engine_of_another_runtime():
    options = EngineOptions(threads=1, settings=SpeculativeOptions(target="native-bf16", draft="native-int4", k=5))
    engine = registry.create("native-spec", options)  # nothing loads yet: construction only
    assert (engine.target_name, engine.draft_name, engine.k_max) == ("native-bf16", "native-int4", 5)
    with pytest.raises(ValueError, match="draft must be an own-runtime"):
        registry.create("native-spec", EngineOptions(settings=SpeculativeOptions(draft="onnx-int8")))
    assert SpeculativeOptions(k="4").k == 4 and SpeculativeOptions(k="x").problem()  # the form gives text
    assert SpeculativeOptions(k=99).problem() and not SpeculativeOptions(k=8).problem()


@pytest.mark.slow
@pytest.mark.parametrize("prompt", list(PROMPTS))
def test_greedy_tokens_equal_natives_on_gpt2(prompt):
    from whistle_stop.backends.sources.model_files import resolve_model

    model, ids = resolve_model("random:gpt2"), encode(PROMPTS[prompt])
    with EngineProcess("native", model, 2) as alone:
        expected = alone.tokens(ids, 100)
    with EngineProcess("native-spec", model, 2) as spec:
        assert spec.tokens(ids, 100) == expected
        assert spec.apply(_forced, ids, 100, 8)["tokens"] == expected
        assert spec.speculation.accepted > 0
