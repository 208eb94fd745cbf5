"""Speculative decoding's pure parts: the accept/reject rule keeps the target's distribution (chi-square
over synthetic distributions), the draft length adapts and falls back to the target alone, and the
loop keeps both caches right after every rejection (models in numpy whose logits depend on every
token their cache holds, so a position left stale changes them). The native engines' own tests are
in test_native_speculative.py."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from whistle_stop.backends.engines.speculative.decoder import ReadCost, SpeculativeDecoder
from whistle_stop.backends.engines.speculative.draft_length import DraftLength
from whistle_stop.backends.engines.speculative.rule import accept_or_resample, accepted_greedy, draw
from whistle_stop.backends.sampling import Sampler, SamplingParams
from whistle_stop.backends.speculation import SpeculationStats

# chi-square quantiles at p = 0.001 by degrees of freedom
CHI2_999 = {5: 20.52, 35: 66.62, 39: 72.05}


def _chi2(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = probs * counts.sum()
    seen = expected > 0
    assert counts[~seen].sum() == 0  # nothing the target gives no probability
    return float((((counts[seen] - expected[seen]) ** 2) / expected[seen]).sum())


def _distributions(rng: np.random.Generator, rows: int, vocab: int) -> np.ndarray:
    raw = rng.random((rows, vocab)) ** 3  # uneven, every token possible
    return raw / raw.sum(axis=1, keepdims=True)


def test_the_rule_keeps_the_targets_distribution_whatever_the_draft():
    """A target whose distribution depends on the position only (p_j) and a draft far from it (q_j):
    rounds of three drafts and the rule, until two tokens are out. The target alone would draw them
    independently, from p_0 and p_1; over 6,000 sequences the first follows p_0 and the pair
    p_0 x p_1, by chi-square, whether the second token was a kept draft, a resample or a bonus."""
    rng = np.random.default_rng(0)
    vocab, k, sequences = 6, 3, 6000
    q, p = _distributions(rng, k + 2, vocab), _distributions(rng, k + 3, vocab)
    q[1] = np.roll(p[1], 2)  # one position's draft far from the target, the others merely different
    first = np.zeros(vocab, int)
    pairs = np.zeros((vocab, vocab), int)
    lengths = []
    for _ in range(sequences):
        out: list[int] = []
        while len(out) < 2:
            at = len(out)
            drafts = [draw(q[at + i], rng) for i in range(k)]
            made = accept_or_resample(drafts, q[at : at + k], p[at : at + k + 1], rng)
            assert 1 <= len(made) <= k + 1
            lengths.append(len(made))
            out += made
        first[out[0]] += 1
        pairs[out[0], out[1]] += 1
    assert _chi2(first, p[0]) < CHI2_999[vocab - 1]
    assert _chi2(pairs.ravel(), np.outer(p[0], p[1]).ravel()) < CHI2_999[vocab * vocab - 1]
    assert 1 in lengths and max(lengths) > 2  # rejections and kept drafts both happened


def test_the_rule_keeps_a_draft_that_is_the_target_and_rejects_what_the_target_never_makes():
    rng = np.random.default_rng(1)
    p = _distributions(rng, 3, 5)
    same = accept_or_resample([draw(p[0], rng), draw(p[1], rng)], p[:2], p, rng)
    assert len(same) == 3  # q == p: every draft kept, then a bonus token
    never = p.copy()
    never[0, 4] = 0.0
    never[0] /= never[0].sum()
    q = np.zeros((1, 5))
    q[0, 4] = 1.0  # the draft always proposes 4, which the target never makes
    for _ in range(200):
        out = accept_or_resample([4], q, never, rng)
        assert len(out) == 1 and out[0] != 4


def test_greedy_keeps_the_prefix_equal_to_the_targets_tokens():
    assert accepted_greedy([5, 6, 7], [5, 6, 7, 8]) == 3
    assert accepted_greedy([5, 9, 7], [5, 6, 7, 8]) == 1
    assert accepted_greedy([1], [2, 3]) == 0


def test_the_draft_length_grows_with_agreement_and_turns_the_draft_off_without_it():
    good = DraftLength(k_max=8, draft_share=0.3)
    assert good.choose(10) == 0  # the target is timed alone first
    good.target_pass(0.015)
    good.target_pass(0.015)
    for _ in range(30):
        k = good.choose(10)
        good.verified(k, k, 0.0045 * k, 0.015 + 0.002 * k)  # every draft kept
    assert good.choose(10) == 8 and not good.off
    assert good.choose(3) == 3  # never more than the tokens still wanted
    good.verified(8, 8, 0.3, 1.5)  # one pass a shared machine slowed tenfold
    assert good.choose(10) == 8 and not good.off

    bad = DraftLength(k_max=8, draft_share=0.3)
    bad.target_pass(0.015)
    bad.target_pass(0.015)
    passes = 0
    while not bad.off and passes < 100:
        k = bad.choose(100)
        if k:
            bad.verified(k, 0, 0.0045 * k, 0.015 + 0.002 * k)  # nothing kept
        passes += 1
    assert bad.off and passes < 10  # a few wasted passes, then the target alone for good
    assert bad.choose(100) == 0


# ---- the loop, over numpy models whose logits depend on every token their cache holds ----------

VOCAB = 40


def _row(prefix: np.ndarray, salt: int) -> np.ndarray:
    digest = hashlib.blake2b(prefix.astype(np.int64).tobytes(), key=bytes([salt]), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "little")).standard_normal(VOCAB).astype(np.float32)


class PrefixModel:
    """Logits after position j are a function of the tokens its cache holds at 0..j (as a transformer's
    KV cache: a stale or unwritten position changes them). `noise`: how far the draft is from the target."""

    def __init__(self, context: int, noise: float = 0.0) -> None:
        self.cache = np.full(context, -1, np.int64)
        self.noise, self.pos = noise, 0

    def forward(self, ids, pos: int, all_logits: bool, exact: bool = False) -> np.ndarray:
        ids = np.asarray(ids)
        self.cache[pos : pos + len(ids)] = ids
        rows = []
        for j in range(pos, pos + len(ids)):
            prefix = self.cache[: j + 1]
            assert (prefix >= 0).all(), "read a position nothing wrote"
            row = _row(prefix, 0)
            rows.append(row + self.noise * _row(prefix, 1) if self.noise else row)
        return np.stack(rows) if all_logits else rows[-1]

    def prefill(self, ids) -> np.ndarray:
        out = self.forward(ids, 0, False)
        self.pos = len(ids)
        return out

    def decode(self, token: int) -> np.ndarray:
        out = self.forward([token], self.pos, False)
        self.pos += 1
        return out


class FixedLength(DraftLength):
    """Always `k_max` drafts (room allowing): every round speculates, whatever it costs."""

    def choose(self, room: int) -> int:
        return min(self.k_max, room)


def _alone(prompt: list[int], new_tokens: int, context: int) -> tuple[list[int], list[np.ndarray]]:
    """The target by itself: its tokens and the logits after each position from the prompt's last on."""
    model = PrefixModel(context)
    logits = [model.prefill(np.asarray(prompt))]
    tokens = [int(np.argmax(logits[-1]))]
    while len(tokens) < new_tokens:
        logits.append(model.decode(tokens[-1]))
        tokens.append(int(np.argmax(logits[-1])))
    return tokens, logits


