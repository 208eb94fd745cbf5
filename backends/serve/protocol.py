"""The OpenAI completions request as this server takes it (`Completion`), checked.

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
from dataclasses import dataclass, replace

import numpy as np

from ..errors import UsageError
from ..sampling import SamplingParams
from ..sources.tokenizer import encode

DEFAULT_MAX_TOKENS = 16  # OpenAI's default
MAX_STOPS = 4  # OpenAI's limit on stop strings
MAX_LOGPROBS = 5  # OpenAI's limit on the completions API's logprobs
MAX_RUNS = 64  # prompts x best_of: each is a run of its own, one after the other on one worker


class RequestError(Exception):
    """A request the server refuses: HTTP `status` with one line saying why."""

    def __init__(
        self, message: str, status: int = 400, param: str | None = None, kind: str = "invalid_request_error"
    ) -> None:
        message, param = _printable(message), None if param is None else _printable(param)
        super().__init__(message)
        self.message, self.status, self.param, self.kind = message, status, param, kind

    def body(self) -> dict:
        return error_body(self.message, self.status, self.param, self.kind)


def error_body(message: str, status: int, param: str | None = None, kind: str = "invalid_request_error") -> dict:
    """OpenAI's error shape (vLLM's too): {"error": {"message", "type", "param", "code"}}."""
    return {"error": {"message": _printable(message), "type": kind, "param": param, "code": status}}


def _printable(text: str) -> str:
    """`text` with any unpaired surrogate escaped (\\ud800): a message or a field name quotes what the
    client sent, and JSON may carry surrogates that no UTF-8 body or log line can hold."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass(frozen=True)
class ModelInfo:
    """What requests are checked against."""

    name: str  # the name /v1/models lists and `model` may give
    context: int  # positions: prompt + max_tokens must fit
    vocab_size: int


@dataclass(frozen=True)
class CompletionRequest:
    """One run on a worker: one prompt, one seed (a choice, or a best_of candidate)."""

    prompt_ids: tuple[int, ...]
    max_tokens: int
    sampling: SamplingParams
    stream: bool = False
    stop_at_eos: bool = True  # OpenAI's behaviour; ignore_eos=true generates exactly max_tokens
    min_tokens: int = 0  # no stop at end-of-text before this many tokens (the token is not masked)
    token_ids: bool = False  # each choice also carries its token ids (vLLM's return_token_ids)
    include_usage: bool = False  # stream_options.include_usage: a last chunk with the usage
    prompt_was_text: bool = False
    logprobs: int | None = None  # each token's logprob and the best N (None: not asked)
    prompt_logprobs: bool = False  # echo with logprobs: the prompt's tokens scored too


@dataclass(frozen=True)
class Completion:
    """A whole request: every prompt, `n` choices each (the best `n` of `best_of` runs)."""

    prompts: tuple[tuple[int, ...], ...]
    prompt_texts: tuple[str | None, ...]  # as given, for echo (None: token ids, echoed decoded)
    run: CompletionRequest  # the first prompt's first run; the others differ in prompt and seed
    n: int = 1
    best_of: int = 1
    stop: tuple[str, ...] = ()
    logprobs: int | None = None
    echo: bool = False

    @property
    def stream(self) -> bool:
        return self.run.stream

    @property
    def needs_logits(self) -> bool:
        """Logprobs asked, or runs to rank: the worker must see each token's logits."""
        return self.logprobs is not None or self.best_of > self.n

    def runs(self, prompt_index: int) -> list[CompletionRequest]:
        """The `best_of` runs of one prompt, each with its own seed stream: the first takes `seed`
        itself (a single choice samples as `bench` does with that seed), the k-th one drawn from
        (seed, k), so `seed` makes every choice reproducible."""
        base = self.run.sampling
        out = []
        for k in range(self.best_of):
            seed = base.seed if k == 0 else int(np.random.SeedSequence([base.seed, k]).generate_state(1)[0] >> 1)
            out.append(
                replace(
                    self.run,
                    prompt_ids=self.prompts[prompt_index],
                    prompt_was_text=self.prompt_texts[prompt_index] is not None,
                    sampling=base if base.is_greedy else replace(base, seed=seed),
                )
            )
        return out


# Fields accepted only with a value that changes nothing here (what a plain client sends anyway).
_NEUTRAL: dict[str, tuple[object, ...]] = {
    "suffix": (None, ""),
    "frequency_penalty": (None, 0),
    "presence_penalty": (None, 0),
    "repetition_penalty": (None, 1),
    "repeat_penalty": (None, 1),
    "min_p": (None, 0),
    "logit_bias": (None, {}),
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
    "n",
    "best_of",
    "echo",
    "logprobs",
    "stop",
    *_NEUTRAL,
    *_IGNORED,
}
KNOWN_FIELDS = frozenset(_KNOWN)  # every field a request may carry (the fuzzer draws from them)


