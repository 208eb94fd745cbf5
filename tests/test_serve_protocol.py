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
    assert request.run.prompt_ids == tuple(encode("Hello world")) and request.run.prompt_was_text
    assert request.run.sampling == SamplingParams("sample", 0.7, 40, 0.9, 5)
    greedy = parse_completion({"prompt": [1, 2], "temperature": 0, "top_k": 3}, MODEL).run
    assert greedy.sampling == SamplingParams() and greedy.max_tokens == 16 and greedy.stop_at_eos
    tiny = parse_completion({"prompt": [1, 2], "temperature": 1e-38}, MODEL).run  # vLLM's: below 1e-5 is greedy
    assert tiny.sampling == SamplingParams()
    assert parse_completion({"prompt": [[1, 2]]}, MODEL).prompts == ((1, 2),)  # a batch of one


def test_the_ecosystems_parameters():
    """stop, logprobs, echo, n, best_of and prompt lists, as vLLM and llama.cpp's server take them."""
    request = parse_completion(
        {"prompt": ["a b", [5, 6]], "stop": ["\n", "", "END"], "logprobs": 3, "echo": True, "n": 2, "seed": 9}, MODEL
    )
    assert request.prompts == (tuple(encode("a b")), (5, 6)) and request.prompt_texts == ("a b", None)
    assert request.stop == ("\n", "END") and request.logprobs == 3 and request.echo and request.n == 2
    assert request.run.prompt_logprobs and request.run.logprobs == 3 and request.best_of == 2
    first, second = request.runs(1)
    assert first.prompt_ids == (5, 6) and first.sampling.seed == 9 and second.sampling.seed != 9
    assert [r.sampling.seed for r in parse_completion({"prompt": "x", "n": 2, "seed": 9}, MODEL).runs(0)] == [
        r.sampling.seed for r in request.runs(0)
    ]  # reproducible
    assert parse_completion({"prompt": "x", "stop": "."}, MODEL).stop == (".",)
    ranked = parse_completion({"prompt": "x", "n": 1, "best_of": 3}, MODEL)
    assert ranked.best_of == 3 and ranked.run.logprobs == 0 and ranked.needs_logits  # ranked by their logprobs
    assert parse_completion({"prompt": "x", "echo": True, "max_tokens": 0}, MODEL).run.max_tokens == 0


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
    ).run
    assert not request.stop_at_eos and request.min_tokens == 4 and request.token_ids and request.stream
    assert parse_completion({"prompt": "x", "n_predict": 7}, MODEL).run.max_tokens == 7  # llama.cpp's name


@pytest.mark.parametrize(
    "body, message",
    [
        ({"prompt": "x", "echo": 1}, "echo must be true or false"),
        ({"prompt": "x", "logprobs": 6}, "logprobs must be from 0 to 5"),
        ({"prompt": "x", "logprobs": True}, "logprobs must be a whole number"),
        ({"prompt": "x", "n": True}, "n must be a whole number"),
        ({"prompt": "x", "n": 3, "best_of": 2}, "n must be from 1 to best_of (2)"),
        ({"prompt": "x", "n": 2, "best_of": 3, "stream": True}, "best_of > n cannot be streamed"),
        ({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, "stop takes at most 4 strings"),
        ({"prompt": "x", "stop": [1]}, "stop must be a string or a list of strings"),
        ({"prompt": "x", "stop": "\ud800"}, "stop is not valid Unicode"),
        ({"prompt": "a\udc00b"}, "prompt is not valid Unicode: surrogates not allowed at character 1"),
        ({"prompt": ["a", 5]}, "must hold only texts or lists of token ids"),
        ({"prompt": ["x"] * 65}, "at most 64 prompts"),
        ({"prompt": "x", "max_tokens": 0}, "max_tokens must be >= 1 (0 only with echo)"),
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
        stop = Job(parse_completion({"prompt": [1], "max_tokens": 5}, MODEL).run, loop)
        assert _tokens(stop, [7, EOS_ID, 9]) == [False, True, False]  # the one after end-of-text is dropped
        assert stop.token_ids == [7] and stop.finish().finish_reason == "stop"
        ignored = Job(parse_completion({"prompt": [1], "max_tokens": 3, "ignore_eos": True}, MODEL).run, loop)
        assert _tokens(ignored, [7, EOS_ID, 9]) == [False] * 3 and ignored.finish().finish_reason == "length"
        late = Job(parse_completion({"prompt": [1], "max_tokens": 4, "min_tokens": 2}, MODEL).run, loop)
        assert _tokens(late, [EOS_ID, 8, EOS_ID]) == [False, False, True]
        assert late.token_ids == [EOS_ID, 8] and late.finish().finish_reason == "stop"
        cancelled = Job(parse_completion({"prompt": [1], "max_tokens": 4}, MODEL).run, loop)
        cancelled.cancel()
        assert cancelled.cancelled and not cancelled.on_cancel(lambda: None)
        assert cancelled.finish().finish_reason == "abort"
    finally:
        loop.close()


def test_only_what_could_still_become_a_stop_string_is_held_back():
    from whistle_stop.backends.serve.choice_text import ChoiceText, first_stop, hold_back

    assert hold_back("Hello wor", ("world", "xyz")) == 3 and hold_back("Hello", ("world",)) == 0
    assert hold_back("ab", ("abc", "bcd")) == 2 and first_stop("a.b!c", ("!", ".")) == 1
    ids = encode("Hello world. Next")
    text = ChoiceText((), (". N", "zzz"), logprobs=True)
    out = [text.push(i, -1.0, ((i, -1.0),)) for i in ids]
    assert "".join(d.text for d in out if d) == "Hello world" and text.stopped and text.tokens == 4
    assert [d.text for d in out] == ["Hello", " world", "", ""]  # "." held back: it began ". N"
    assert text.push(ids[0], -1.0, ()) is None and text.finish().text == "" and text.tokens == 4  # after: nothing
    assert [d.logprobs.text_offset[0] for d in out if d] == [0, 5, 11, 12]
    free = ChoiceText((), ("zzz",), logprobs=False)
    assert "".join(free.push(i, None, ()).text for i in ids) + free.finish().text == "Hello world. Next"
