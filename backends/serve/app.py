"""The routes: /v1/completions (JSON or server-sent events), /v1/models, /health, /metrics.

Every refusal is a JSON error body with a 4xx (or 503 with Retry-After when the queue is full),
and nothing a request does can stop the server. A client that goes away cancels its request:
waiting, it leaves the queue; running, its worker stops after the current token. A body that does
not arrive within BODY_TIMEOUT_S is a 408, and a client gone before its body is complete a logged 499.
"""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import asynccontextmanager

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from .answers import Choice, chunk_body, completion_body, models_body, usage_chunk
from .choice_text import Delta
from .jobs import Job, JobEnd, JobToken
from .pool import OWN_LOOP_REFUSAL, Busy
from .protocol import RequestError, error_body, parse_completion
from .request_log import RequestLogEntry, stamp
from .runs import Runs, add, best, echo_of, finish_reason, new_choice, steps
from .service import Service

MAX_BODY_BYTES = 1 << 20  # a prompt fills at most the context: a megabyte is far more than any needs
CLIENT_GONE = 499  # the log's status for a request whose client went away (nginx's)
BODY_TIMEOUT_S = 5.0  # a request body still incomplete after this is refused (408): it would hold its connection


def create_app(service: Service) -> Starlette:
    @asynccontextmanager
    async def lifespan(_app: Starlette):
        service.start()
        # A streamed answer runs in one of anyio's task groups, whose backend anyio imports at first use
        # (~25 ms): loaded now, not between the first request's first token and its first byte.
        async with anyio.create_task_group():
            pass
        try:
            yield
        finally:
            await asyncio.to_thread(service.close)  # the workers end before the server does

    app = Starlette(
        routes=[
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ],
        exception_handlers={HTTPException: _http_error, Exception: _server_error},  # type: ignore[dict-item]
        lifespan=lifespan,
    )
    app.state.service = service
    return app


# --- plain routes -------------------------------------------------------------------------------


async def health(request: Request) -> Response:
    status, body = request.app.state.service.health()
    return JSONResponse(body, status)


async def metrics(request: Request) -> Response:
    return PlainTextResponse(request.app.state.service.metrics_text(), media_type="text/plain; version=0.0.4")


async def models(request: Request) -> Response:
    service: Service = request.app.state.service
    try:
        service.check_key(request.headers.get("authorization"))
    except RequestError as exc:
        return JSONResponse(exc.body(), exc.status)
    return JSONResponse(models_body(service.info, service.model.model_id, service.created))


ROUTES_TEXT = "POST /v1/completions, GET /v1/models, GET /health, GET /metrics"


def route_error(method: str, path: str, status: int, detail: str) -> str:
    """Starlette's "Not Found" or "Method Not Allowed", said so that a client's author knows what to call
    instead: a chat client asks for /v1/chat/completions, which a model without a chat template has not."""
    if status == 404 and path.rstrip("/").endswith("/chat/completions"):
        return f"{path}: GPT-2 has no chat template; send the text as a prompt to POST /v1/completions"
    if status == 404:
        return f"no route {method} {path}; this server answers {ROUTES_TEXT}"
    if status == 405:
        return f"{method} is not allowed on {path}; this server answers {ROUTES_TEXT}"
    return detail


async def _http_error(request: Request, exc: HTTPException) -> Response:
    message = route_error(request.method, request.url.path, exc.status_code, str(exc.detail))
    return JSONResponse(error_body(message, exc.status_code), exc.status_code, headers=exc.headers)


async def _server_error(_request: Request, exc: Exception) -> Response:
    return JSONResponse(error_body(f"internal error: {type(exc).__name__}", 500, kind="server_error"), 500)


# --- completions --------------------------------------------------------------------------------


async def completions(request: Request) -> Response:
    service: Service = request.app.state.service
    arrived = time.perf_counter_ns()
    try:
        service.check_key(request.headers.get("authorization"))
        completion = parse_completion(await _json(request), service.info)
        if completion.needs_logits and service.pool.own_loop:
            raise RequestError(
                f"{service.spec.name} {OWN_LOOP_REFUSAL}",
                param="logprobs" if completion.logprobs is not None else "best_of",
            )
    except RequestError as exc:
        return _refuse(service, exc, arrived)
    except ClientDisconnect:  # nobody to answer: one line in the log, no traceback
        _refuse(
            service, RequestError("the client went away before its request body was complete", CLIENT_GONE), arrived
        )
        return Response(status_code=CLIENT_GONE)
    runs = Runs(service, completion)
    try:
        job = runs.start(completion.runs(0)[0])
    except Busy as exc:
        return _busy(service, exc, arrived)
    job.arrived_ns = arrived
    watcher = asyncio.create_task(_cancel_on_disconnect(request, runs))
    try:
        if completion.stream:
            first = await job.next()  # the status is known once the first token (or a failure) is there
        else:
            return await _whole(service, runs, job)
    except BaseException:  # cancelled (a shutdown past its deadline): the worker stops too
        runs.cancel()
        raise
    finally:
        watcher.cancel()
    if isinstance(first, JobEnd) and first.status != 200:
        return _failed(service, runs, first)
    if isinstance(first, JobEnd) and job.cancelled:
        _log(service, runs, CLIENT_GONE, stream=True)
        return Response(status_code=CLIENT_GONE)
    return _EventStream(service, runs, first)


