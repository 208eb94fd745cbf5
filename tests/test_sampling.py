import numpy as np
import pytest

from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.sampling import GREEDY_BELOW, Sampler, SamplingParams


def _logits(seed=0, scale=3.0):
    return (np.random.default_rng(seed).standard_normal(50257) * scale).astype(np.float32)


def test_greedy_is_argmax():
    logits = _logits()
    assert Sampler(SamplingParams())(logits) == int(np.argmax(logits))


def test_temperature_zero_is_greedy():
    logits = _logits(1)
    assert Sampler(SamplingParams("sample", temperature=0.0, seed=5))(logits) == int(np.argmax(logits))


@pytest.mark.parametrize("temperature", [1e-38, 1e-30, 1e-6, 9.99e-6])
def test_a_tiny_temperature_is_greedy(temperature):
    """Below GREEDY_BELOW (vLLM's 1e-5) a temperature acts as 0: logits / 1e-38 overflow float32 to inf,
    and the draw had been the last token id (50256) every time."""
    logits = _logits(1)
    params = SamplingParams("sample", temperature, 40, 0.9, 5).validate()
    sampler = Sampler(params)
    assert params.is_greedy and {sampler(logits) for _ in range(5)} == {int(np.argmax(logits))}
    assert sampler.probabilities(logits)[int(np.argmax(logits))] == 1.0
    assert not SamplingParams("sample", GREEDY_BELOW).is_greedy  # from the bound up: sampled


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams("sample", 1.0, 0, 1.0, 7),
        SamplingParams("sample", 0.7, 40, 1.0, 7),
        SamplingParams("sample", 1.2, 0, 0.9, 7),
        SamplingParams("sample", 0.9, 50, 0.8, 7),
    ],
)
def test_same_seed_same_tokens(params):
    sequences = [[Sampler(params)(_logits(i)) for i in range(30)] for _ in range(2)]
    assert sequences[0] == sequences[1]
    other = [Sampler(SamplingParams(**{**params.as_dict(), "seed": 8}))(_logits(i)) for i in range(30)]
    assert other != sequences[0]  # the seed matters


def test_top_k_only_picks_from_the_k_best():
    logits = _logits(2, scale=0.5)
    best = set(np.argsort(logits)[-5:].tolist())
    sampler = Sampler(SamplingParams("sample", 1.0, 5, 1.0, 0))
    picks = {sampler(logits) for _ in range(200)}
    assert picks <= best and len(picks) > 1


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = np.full(50257, -30.0, np.float32)
    logits[[10, 20, 30]] = np.log([0.6, 0.3, 0.1])
    sampler = Sampler(SamplingParams("sample", 1.0, 0, 0.85, 0))
    picks = {sampler(logits) for _ in range(300)}
    assert picks == {10, 20}


def test_top_p_over_flat_logits_breaks_ties_by_token_id():
    logits = np.zeros(50257, np.float32)  # flat: top-p 0.5 keeps the 25,129 lowest ids
    sampler = Sampler(SamplingParams("sample", 1.0, 0, 0.5, 3))
    picks = [sampler(logits) for _ in range(400)]
    assert max(picks) < 25129 and len(set(picks)) > 300 and min(picks) < 1000


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 0.0}, "top-p"),
        ({"top_p": 1.5}, "top-p"),
        ({"top_k": -1}, "top-k"),
        ({"decoding": "beam"}, "decoding"),
    ],
)
def test_bad_parameters_are_refused(kwargs, message):
    with pytest.raises(UsageError, match=message):
        SamplingParams(**kwargs).validate()