@pytest.mark.parametrize("noise, k", [(0.3, 2), (0.6, 5), (1.5, 8), (0.0, 4)])
def test_greedy_tokens_and_every_logit_equal_the_target_alone(noise, k):
    context, new_tokens = 200, 60
    seen: list[tuple[str, int, int, np.ndarray]] = []
    for prompt in ([3, 1, 4, 1, 5], [9], list(range(30))):
        seen.clear()
        target, draft = PrefixModel(context), PrefixModel(context, noise)
        decoder = SpeculativeDecoder(
            target,
            draft,
            ReadCost(100, 1),
            ReadCost(25, 1),
            context,
            k,
            observer=lambda role, position, token, logits: seen.append((role, position, token, logits.copy())),
            policy=FixedLength,
        )
        tokens = list(decoder.generate(prompt, new_tokens, Sampler(SamplingParams())))
        expected, logits = _alone(prompt, new_tokens, context)
        assert tokens == expected
        history = list(prompt + tokens)
        view: list[int] = []  # what the draft's cache should hold: the kept tokens, then this round's drafts
        previous = "target"
        for role, position, token, row in seen:
            if role == "target":  # every row the loop decided with: the target alone's there
                assert token == history[position]
                np.testing.assert_array_equal(row, logits[position - len(prompt) + 1])
            else:  # a round starts on the kept tokens only; within it, on its own drafts
                view = history[:position] if previous == "target" else view[:position]
                fresh = PrefixModel(context, noise)
                np.testing.assert_array_equal(row, fresh.forward(view + [token], 0, True)[-1])
                view = view + [token]
            previous = role
        stats = decoder.stats()
        assert stats.tokens == new_tokens - 1 and stats.target_passes >= 1
        if noise == 0.0:
            assert stats.acceptance == 1.0 and stats.tokens_per_pass > 0.9 * (k + 1)
        elif noise >= 1.5:
            assert stats.acceptance < 0.9  # rejections happened: the rollbacks were exercised