async def _json(request: Request) -> object:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise RequestError(f"the request body is larger than {MAX_BODY_BYTES} bytes", 413)
    try:
        body = await asyncio.wait_for(_body(request), BODY_TIMEOUT_S)
    except asyncio.TimeoutError:  # TimeoutError's alias from Python 3.11; distinct on 3.10
        raise RequestError(f"the request body did not arrive within {BODY_TIMEOUT_S:g} s", 408) from None
    if not body.strip():
        raise RequestError("the request body is empty (expected a JSON object)")
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(f"malformed JSON: {exc}") from None
    except RecursionError:  # json's parser recurses once per level: [[[[...]]]] a hundred thousand deep
        raise RequestError("malformed JSON: nested too deeply") from None


async def _body(request: Request) -> bytes:
    """The body, read no further than MAX_BODY_BYTES (a chunked one declares no length)."""
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > MAX_BODY_BYTES:
            raise RequestError(f"the request body is larger than {MAX_BODY_BYTES} bytes", 413)
        parts.append(part)
    return b"".join(parts)


async def _cancel_on_disconnect(request: Request, runs: Runs) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            runs.cancel()
            return


async def _whole(service: Service, runs: Runs, job: Job | None) -> Response:
    """A non-streamed completion: every run, one after the other, then one JSON body."""
    completion = runs.completion
    choices: list[Choice] = []
    for prompt_index in range(len(completion.prompts)):
        candidates: list[Choice] = []
        for k, request in enumerate(completion.runs(prompt_index)):
            if job is None:
                if runs.cancelled:  # the client left between two runs: the next is not started
                    _log(service, runs, CLIENT_GONE)
                    return Response(status_code=CLIENT_GONE)
                try:
                    job = runs.start(request)
                except Busy as exc:
                    runs.cancel()
                    return _busy(service, exc, runs.jobs[0].arrived_ns)
            choice, text = new_choice(completion, prompt_index, job, k)
            end: JobEnd | None = None
            started = False
            async for step in steps(job, text):
                if not started:  # the run has begun: the prompt's scores are in
                    started = True
                    add(choice, echo_of(completion, prompt_index, job))
                for delta, token_id in step.deltas:
                    add(choice, delta, token_id)
                end = step.end or end
            assert end is not None
            if end.status != 200:
                runs.cancel()
                return _failed(service, runs, end)
            if runs.cancelled and end.finish_reason == "abort":
                _log(service, runs, CLIENT_GONE)
                return Response(status_code=CLIENT_GONE)
            choice.finish_reason = finish_reason(text, end)
            choice.tokens, choice.logprob_sum = text.tokens, text.logprob_sum
            candidates.append(choice)
            job = None
        choices += best(candidates, completion.n, prompt_index * completion.n)
    prompt_tokens = sum(len(p) for p in completion.prompts)
    body = completion_body(
        runs.id, service.info.name, int(time.time()), choices, prompt_tokens, sum(c.tokens for c in choices)
    )
    _log(service, runs, 200)
    return JSONResponse(body)