# --- The sampler before partial selection (it sorted the vocabulary for top-p), kept as the
# reference: without top-p, and with top-p over a small top-k set, the new one picks the same
# tokens for the same logits and seed; with top-p over a large set (rejection sampling) it picks
# only nucleus tokens, at the nucleus's odds.
class _ReferenceSampler:
    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self._rng = np.random.default_rng(params.seed)

    def _probs(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(candidates, their probabilities, the kept positions in walking order)."""
        logits = np.asarray(logits, dtype=np.float32).reshape(-1) / np.float32(self.params.temperature)
        p = self.params
        candidates = np.arange(logits.size)
        if 0 < p.top_k < logits.size:
            candidates = np.argpartition(logits, -p.top_k)[-p.top_k :]
        scores = logits[candidates].astype(np.float64)
        probs = np.exp(scores - scores.max())
        probs /= probs.sum()
        if p.top_p < 1:
            order = np.lexsort((candidates, -probs))
            cumulative = np.cumsum(probs[order])
            keep = order[: min(int(np.searchsorted(cumulative, p.top_p, side="left")) + 1, order.size)]
        elif candidates.size < logits.size:
            keep = np.argsort(candidates)
        else:
            keep = candidates
        return candidates, probs, keep

    def nucleus(self, logits: np.ndarray) -> dict[int, float]:
        """Every token that may be drawn, with its probability after renormalising."""
        candidates, probs, keep = self._probs(logits)
        return dict(zip(candidates[keep].tolist(), (probs[keep] / probs[keep].sum()).tolist()))

    def __call__(self, logits: np.ndarray) -> int:
        if self.params.is_greedy:
            return int(np.argmax(logits))
        candidates, probs, keep = self._probs(logits)
        chosen = probs[keep]
        u = self._rng.random() * chosen.sum()
        index = int(np.searchsorted(np.cumsum(chosen), u, side="right"))
        return int(candidates[keep[min(index, keep.size - 1)]])


def _rejection_path(params: SamplingParams) -> bool:
    return params.top_p < 1 and not 0 < params.top_k <= 2048


def _check_against_reference(params: SamplingParams, logits_list: list[np.ndarray]) -> None:
    fast, reference = Sampler(params), _ReferenceSampler(params)
    for logits in logits_list:
        if _rejection_path(params):
            assert fast(logits) in reference.nucleus(logits)
        else:
            assert fast(logits) == reference(logits)


@pytest.mark.parametrize("scale", [0.5, 3.0, 12.0])  # flat (random weights) to peaked (a trained model)
@pytest.mark.parametrize(
    "temperature, top_k, top_p",
    [
        (1.0, 0, 1.0),
        (0.7, 40, 1.0),
        (1.2, 0, 0.9),
        (0.9, 50, 0.8),
        (0.8, 40, 0.95),
        (1.0, 0, 0.5),
        (0.6, 0, 0.95),
        (1.0, 5000, 0.9),
        (1.0, 5000, 1.0),
        (1.0, 0, 0.99),
        (0.3, 0, 0.9),
        (1.0, 1, 1.0),
    ],
)
def test_same_tokens_as_the_sorting_reference(scale, temperature, top_k, top_p):
    for seed in range(2):
        rng = np.random.default_rng(seed + 100)
        logits_list = [(rng.standard_normal(50257) * scale).astype(np.float32) for _ in range(12)]
        _check_against_reference(SamplingParams("sample", temperature, top_k, top_p, seed), logits_list)


def test_same_tokens_as_the_reference_on_ties_and_masked_tokens():
    rng = np.random.default_rng(4)
    logits = np.round(rng.standard_normal(50257) * 2).astype(np.float32)  # many exact ties
    logits[rng.choice(50257, 20000, replace=False)] = -np.inf  # masked tokens
    for params in (
        SamplingParams("sample", 1.0, 0, 0.9, 1),
        SamplingParams("sample", 1.0, 0, 1.0, 2),
        SamplingParams("sample", 0.5, 0, 0.3, 3),
    ):
        _check_against_reference(params, [logits] * 40)


def test_top_p_keeps_nucleus_tokens_when_outliers_stretch_the_range():
    rng = np.random.default_rng(7)
    logits = (rng.standard_normal(50257) * 1e-3).astype(np.float32)
    logits[rng.choice(50257, 100, replace=False)] = 3.0
    for params in (SamplingParams("sample", 1.0, 0, 0.5, 1), SamplingParams("sample", 0.9, 0, 0.97, 2)):
        _check_against_reference(params, [logits] * 40)


@pytest.mark.parametrize("top_k", [0, 3000])  # the whole vocabulary, and a large top-k set
def test_top_p_draws_follow_the_nucleus_odds(top_k):
    """Rejection sampling must give each nucleus token exactly its renormalised probability:
    six strong tokens over a flat tail, top-p 0.7 keeps four of them (three of the top 3,000),
    checked by chi-square."""
    logits = np.full(50257, -6.6, np.float32)  # the tail: about 17% of the mass
    strong = [5, 900, 17000, 33000, 42000, 50000]
    logits[strong] = np.log([0.30, 0.20, 0.15, 0.10, 0.05, 0.03]).astype(np.float32) + 6.0
    params = SamplingParams("sample", 1.0, top_k, 0.7, 11)  # probabilities 0.3, 0.5, 0.65, 0.75 cumulated
    nucleus = _ReferenceSampler(params).nucleus(logits)
    assert set(nucleus) == ({5, 900, 17000, 33000} if top_k == 0 else {5, 900, 17000})  # the tail weighs less in top-k
    sampler, draws = Sampler(params), 3000
    counts = np.bincount([sampler(logits) for _ in range(draws)], minlength=50257)
    assert counts.sum() == counts[list(nucleus)].sum()  # nothing outside the nucleus
    expected = np.array([nucleus[t] * draws for t in nucleus])
    chi2 = float((((counts[list(nucleus)] - expected) ** 2) / expected).sum())
    assert chi2 < {2: 13.82, 3: 16.27}[len(nucleus) - 1]  # the chi-square quantile at p = 0.001


def test_sampler_probe_times_every_setting_and_the_floor():
    from scripts.sampler_probe import SETTINGS, measure

    results = measure(rounds=1, count=3)
    assert set(results) == set(SETTINGS) | {"floor (max, subtract, exp, sum)"}
    assert all(value > 0 for value in results.values())


@pytest.mark.parametrize(
    "temperature, top_k, top_p", [(1.0, 0, 1.0), (0.7, 40, 1.0), (1.2, 0, 0.9), (0.8, 40, 0.95), (1.0, 3000, 0.8)]
)
def test_probabilities_are_the_distribution_the_sampler_draws_from(temperature, top_k, top_p):
    """What a speculative engine's accept/reject rule compares: the nucleus the sorting reference keeps,
    at its renormalised odds; one-hot at the argmax when greedy."""
    rng = np.random.default_rng(9)
    logits = (rng.standard_normal(50257) * 3).astype(np.float32)
    params = SamplingParams("sample", temperature, top_k, top_p, 1)
    probs = Sampler(params).probabilities(logits)
    nucleus = _ReferenceSampler(params).nucleus(logits)
    assert set(np.flatnonzero(probs).tolist()) == set(nucleus)
    np.testing.assert_allclose(probs[list(nucleus)], list(nucleus.values()), rtol=1e-5)
    assert probs.sum() == pytest.approx(1.0)
    greedy = Sampler(SamplingParams()).probabilities(logits)
    assert greedy[int(np.argmax(logits))] == 1.0 and greedy.sum() == 1.0
