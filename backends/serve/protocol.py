"""The OpenAI completions request as this server takes it, and the bodies it answers with.

Every field is checked here, once, with one clear message per problem (`RequestError`, a 4xx).
Sampling settings become the app's own `SamplingParams` and go through its `validate`, so the
server refuses exactly what `bench` refuses. Fields the server cannot honour are refused rather
than silently ignored; the extensions other servers' clients send (vLLM's, llama.cpp's, the
`remote` engine's) are accepted where they mean something here or nothing at all (no prefix
cache: `cache_salt` and `cache_prompt` change nothing).
"""

from __future__ import annotations

import math
import secrets
import time
from dataclasses import dataclass

from ..engines.remote_options import OWNER
from ..errors import UsageError
from ..sampling import SamplingParams
from ..sources.tokenizer import encode

DEFAULT_MAX_TOKENS = 16  # OpenAI's default


class RequestError(Exception):
    """A request the server refuses: HTTP `status` with one line saying why."""

    def __init__(
        self, message: str, status: int = 400, param: str | None = None, kind: str = "invalid_request_error"
    ) -> None:
        super().__init__(message)
        self.message, self.status, self.param, self.kind = message, status, param, kind

    def body(self) -> dict:
        return error_body(self.message, self.status, self.param, self.kind)


def error_body(message: str, status: int, param: str | None = None, kind: str = "invalid_request_error") -> dict:
    """OpenAI's error shape (vLLM's too): {"error": {"message", "type", "param", "code"}}."""
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


@dataclass(frozen=True)
class ModelInfo:
    """What requests are checked against."""

    name: str  # the name /v1/models lists and `model` may give
    context: int  # positions: prompt + max_tokens must fit
    vocab_size: int


@dataclass(frozen=True)
class CompletionRequest:
    prompt_ids: tuple[int, ...]
    max_tokens: int
    sampling: SamplingParams
    stream: bool = False
    stop_at_eos: bool = True  # OpenAI's behaviour; ignore_eos=true generates exactly max_tokens
    min_tokens: int = 0  # no stop at end-of-text before this many tokens (the token is not masked)
    token_ids: bool = False  # each choice also carries its token ids (vLLM's return_token_ids)
    include_usage: bool = False  # stream_options.include_usage: a last chunk with the usage
    prompt_was_text: bool = False


# Fields accepted only with a value that changes nothing here (what a plain client sends anyway).
_NEUTRAL: dict[str, tuple[object, ...]] = {
    "n": (1,),
    "best_of": (None, 1),
    "echo": (None, False),
    "logprobs": (None, 0),
    "suffix": (None, ""),
    "frequency_penalty": (None, 0),
    "presence_penalty": (None, 0),
    "repetition_penalty": (None, 1),
    "repeat_penalty": (None, 1),
    "min_p": (None, 0),
    "logit_bias": (None, {}),
    "stop": (None, [], ""),
}
# Fields that change nothing whatever their value: there is no prefix cache to salt or skip.
_IGNORED = {"user", "cache_salt", "cache_prompt"}
_KNOWN = {
    "model",
    "prompt",
    "max_tokens",
    "n_predict",
    "temperature",
    "top_k",
    "top_p",
    "seed",
    "stream",
    "stream_options",
    "ignore_eos",
    "min_tokens",
    "return_token_ids",
    "return_tokens",
    *_NEUTRAL,
    *_IGNORED,
}