class _EventStream(StreamingResponse):
    """Server-sent events: each choice in turn (one chunk per token, echo first, its finish reason),
    optionally the usage, [DONE]. However the response ends (done, client gone, cancelled at shutdown)
    the running job is stopped and the request logged once."""

    def __init__(self, service: Service, runs: Runs, first: JobToken | JobEnd) -> None:
        self.service, self.runs, self.first = service, runs, first
        self.status = CLIENT_GONE  # until the last event is sent
        self.sent = 0  # token chunks handed to the connection
        super().__init__(
            self._events(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.runs.cancel()
            completion = self.runs.completion
            if self.status == CLIENT_GONE and self.sent >= completion.run.max_tokens * completion.n * len(
                completion.prompts
            ):
                # gone before [DONE] but after every token it asked for: it was served
                _log(self.service, self.runs, 200, stream=True, finish="length")
            else:
                _log(self.service, self.runs, self.status, stream=True)

    async def _events(self):
        """One write per turn of the event loop: the tokens already delivered go out together, and so do
        the closing events. asyncio learns that a client hung up from a failed send, in a callback of a
        later turn; every write before that callback runs goes to the dead socket, and from the fifth on
        each logs "socket.send() raised exception." (a fast engine's backlog was hundreds). After one
        turn, uvicorn knows the client is gone: the stream is cancelled and its job with it."""
        runs, service = self.runs, self.service
        completion, name, created = runs.completion, service.info.name, int(time.time())
        job: Job | None = runs.jobs[0]
        first: JobToken | JobEnd | None = self.first
        completion_tokens = 0
        for prompt_index in range(len(completion.prompts)):
            for k, request in enumerate(completion.runs(prompt_index)):  # best_of is n when streamed
                if job is None:
                    try:
                        job = runs.start(request)
                    except Busy as exc:
                        self.status = 503
                        yield _event(error_body(exc.reason, 503, kind="service_unavailable")) + "data: [DONE]\n\n"
                        return
                choice, text = new_choice(completion, prompt_index, job, prompt_index * completion.n + k)
                started = False
                async for step in steps(job, text, first):
                    out = []
                    if not started:
                        started = True
                        echo = echo_of(completion, prompt_index, job)
                        if echo.text or echo.logprobs is not None:
                            out.append(self._chunk(choice, echo, None, created))
                    deltas = step.deltas[:-1] if step.end is not None else step.deltas
                    out += [self._chunk(choice, delta, token_id, created) for delta, token_id in deltas]
                    if step.end is None:
                        yield "".join(out)
                        self.sent += sum(1 for _, token_id in deltas if token_id is not None)  # resumed: out
                        continue
                    end = step.end
                    if end.status != 200:  # the status line went out already: the error goes in the stream
                        self.status = end.status
                        error = _event(error_body(end.error, end.status, kind="server_error"))
                        yield "".join(out) + error + "data: [DONE]\n\n"
                        return
                    if runs.cancelled and end.finish_reason == "abort":
                        return  # nobody is listening
                    last = Choice(choice.index, token_ids=[] if choice.token_ids is not None else None)
                    last.text, last.finish_reason = step.deltas[-1][0].text, finish_reason(text, end)
                    out.append(_event(chunk_body(runs.id, name, created, last)))
                    yield "".join(out)
                    self.sent += sum(1 for _, token_id in deltas if token_id is not None)
                completion_tokens += text.tokens
                job, first = None, None
        closing = ""
        if completion.run.include_usage:
            prompt_tokens = sum(len(p) for p in completion.prompts)
            closing = _event(usage_chunk(runs.id, name, created, prompt_tokens, completion_tokens))
        yield closing + "data: [DONE]\n\n"
        self.status = 200

    def _chunk(self, choice: Choice, delta: Delta, token_id: int | None, created: int) -> str:
        part = Choice(choice.index, delta.text, delta.logprobs)
        if choice.token_ids is not None:
            part.token_ids = [token_id] if token_id is not None else []
        return _event(chunk_body(self.runs.id, self.service.info.name, created, part))


def _event(body: dict) -> str:
    return f"data: {json.dumps(body, separators=(',', ':'))}\n\n"


def _refuse(service: Service, exc: RequestError, arrived: int, headers: dict | None = None) -> Response:
    service.record(
        RequestLogEntry(stamp(), exc.status, "-", 0, None, (time.perf_counter_ns() - arrived) / 1e6, error=exc.message)
    )
    if exc.status in (408, 413):  # the rest of the body may still come: not on this connection
        headers = {**(headers or {}), "Connection": "close"}
    return JSONResponse(exc.body(), exc.status, headers=headers)


def _busy(service: Service, exc: Busy, arrived: int) -> Response:
    return _refuse(
        service,
        RequestError(exc.reason, 503, kind="service_unavailable"),
        arrived,
        {"Retry-After": str(exc.retry_after_s)},
    )


def _failed(service: Service, runs: Runs, end: JobEnd) -> Response:
    _log(service, runs, end.status, stream=runs.completion.stream, error=end.error)
    headers = {"Retry-After": "5"} if end.status == 503 else None
    kind = {503: "service_unavailable", 400: "invalid_request_error"}.get(end.status, "server_error")
    return JSONResponse(error_body(end.error, end.status, kind=kind), end.status, headers=headers)


def _log(service: Service, runs: Runs, status: int, stream: bool = False, error: str = "", finish: str = "") -> None:
    """One line per request, whatever its runs: its tokens all told, TTFT its first run's."""
    first, last = runs.jobs[0], runs.jobs[-1]
    end = last.end
    ttft = (first.token_ns[0] - first.arrived_ns) / 1e6 if first.token_ns else None
    service.record(
        RequestLogEntry(
            stamp(),
            status,
            runs.id,
            runs.tokens,
            ttft,
            (time.perf_counter_ns() - first.arrived_ns) / 1e6,
            stream,
            finish or (end.finish_reason if end is not None else "abort"),
            error or (end.error if end else ""),
        )
    )
