"""The official `openai` SDK against `whistle-stop serve` (numpy on random:tiny): what a client of vLLM
or llama.cpp's server sends works here too: plain and streamed completions, stop strings across token
boundaries, logprobs, echo, n and best_of, lists of prompts."""

from __future__ import annotations

import math

import pytest

from tests.serve_helpers import served
from whistle_stop.backends.sources.tokenizer import encode

openai = pytest.importorskip("openai")

MODEL = "random:tiny"


@pytest.fixture(scope="module")
def client(tiny_model):
    with served("numpy", tiny_model) as server:
        yield openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=120)


def _streamed(client, **kwargs) -> tuple[dict[int, str], dict[int, str | None], list]:
    texts: dict[int, str] = {}
    finishes: dict[int, str | None] = {}
    chunks = list(client.completions.create(model=MODEL, stream=True, **kwargs))
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
            if choice.finish_reason is not None:
                finishes[choice.index] = choice.finish_reason
    return texts, finishes, chunks


def test_plain_and_streamed_give_the_same_text_for_a_seed(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    whole = client.completions.create(model=MODEL, prompt="Hello world", max_tokens=8, seed=11)
    assert whole.choices[0].finish_reason == "length" and whole.usage.completion_tokens == 8
    texts, finishes, chunks = _streamed(
        client, prompt="Hello world", max_tokens=8, seed=11, stream_options={"include_usage": True}
    )
    assert texts == {0: whole.choices[0].text} and finishes == {0: "length"}
    assert chunks[-1].usage.completion_tokens == 8 and chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def _boundary_stop(tokens: list[str]) -> tuple[str, int]:
    """A stop string made of the end of one token and the start of the next, first seen there."""
    text = "".join(tokens)
    offset = 0
    for left, right in zip(tokens, tokens[1:]):
        offset += len(left)
        if len(left) >= 2 and len(right) >= 2 and "\ufffd" not in left + right:
            stop = left[-2:] + right[:2]
            if text.find(stop) == offset - 2:
                return stop, offset - 2
    pytest.skip("no two neighbouring tokens of two characters or more in this text")


def test_a_stop_string_across_tokens_is_cut_plainly_and_mid_stream(client):
    free = client.completions.create(model=MODEL, prompt="The city", max_tokens=24, temperature=0, logprobs=0)
    tokens = free.choices[0].logprobs.tokens
    assert "".join(tokens) == free.choices[0].text
    stop, at = _boundary_stop(tokens)
    cut = client.completions.create(model=MODEL, prompt="The city", max_tokens=24, temperature=0, stop=[stop, "@@"])
    assert cut.choices[0].text == free.choices[0].text[:at] and cut.choices[0].finish_reason == "stop"
    assert cut.usage.completion_tokens < 24  # the worker stopped at the stop string
    texts, finishes, _ = _streamed(client, prompt="The city", max_tokens=24, temperature=0, stop=stop)
    assert texts == {0: free.choices[0].text[:at]} and finishes == {0: "stop"}  # nothing of it went out
    # a stop string that never comes holds nothing back at the end
    texts, finishes, _ = _streamed(client, prompt="The city", max_tokens=24, temperature=0, stop=stop + "\x00")
    assert texts == {0: free.choices[0].text} and finishes == {0: "length"}


def test_logprobs_are_the_raw_distribution_whatever_the_temperature(client):
    """Legacy format; each token's logprob is the log-softmax of the raw logits (vLLM's default): scoring
    the same tokens again with echo (max_tokens 0, as lm-eval does) gives the same numbers."""
    prompt = encode("Once upon")
    sampled = client.completions.create(
        model=MODEL,
        prompt=prompt,
        max_tokens=6,
        temperature=0.7,
        seed=3,
        logprobs=3,
        extra_body={"top_k": 20, "return_token_ids": True},
    )
    logprobs = sampled.choices[0].logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == 6
    assert logprobs.text_offset == sorted(logprobs.text_offset) and logprobs.text_offset[0] == 0
    for token_logprob, top in zip(logprobs.token_logprobs, logprobs.top_logprobs):
        assert 1 <= len(top) <= 3 and token_logprob <= max(top.values()) + 1e-9
        assert sum(math.exp(v) for v in top.values()) <= 1 + 1e-9
    generated = sampled.choices[0].model_extra["token_ids"]
    echoed = client.completions.create(model=MODEL, prompt=prompt + generated, max_tokens=0, echo=True, logprobs=3)
    again = echoed.choices[0].logprobs
    assert echoed.choices[0].text == "Once upon" + sampled.choices[0].text
    assert again.token_logprobs[0] is None and again.top_logprobs[0] is None
    assert again.tokens[len(prompt) :] == logprobs.tokens
    assert again.token_logprobs[len(prompt) :] == pytest.approx(logprobs.token_logprobs, abs=1e-4)
    assert again.top_logprobs[len(prompt) :] == [pytest.approx(top, abs=1e-4) for top in logprobs.top_logprobs]
    assert echoed.usage.completion_tokens == 0 and echoed.choices[0].finish_reason == "length"


def test_greedy_tokens_are_the_top_logprob(client):
    greedy = client.completions.create(model=MODEL, prompt="A", max_tokens=5, temperature=0, logprobs=1)
    logprobs = greedy.choices[0].logprobs
    for token, logprob, top in zip(logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs):
        assert list(top.values()) == pytest.approx([logprob]) and token in top


def test_echo_returns_the_prompt_first(client):
    answer = client.completions.create(model=MODEL, prompt="Echo me", max_tokens=3, echo=True, seed=1)
    plain = client.completions.create(model=MODEL, prompt="Echo me", max_tokens=3, seed=1)
    assert answer.choices[0].text == "Echo me" + plain.choices[0].text
    texts, _, _ = _streamed(client, prompt="Echo me", max_tokens=3, echo=True, seed=1)
    assert texts == {0: answer.choices[0].text}


def test_n_choices_have_their_own_seeds_and_a_seed_repeats_them(client):
    first = client.completions.create(model=MODEL, prompt="Pick", max_tokens=6, n=3, seed=42)
    again = client.completions.create(model=MODEL, prompt="Pick", max_tokens=6, n=3, seed=42)
    texts = [c.text for c in first.choices]
    assert [c.index for c in first.choices] == [0, 1, 2] and len(set(texts)) == 3
    assert [c.text for c in again.choices] == texts
    assert first.usage.completion_tokens == 18 and first.usage.prompt_tokens == 1
    streamed, finishes, _ = _streamed(client, prompt="Pick", max_tokens=6, n=3, seed=42)
    assert streamed == dict(enumerate(texts)) and set(finishes) == {0, 1, 2}
    best = client.completions.create(model=MODEL, prompt="Pick", max_tokens=6, n=2, best_of=3, seed=42, logprobs=0)
    assert len(best.choices) == 2 and best.usage.completion_tokens == 12
    ranked = [sum(c.logprobs.token_logprobs) for c in best.choices]
    assert ranked == sorted(ranked, reverse=True)  # the likeliest first


def test_a_list_of_prompts_text_or_ids(client):
    answer = client.completions.create(model=MODEL, prompt=["One", "Two"], max_tokens=4, n=2, seed=5)
    assert [c.index for c in answer.choices] == [0, 1, 2, 3]
    assert answer.usage.completion_tokens == 16 and answer.usage.prompt_tokens == 2
    alone = client.completions.create(model=MODEL, prompt="Two", max_tokens=4, n=2, seed=5)
    assert [c.text for c in answer.choices[2:]] == [c.text for c in alone.choices]
    ids = client.completions.create(model=MODEL, prompt=[[464, 3290], [15]], max_tokens=2, temperature=0)
    assert len(ids.choices) == 2 and ids.usage.prompt_tokens == 3


def test_refusals_are_4xx_errors_the_sdk_raises(client):
    with pytest.raises(openai.BadRequestError, match="stop takes at most 4"):
        client.completions.create(model=MODEL, prompt="x", stop=["a", "b", "c", "d", "e"])
    with pytest.raises(openai.BadRequestError, match="logprobs must be from 0 to 5"):
        client.completions.create(model=MODEL, prompt="x", logprobs=6)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-4", prompt="x")
