"""The server's request checks and a job's end-of-text rule, without a server."""

from __future__ import annotations

import asyncio

import pytest

from whistle_stop.backends.sampling import SamplingParams
from whistle_stop.backends.serve.jobs import Job
from whistle_stop.backends.serve.protocol import ModelInfo, RequestError, parse_completion
from whistle_stop.backends.sources.tokenizer import EOS_ID, encode
from whistle_stop.backends.worker.events import Token

MODEL = ModelInfo("random:tiny", 1024, 50257)


def test_text_and_ids_and_the_apps_own_sampling():
    request = parse_completion(
        {"prompt": "Hello world", "max_tokens": 3, "temperature": 0.7, "top_k": 40, "top_p": 0.9, "seed": 5}, MODEL
    )
    assert request.prompt_ids == tuple(encode("Hello world")) and request.prompt_was_text
    assert request.sampling == SamplingParams("sample", 0.7, 40, 0.9, 5)
    greedy = parse_completion({"prompt": [1, 2], "temperature": 0, "top_k": 3}, MODEL)
    assert greedy.sampling == SamplingParams() and greedy.max_tokens == 16 and greedy.stop_at_eos
    tiny = parse_completion({"prompt": [1, 2], "temperature": 1e-38}, MODEL)  # vLLM's: below 1e-5 is greedy
    assert tiny.sampling == SamplingParams()
    assert parse_completion({"prompt": [[1, 2]]}, MODEL).prompt_ids == (1, 2)  # a batch of one


def test_what_other_clients_send_is_accepted_where_it_changes_nothing():
    """The remote engine's (and vLLM/llama.cpp clients') extensions."""
    request = parse_completion(
        {
            "prompt": [1, 2, 3],
            "max_tokens": 4,
            "stream": True,
            "temperature": 0.0,
            "frequency_penalty": 0.0,
            "presence_penalty": 0.0,
            "ignore_eos": True,
            "min_tokens": 4,
            "n_predict": 4,
            "return_token_ids": True,
            "return_tokens": True,
            "cache_prompt": False,
            "repeat_penalty": 1.0,
            "repetition_penalty": 1.0,
            "min_p": 0.0,
            "top_k": 50257,
            "cache_salt": "abc",
            "n": 1,
            "echo": False,
            "logprobs": None,
            "stop": None,
            "user": "me",
        },
        MODEL,
    )
    assert not request.stop_at_eos and request.min_tokens == 4 and request.token_ids and request.stream
    assert parse_completion({"prompt": "x", "n_predict": 7}, MODEL).max_tokens == 7  # llama.cpp's name


@pytest.mark.parametrize(
    "body, message",
    [
        ({"prompt": "x", "echo": True}, "echo=true is not supported"),
        ({"prompt": "x", "logprobs": 2}, "logprobs=2 is not supported"),
        ({"prompt": "x", "n": True}, "n=true is not supported"),
        ({"prompt": "x", "presence_penalty": 0.5}, "presence_penalty=0.5 is not supported"),
        ({"prompt": "x", "temperature": "hot"}, "temperature must be a number"),
        ({"prompt": "x", "temperature": True}, "temperature must be a number"),
        ({"prompt": "x", "max_tokens": 2, "min_tokens": 3}, "min_tokens must be from 0 to max_tokens (2)"),
        ({"prompt": [1, 2.5]}, "list of token ids"),
        ({"prompt": {"text": "x"}}, "text or a list of token ids"),
        ({"prompt": "x", "stream_options": {"x": 1}}, "stream_options must be an object"),
    ],
)
def test_refusals_name_the_problem(body, message):
    with pytest.raises(RequestError) as caught:
        parse_completion(body, MODEL)
    assert message in caught.value.message and caught.value.status == 400


def _tokens(job: Job, ids: list[int]) -> list[bool]:
    return [job.push(Token(job.id, i, token, "", i)) for i, token in enumerate(ids)]


def test_end_of_text_ends_a_job_unless_ignored_or_too_early():
    loop = asyncio.new_event_loop()
    try:
        stop = Job(parse_completion({"prompt": [1], "max_tokens": 5}, MODEL), loop)
        assert _tokens(stop, [7, EOS_ID, 9]) == [False, True, False]  # the one after end-of-text is dropped
        assert stop.token_ids == [7] and stop.finish().finish_reason == "stop"
        ignored = Job(parse_completion({"prompt": [1], "max_tokens": 3, "ignore_eos": True}, MODEL), loop)
        assert _tokens(ignored, [7, EOS_ID, 9]) == [False] * 3 and ignored.finish().finish_reason == "length"
        late = Job(parse_completion({"prompt": [1], "max_tokens": 4, "min_tokens": 2}, MODEL), loop)
        assert _tokens(late, [EOS_ID, 8, EOS_ID]) == [False, False, True]
        assert late.token_ids == [EOS_ID, 8] and late.finish().finish_reason == "stop"
        cancelled = Job(parse_completion({"prompt": [1], "max_tokens": 4}, MODEL), loop)
        cancelled.cancel()
        assert cancelled.cancelled and not cancelled.on_cancel(lambda: None)
        assert cancelled.finish().finish_reason == "abort"
    finally:
        loop.close()
