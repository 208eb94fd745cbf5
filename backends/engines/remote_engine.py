"""Any OpenAI-compatible completion server (vLLM, TGI, llama.cpp's server, `transformers serve`).

Stdlib only. The prompt goes out as token ids, with `max_tokens = N` and the servers' own
switches against stopping at end-of-text (vLLM: ignore_eos; llama.cpp: ignore_eos/
n_predict). Tokens stream back over server-sent events and are yielded as they arrive, so the
worker's timestamps are arrival times (each event's, stamped by the reader thread of
remote_stream.py, which does the blocking network I/O, bounded by connect and read timeouts, while
this thread waits on a queue and checks the cancel event); the API key (read from the environment
variable the user names) is sent in a header and scrubbed from every error message.

Prefix caching (vLLM, TGI, SGLang...) would serve every run after the warm-up from the cache and
turn TTFT into one decode step. So every request is made uncacheable, by what the server's
/v1/models names as the models' owner (asked once, at load): vLLM ("vllm") gets a fresh
`cache_salt`; llama.cpp's servers ("llamacpp", llama-cpp-python's "me") get `cache_prompt: false`
(their tokens stay comparable with the other engines'); `whistle-stop serve` ("whistle-stop") has
no prefix cache, so its prompts go as they are; any other server (or one that rejects
the extra fields) gets a prompt whose first tokens are random per request, cut so the prompt
keeps its length in tokens. The run's notes say which.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import threading
from collections.abc import Iterator, Sequence
from urllib.parse import urlsplit

import numpy as np

from ..engine import EngineInfo, EngineOptions, ServerEngine, StampedToken
from ..sampling import Sampler, SamplingParams
from ..server_metrics import ServerMetrics
from ..server_metrics import parse as parse_metrics
from ..sources.model_files import ModelFiles
from ..sources.prompts import UNIQUE_PREFIX_TOKENS, unique_prefix
from ..sources.tokenizer import decode, encode
from .remote_options import OWNER as WHISTLE_STOP_OWNER
from .remote_options import RemoteOptions
from .remote_stream import MAX_ERROR_BODY, Reader, Rejected, RemoteError

CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0  # below the worker's default 120 s per token, so our message wins
DRAIN_S = 2.0  # the most a finished run waits for the stream's end ([DONE]) after its last token
SALT_NOTE = "prefix caching defeated: a fresh cache_salt per request (vLLM)"
NO_CACHE_NOTE = (
    "prefix caching: cache_prompt=false asked (llama.cpp's server honours it; "
    "llama-cpp-python may still reuse the previous run's prefix)"
)
SERVER_SETTINGS_NOTE = "threads and precision are the server's own"
CLIENT_USAGE_NOTE = "CPU ms/token and peak RSS are this client's only (the server's are not visible)"
_LLAMA_CPP_OWNERS = ("llamacpp", "me")
FRESH_NOTE = "no prefix cache to defeat: a whistle-stop server prefills every request afresh"
PREFIX_NOTE = (
    f"prefix caching defeated: the prompt's first {UNIQUE_PREFIX_TOKENS} tokens are random per request "
    "(length kept; this engine's tokens are not comparable with the others')"
)


def _extensions(new_tokens: int, params: SamplingParams, vocab_size: int) -> dict:
    """Fields beyond the OpenAI schema, dropped (and noted) if a server rejects them."""
    return {
        # vLLM, llama.cpp, whistle-stop: no stop at end-of-text, the token still a candidate (min_tokens
        # would mask it, so a server picked the next-best token where every other engine emits it)
        "ignore_eos": True,
        "n_predict": new_tokens,  # llama.cpp's server (with ignore_eos)
        "return_token_ids": True,
        "return_tokens": True,  # ids, not text (vLLM, llama.cpp)
        "cache_prompt": False,  # llama.cpp: no prompt reuse between runs
        # Plain logits like the other engines: llama-cpp-python defaults to repeat_penalty 1.1,
        # min_p 0.05 and top_k 40. "No top-k" is spelled as the vocabulary size, which every
        # server accepts (vLLM wants -1, llama-cpp-python rejects negative values).
        "repeat_penalty": 1.0,
        "repetition_penalty": 1.0,
        "min_p": 0.0,
        "top_k": params.top_k if params.top_k > 0 else vocab_size,
    }


class RemoteEngine(ServerEngine):
    def __init__(self, name: str, options: EngineOptions) -> None:
        super().__init__(name, options)
        settings = options.settings if isinstance(options.settings, RemoteOptions) else RemoteOptions()
        self.url = settings.url or ""
        self.model_name = settings.model or ""
        self.api_key_env = settings.api_key_env or ""
        self.api_key = settings.api_key or ""  # typed in the GUI; redacted from records
        self.connect_timeout = float(settings.connect_timeout_s or CONNECT_TIMEOUT_S)
        self.read_timeout = float(settings.timeout_s or READ_TIMEOUT_S)
        self.resolved_key = ""
        self._use_extensions = True  # dropped (and noted) if the server rejects unknown fields
        self._ids_prompt = True  # falls back to text if the server wants a string prompt
        # "vllm", "llamacpp", "whistle-stop" or "" (unknown); asked at load, outside every timed run
        # (at the first run if the server did not answer then)
        self._server_kind: str | None = None
        self._has_metrics = True  # until a GET of /metrics fails: then never asked again

    # --- setup -------------------------------------------------------------------------------
    def load(self, model: ModelFiles, progress) -> EngineInfo:
        """No network here: each run connects, so a server that is down fails the runs, clearly."""
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RemoteError(f"remote URL must look like http://host:port/v1, got {_strip_userinfo(self.url)!r}")
        self.scheme, self.host = parts.scheme, parts.hostname
        self.vocab_size = int(model.config.get("vocab_size", 50257))
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.label = f"{self.host}:{self.port}" if parts.port else self.host
        path = parts.path.rstrip("/")
        self.path = path if path.endswith("/completions") else (path or "/v1") + "/completions"
        notes = [
            f"server {self.label}",
            SERVER_SETTINGS_NOTE,
            CLIENT_USAGE_NOTE,
            "a new HTTP connection per run (TTFT includes connecting)",
            "asks for exactly N tokens (ignore_eos)",
        ]
        if self.api_key:
            self.resolved_key = self.api_key
            notes.append("API key given in the app")
        elif self.api_key_env:
            self.resolved_key = os.environ.get(self.api_key_env, "")
            notes.append(
                f"API key from ${self.api_key_env}" if self.resolved_key else f"${self.api_key_env} not set: no API key"
            )
        self._server_kind = self._server()
        encode(" ")  # the tokenizer a text-only server's stream needs, loaded now rather than in a timed run
        return EngineInfo(
            device=f"remote ({self.label})",
            dtype="server",
            weight_bytes_per_token=0,
            samples_natively=True,
            notes="; ".join(notes),
        )

    def server_metrics(self) -> ServerMetrics | None:
        """The server's Prometheus /metrics (vLLM's latency histograms), or None if it has none."""
        if not self._has_metrics:
            return None
        body = self._get("/metrics", 8 * 2**20)
        metrics = parse_metrics(body.decode("utf-8", "replace")) if body is not None else None
        if metrics is None or metrics.ttft is None:
            self._has_metrics = False  # not a server with these histograms: never asked again
            return None
        return metrics

    def _get(self, path: str, limit: int) -> bytes | None:
        """The body of one GET (at most `limit` bytes) when the server answers 200, else None."""
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        try:
            conn = cls(self.host, self.port, timeout=self.connect_timeout)
            try:
                conn.request("GET", path, headers=self._headers())
                response = conn.getresponse()
                return response.read(limit) if response.status == 200 else None
            finally:
                conn.close()
        except (OSError, http.client.HTTPException):
            return None

    def _headers(self) -> dict[str, str]:
        headers = {"User-Agent": "whistle-stop"}
        if self.resolved_key:
            headers["Authorization"] = f"Bearer {self.resolved_key}"
        return headers

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        raise NotImplementedError("a remote server streams tokens, not logits; use stream()")

    def decode(self, token_id: int) -> np.ndarray:
        raise NotImplementedError("a remote server streams tokens, not logits; use stream()")

    # --- a run -------------------------------------------------------------------------------
    def stream(
        self, token_ids: Sequence[int], new_tokens: int, sampler: Sampler, cancel: threading.Event | None = None
    ) -> Iterator[int]:
        notes: list[str] = []
        try:
            yield from self._stream(list(token_ids), new_tokens, sampler.params, cancel, notes)
        finally:
            self.run_notes = "; ".join(dict.fromkeys(notes))

    def _stream(
        self, ids: list[int], new_tokens: int, params: SamplingParams, cancel, notes: list[str]
    ) -> Iterator[int]:
        if not params.is_greedy:
            notes.append(f"sampled by the server's own sampler (seed {params.seed} sent; servers may ignore it)")
        if self._server_kind is None:
            self._server_kind = self._server() or ""
        for _attempt in range(3):  # at most: as asked, without extensions, with a text prompt
            reader = Reader(self, self._body(ids, new_tokens, params))
            try:
                first = reader.next_event(cancel)
            except Rejected as exc:
                reader.close()
                if not self._fallback(exc, notes):
                    raise RemoteError(self.scrub(str(exc))) from None
                continue
            except BaseException:
                reader.close()
                raise
            break
        else:
            raise RemoteError(f"{self.label} rejected every form of the request")
        if not self._use_extensions:
            notes.append("server rejected ignore_eos: it may stop early at end-of-text")
        if not self._ids_prompt:
            notes.append("server wanted a text prompt: it re-tokenised the prompt itself")
        notes.append(
            SALT_NOTE
            if self._salting
            else NO_CACHE_NOTE
            if self._llama_cpp
            else FRESH_NOTE
            if self._fresh
            else PREFIX_NOTE
        )
        count, finish, step, ended = 0, None, 0, None
        try:
            event = first
            while event is not None:
                new_ids, finish = self._tokens_of(event, notes)
                ended = ended or finish
                for token in new_ids:  # an event's tokens came together: its arrival, its step
                    yield StampedToken(token, reader.received_ns, step)
                    count += 1
                    if cancel is not None and cancel.is_set():
                        return
                    if count >= new_tokens:
                        reader.drain(DRAIN_S)  # to [DONE]: hanging up first reads as an abort to the server
                        return
                step += bool(new_ids)
                event = reader.next_event(cancel)
        finally:
            reader.close()
        if count < new_tokens and not (cancel is not None and cancel.is_set()):
            if ended is None and not reader.done:  # neither a finish_reason nor [DONE]: the stream was cut
                raise RemoteError(f"{self.label} closed the stream after {count} of {new_tokens} tokens (cut short)")
            notes.append(f"server sent {count} of {new_tokens} tokens (finish_reason={ended})")

    @property
    def _salting(self) -> bool:
        return self._server_kind == "vllm" and self._use_extensions

    @property
    def _llama_cpp(self) -> bool:
        return self._server_kind == "llamacpp" and self._use_extensions

    @property
    def _fresh(self) -> bool:
        return self._server_kind == WHISTLE_STOP_OWNER and self._use_extensions

    def _body(self, ids: list[int], new_tokens: int, params: SamplingParams) -> bytes:
        if not (self._salting or self._llama_cpp or self._fresh):
            ids = unique_prefix(ids, self.vocab_size)
        body: dict = {"prompt": ids if self._ids_prompt else decode(ids), "max_tokens": new_tokens, "stream": True}
        if self.model_name:
            body["model"] = self.model_name
        body.update(frequency_penalty=0.0, presence_penalty=0.0)
        if params.is_greedy:
            body["temperature"] = 0.0
        else:
            body.update(temperature=params.temperature, top_p=params.top_p, seed=params.seed)
        if self._use_extensions:
            body.update(_extensions(new_tokens, params, self.vocab_size))
            if self._salting:
                body["cache_salt"] = secrets.token_hex(16)
        return json.dumps(body).encode()

    def _server(self) -> str | None:
        """One GET of /v1/models: "vllm", "llamacpp" (either llama.cpp server), "whistle-stop", ""
        (unknown), or None (no answer)."""
        body = self._get(self.path.rsplit("/completions", 1)[0] + "/models", MAX_ERROR_BODY)
        if body is None:
            return None
        try:
            models = json.loads(body).get("data") or []
            owners = {m.get("owned_by") for m in models if isinstance(m, dict)}
        except (ValueError, AttributeError, TypeError):
            return ""
        if "vllm" in owners:
            return "vllm"
        if WHISTLE_STOP_OWNER in owners:
            return WHISTLE_STOP_OWNER
        return "llamacpp" if owners & set(_LLAMA_CPP_OWNERS) else ""

    def _fallback(self, exc: Rejected, notes: list[str]) -> bool:
        """After a rejection: send the prompt as text if the server says so, else drop the extensions first."""
        if self._ids_prompt and "prompt" in str(exc).lower():
            self._ids_prompt = False  # e.g. llama-cpp-python's server: prompt must be a string
            return True
        if self._use_extensions:
            self._use_extensions = False
            return True
        if self._ids_prompt:
            self._ids_prompt = False
            return True
        return False

    def _tokens_of(self, event: dict, notes: list[str]) -> tuple[list[int], str | None]:
        if "error" in event:
            error = event["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise RemoteError(self.scrub(f"{self.label} reported an error mid-stream: {message}"))
        choices = event.get("choices")
        if not isinstance(choices, list):
            raise RemoteError(self.scrub(f"malformed event from {self.label} (no 'choices'): {_short(event)}"))
        if not choices:  # e.g. a final usage-only chunk
            return [], None
        choice = choices[0]
        if not isinstance(choice, dict):
            raise RemoteError(self.scrub(f"malformed event from {self.label}: {_short(event)}"))
        finish = choice.get("finish_reason")
        for ids in (choice.get("token_ids"), event.get("tokens"), choice.get("tokens")):
            if isinstance(ids, list) and all(isinstance(i, int) for i in ids) and ids:
                return [int(i) for i in ids], finish
        text = choice.get("text")
        if text is None:
            text = (choice.get("delta") or {}).get("content") if isinstance(choice.get("delta"), dict) else None
        if not isinstance(text, str):
            if finish is not None:
                return [], finish
            raise RemoteError(self.scrub(f"malformed event from {self.label} (no text): {_short(event)}"))
        if text:
            notes.append("server returned text only: token ids re-tokenised locally (counts and agreement approximate)")
        return encode(text) if text else [], finish

    def scrub(self, text: str) -> str:
        if self.resolved_key:
            text = text.replace(self.resolved_key, "<redacted>")
        return text


def _short(event: object) -> str:
    return json.dumps(event)[:200]


def _strip_userinfo(url: str) -> str:
    parts = urlsplit(url)
    if parts.username or parts.password:
        return url.replace(parts.netloc, parts.netloc.rsplit("@", 1)[-1])
    return url
