import numpy as np
import pytest

from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.sampling import Sampler, SamplingParams


def _logits(seed=0, scale=3.0):
    return (np.random.default_rng(seed).standard_normal(50257) * scale).astype(np.float32)


def test_greedy_is_argmax():
    logits = _logits()
    assert Sampler(SamplingParams())(logits) == int(np.argmax(logits))


def test_temperature_zero_is_greedy():
    logits = _logits(1)
    assert Sampler(SamplingParams("sample", temperature=0.0, seed=5))(logits) == int(np.argmax(logits))


@pytest.mark.parametrize("params", [
    SamplingParams("sample", 1.0, 0, 1.0, 7),
    SamplingParams("sample", 0.7, 40, 1.0, 7),
    SamplingParams("sample", 1.2, 0, 0.9, 7),
    SamplingParams("sample", 0.9, 50, 0.8, 7),
])
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


def test_top_p_beyond_the_fast_window_is_still_exact():
    logits = np.zeros(50257, np.float32)  # flat: top-p 0.5 needs ~25k tokens, more than the window
    sampler = Sampler(SamplingParams("sample", 1.0, 0, 0.5, 3))
    picks = [sampler(logits) for _ in range(400)]
    assert max(picks) < 25200 and len(set(picks)) > 300  # ties are broken by token id


@pytest.mark.parametrize("kwargs, message", [
    ({"temperature": -0.1}, "temperature"),
    ({"top_p": 0.0}, "top-p"),
    ({"top_p": 1.5}, "top-p"),
    ({"top_k": -1}, "top-k"),
    ({"decoding": "beam"}, "decoding"),
])
def test_bad_parameters_are_refused(kwargs, message):
    with pytest.raises(UsageError, match=message):
        SamplingParams(**kwargs).validate()