def parse_completion(body: object, model: ModelInfo) -> Completion:
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
    prompts, texts = _prompts(body.get("prompt"), model.vocab_size)
    echo = _flag(body, "echo")
    asked_tokens = _optional_integer(body, "max_tokens")
    if asked_tokens is not None:
        max_tokens = asked_tokens
    else:
        max_tokens = _integer(body, "n_predict", DEFAULT_MAX_TOKENS)  # llama.cpp's name for it
        if max_tokens < 0:
            max_tokens = DEFAULT_MAX_TOKENS
    if max_tokens < (0 if echo else 1):
        raise RequestError(
            f"max_tokens must be >= {0 if echo else 1}{'' if echo else ' (0 only with echo)'}, got {max_tokens}",
            param="max_tokens",
        )
    longest = max(len(ids) for ids in prompts)
    if longest + max_tokens > model.context:
        raise RequestError(
            f"this model's maximum context length is {model.context} tokens; the request asks for "
            f"{longest + max_tokens} ({longest} in the prompt, {max_tokens} in the completion)",
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
    logprobs = _optional_integer(body, "logprobs")
    if logprobs is not None and not 0 <= logprobs <= MAX_LOGPROBS:
        raise RequestError(f"logprobs must be from 0 to {MAX_LOGPROBS}, got {logprobs}", param="logprobs")
    n = _integer(body, "n", 1)
    best_of = _integer(body, "best_of", n)
    if not 1 <= n <= best_of:
        raise RequestError(f"n must be from 1 to best_of ({best_of}), got {n}", param="n")
    if best_of * len(prompts) > MAX_RUNS:
        raise RequestError(
            f"best_of (or n) x prompts must be at most {MAX_RUNS} (each is a run of its own), "
            f"got {best_of} x {len(prompts)}",
            param="best_of" if "best_of" in body else "n",
        )
    stream = _flag(body, "stream")
    if stream and best_of > n:
        raise RequestError("best_of > n cannot be streamed: the best are known only at the end", param="best_of")
    if best_of > 1 and sampling.is_greedy:
        best_of = n  # greedy: every run is the same; one would do, but each choice is answered
    run = CompletionRequest(
        prompts[0],
        max_tokens,
        sampling,
        stream=stream,
        stop_at_eos=not _flag(body, "ignore_eos"),
        min_tokens=min_tokens,
        token_ids=_flag(body, "return_token_ids") or _flag(body, "return_tokens"),
        include_usage=_flag(options or {}, "include_usage"),
        prompt_was_text=texts[0] is not None,
        logprobs=0 if logprobs is None and best_of > n else logprobs,
        prompt_logprobs=echo and logprobs is not None,
    )
    return Completion(prompts, texts, run, n, best_of, _stops(body.get("stop")), logprobs, echo)


def _stops(stop: object) -> tuple[str, ...]:
    """Up to MAX_STOPS strings (one string is a list of one); "" stops nothing."""
    stops = [stop] if isinstance(stop, str) else stop
    if stops is None:
        return ()
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise RequestError("stop must be a string or a list of strings", param="stop")
    if len(stops) > MAX_STOPS:
        raise RequestError(f"stop takes at most {MAX_STOPS} strings, got {len(stops)}", param="stop")
    for s in stops:
        _check_unicode(s, "stop")
    return tuple(s for s in stops if s)


def _check_unicode(text: str, param: str) -> None:
    """JSON may carry lone surrogates (\\ud800): no UTF-8 text, and no tokenizer, can hold one."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RequestError(
            f"{param} is not valid Unicode: {exc.reason} at character {exc.start}", param=param
        ) from None


def _prompts(prompt: object, vocab_size: int) -> tuple[tuple[tuple[int, ...], ...], tuple[str | None, ...]]:
    """One prompt or a list of them, each text or token ids: (ids of each, text of each or None)."""
    if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
        if len(prompt) > MAX_RUNS:
            raise RequestError(f"at most {MAX_RUNS} prompts per request, got {len(prompt)}", param="prompt")
        parsed = [_prompt(p, vocab_size) for p in prompt]
    elif isinstance(prompt, list) and any(isinstance(p, (str, list)) for p in prompt):
        raise RequestError("a list of prompts must hold only texts or lists of token ids", param="prompt")
    else:
        parsed = [_prompt(prompt, vocab_size)]
    return tuple(ids for ids, _ in parsed), tuple(text for _, text in parsed)


def _prompt(prompt: object, vocab_size: int) -> tuple[tuple[int, ...], str | None]:
    """Text or token ids: (ids, the text or None)."""
    if isinstance(prompt, str):
        if not prompt:
            raise RequestError("the prompt is empty", param="prompt")
        _check_unicode(prompt, "prompt")
        ids = tuple(encode(prompt))
        if not ids:
            raise RequestError("the prompt has no tokens", param="prompt")
        return ids, prompt
    if isinstance(prompt, list):
        if not prompt:
            raise RequestError("the prompt is empty", param="prompt")
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
            raise RequestError("a prompt must be text or a list of token ids (integers)", param="prompt")
        bad = next((i for i in prompt if not 0 <= i < vocab_size), None)
        if bad is not None:
            raise RequestError(f"token id {bad} is outside the vocabulary (0 to {vocab_size - 1})", param="prompt")
        return tuple(prompt), None
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