def test_a_draft_that_never_agrees_falls_back_to_the_target_alone():
    class Contrary(PrefixModel):
        def forward(self, ids, pos, all_logits, exact=False):
            rows = super().forward(ids, pos, all_logits)
            return -rows  # its argmax is never the target's

    context, prompt = 400, [1, 2, 3]
    decoder = SpeculativeDecoder(PrefixModel(context), Contrary(context), ReadCost(100, 0), ReadCost(25, 0), context, 8)
    tokens = list(decoder.generate(prompt, 300, Sampler(SamplingParams())))
    assert tokens == _alone(prompt, 300, context)[0]
    stats = decoder.stats()
    assert decoder.lengths.off and stats.accepted == 0
    assert stats.target_passes > 280 and stats.drafted < 40  # a few rounds tried, then one token per pass
    assert "turned off" in decoder.notes()


def _fixed_length_decoder(context: int) -> SpeculativeDecoder:
    """Drafts of 4 from a model half as sharp as the target's, a quarter of its reads."""
    return SpeculativeDecoder(
        PrefixModel(context),
        PrefixModel(context, 0.5),
        ReadCost(100, 0),
        ReadCost(25, 0),
        context,
        4,
        policy=FixedLength,
    )


def test_sampled_tokens_come_from_the_rule_and_stay_in_the_vocabulary():
    context = 100
    decoder = _fixed_length_decoder(context)
    params = SamplingParams("sample", 0.8, 10, 0.9, 3)
    first = list(decoder.generate([5, 6], 40, Sampler(params)))
    again = list(decoder.generate([5, 6], 40, Sampler(params)))
    assert first == again and len(first) == 40 and all(0 <= t < VOCAB for t in first)  # seeded: the same draws
    assert decoder.stats().drafted > 0


def test_the_first_draft_is_drawn_apart_from_the_first_token():
    """The first token comes from the shared sampler and the drafts from the loop's own generator, both
    from one seed: over 3,000 seeds, the second token after the most common first one follows the
    target's distribution there (a generator seeded as the sampler's drew the first draft with the
    first token's numbers, and the pair left it: chi-square ~950 on 39 degrees of freedom)."""
    context, prompt = 50, [5, 6]
    decoder = _fixed_length_decoder(context)
    pairs = []
    for seed in range(3000):
        tokens = list(decoder.generate(prompt, 3, Sampler(SamplingParams("sample", 1.0, 0, 1.0, seed))))
        pairs.append((tokens[0], tokens[1]))
    assert decoder.stats().drafted > 0
    first = np.bincount([a for a, _ in pairs], minlength=VOCAB).argmax()
    seconds = np.bincount([b for a, b in pairs if a == first], minlength=VOCAB)
    target = Sampler(SamplingParams("sample")).probabilities(PrefixModel(context).forward(prompt + [first], 0, False))
    assert _chi2(seconds, target) < CHI2_999[VOCAB - 1]


def test_stats_give_the_rates_the_records_show():
    stats = SpeculationStats(
        tokens=199,
        target_passes=40,
        drafted=180,
        accepted=159,
        draft_ns=800_000_000,
        verify_ns=995_000_000,
        bytes_read=199 * 100_000_000,
    )
    assert stats.acceptance == pytest.approx(159 / 180)
    assert stats.tokens_per_pass == pytest.approx(199 / 40)
    assert stats.draft_ms_per_token == pytest.approx(800 / 199)
    assert stats.verify_ms_per_token == pytest.approx(995 / 199)
    assert stats.bytes_per_token == pytest.approx(100_000_000)
    assert SpeculationStats().acceptance is None and SpeculationStats().tokens_per_pass is None