def parse_completion(body: object, model: ModelInfo) -> CompletionRequest:
    """The request in `body` (parsed JSON), checked; RequestError with the first problem."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    unknown = sorted(set(body) - _KNOWN)
    if unknown:
        raise RequestError(f"unknown field(s): {', '.join(unknown)}", param=unknown[0])
    for name, allowed in _NEUTRAL.items():
        value = body.get(name)
        if name in body and not any(_same(value, a) for a in allowed):
            raise RequestError(
                f"{name}={_show(value)} is not supported by this server "
                f"(accepted: {', '.join(_show(a) for a in allowed)})",
                param=name,
            )
    asked = body.get("model")
    if asked is not None and asked != model.name:
        raise RequestError(
            f"the model {_show(asked)} does not exist; this server serves {model.name!r}",
            status=404,
            param="model",
            kind="NotFoundError",
        )
    ids, was_text = _prompt(body.get("prompt"), model.vocab_size)
    asked_tokens = _optional_integer(body, "max_tokens")
    if asked_tokens is not None:
        max_tokens = asked_tokens
    else:
        max_tokens = _integer(body, "n_predict", DEFAULT_MAX_TOKENS)  # llama.cpp's name for it
        if max_tokens < 0:
            max_tokens = DEFAULT_MAX_TOKENS
    if max_tokens < 1:
        raise RequestError(f"max_tokens must be >= 1, got {max_tokens}", param="max_tokens")
    if len(ids) + max_tokens > model.context:
        raise RequestError(
            f"this model's maximum context length is {model.context} tokens; the request asks for "
            f"{len(ids) + max_tokens} ({len(ids)} in the prompt, {max_tokens} in the completion)",
            param="prompt",
        )
    temperature = _number(body, "temperature", 1.0)
    top_p = _number(body, "top_p", 1.0)
    top_k = _integer(body, "top_k", 0)
    seed = body.get("seed")
    seed = secrets.randbelow(2**31) if seed is None else _integer(body, "seed", 0)
    sampling = SamplingParams("greedy" if temperature == 0 else "sample", temperature, top_k, top_p, seed)
    try:
        sampling.validate()
    except UsageError as exc:
        raise RequestError(
            str(exc).replace("top-p", "top_p").replace("top-k", "top_k"), param=_param_of(str(exc))
        ) from None
    if sampling.is_greedy:
        sampling = SamplingParams()  # temperature below GREEDY_BELOW (0 too): argmax, whatever the others say
    options = body.get("stream_options")
    if options is not None and not (isinstance(options, dict) and set(options) <= {"include_usage"}):
        raise RequestError("stream_options must be an object with at most include_usage", param="stream_options")
    min_tokens = _integer(body, "min_tokens", 0)
    if not 0 <= min_tokens <= max_tokens:
        raise RequestError(
            f"min_tokens must be from 0 to max_tokens ({max_tokens}), got {min_tokens}", param="min_tokens"
        )
    return CompletionRequest(
        ids,
        max_tokens,
        sampling,
        stream=_flag(body, "stream"),
        stop_at_eos=not _flag(body, "ignore_eos"),
        min_tokens=min_tokens,
        token_ids=_flag(body, "return_token_ids") or _flag(body, "return_tokens"),
        include_usage=_flag(options or {}, "include_usage"),
        prompt_was_text=was_text,
    )


def _prompt(prompt: object, vocab_size: int) -> tuple[tuple[int, ...], bool]:
    """Text or token ids; a batch of one is taken as its one prompt."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        raise RequestError("one prompt per request (batches of prompts are not supported)", param="prompt")
    if isinstance(prompt, str):
        if not prompt:
            raise RequestError("the prompt is empty", param="prompt")
        return tuple(encode(prompt)), True
    if isinstance(prompt, list):
        if not prompt:
            raise RequestError("the prompt is empty", param="prompt")
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
            raise RequestError("a prompt must be text or a list of token ids (integers)", param="prompt")
        bad = next((i for i in prompt if not 0 <= i < vocab_size), None)
        if bad is not None:
            raise RequestError(f"token id {bad} is outside the vocabulary (0 to {vocab_size - 1})", param="prompt")
        return tuple(prompt), False
    if prompt is None:
        raise RequestError("the prompt is missing", param="prompt")
    raise RequestError("a prompt must be text or a list of token ids", param="prompt")


def _integer(body: dict, name: str, default: int) -> int:
    found = _optional_integer(body, name)
    return default if found is None else found


def _optional_integer(body: dict, name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not (isinstance(value, int) or isinstance(value, float) and value.is_integer()):
        raise RequestError(f"{name} must be a whole number, got {_show(value)}", param=name)
    return int(value)


def _number(body: dict, name: str, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RequestError(f"{name} must be a number, got {_show(value)}", param=name)
    return float(value)


def _flag(body: dict, name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RequestError(f"{name} must be true or false, got {_show(value)}", param=name)
    return value


def _same(value: object, allowed: object) -> bool:
    """JSON equality that keeps true/false apart from 1/0."""
    if isinstance(value, bool) or isinstance(allowed, bool) or value is None or allowed is None:
        return value is allowed
    return value == allowed


def _param_of(message: str) -> str | None:
    return next(
        (p for p in ("temperature", "top_p", "top_k", "seed") if p.replace("_", "-") in message or p in message), None
    )


def _show(value: object) -> str:
    text = repr(value) if not isinstance(value, bool) and value is not None else str(value).lower()
    text = "null" if value is None else text
    return text if len(text) <= 40 else text[:37] + "..."


# --- answers ----------------------------------------------------------------------------------


def completion_body(
    request_id: str,
    model: str,
    created: int,
    text: str,
    token_ids: list[int] | None,
    finish_reason: str,
    prompt_tokens: int,
    completion_tokens: int,
) -> dict:
    choice: dict = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    if token_ids is not None:
        choice["token_ids"] = token_ids
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": usage(prompt_tokens, completion_tokens),
    }


def chunk_body(
    request_id: str, model: str, created: int, text: str, token_ids: list[int] | None, finish_reason: str | None
) -> dict:
    choice: dict = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    if token_ids is not None:
        choice["token_ids"] = token_ids
    return {"id": request_id, "object": "text_completion", "created": created, "model": model, "choices": [choice]}


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def models_body(model: ModelInfo, root: str, created: int) -> dict:
    return {
        "object": "list",
        "data": [
            {
                "id": model.name,
                "object": "model",
                "created": created,
                "owned_by": OWNER,
                "root": root,
                "max_model_len": model.context,
            }
        ],
    }


def now() -> int:
    return int(time.time())
