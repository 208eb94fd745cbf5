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

from ..sources.tokenizer import IncrementalDetokenizer
from .jobs import Job, JobEnd, JobToken
from .pool import Busy
from .protocol import RequestError, chunk_body, completion_body, error_body, models_body, parse_completion, usage
from .request_log import RequestLogEntry, stamp
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
    except RequestError as exc:
        return _refuse(service, exc, arrived)
    except ClientDisconnect:  # nobody to answer: one line in the log, no traceback
        _refuse(
            service, RequestError("the client went away before its request body was complete", CLIENT_GONE), arrived
        )
        return Response(status_code=CLIENT_GONE)
    job = Job(completion, asyncio.get_running_loop())
    try:
        service.pool.submit(job)
    except Busy as exc:
        return _refuse(
            service,
            RequestError(exc.reason, 503, kind="service_unavailable"),
            arrived,
            {"Retry-After": str(exc.retry_after_s)},
        )
    watcher = asyncio.create_task(_cancel_on_disconnect(request, job))
    try:
        if completion.stream:
            first = await job.next()  # the status is known once the first token (or a failure) is there
        else:
            return await _whole(service, job)
    except BaseException:  # cancelled (a shutdown past its deadline): the worker stops too
        job.cancel()
        raise
    finally:
        watcher.cancel()
    if isinstance(first, JobEnd) and first.status != 200:
        return _failed(service, job, first)
    if isinstance(first, JobEnd) and job.cancelled:
        _log(service, job, CLIENT_GONE, stream=True)
        return Response(status_code=CLIENT_GONE)
    return _EventStream(service, job, first)


async def _json(request: Request) -> object:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise RequestError(f"the request body is larger than {MAX_BODY_BYTES} bytes", 413)
    try:
        body = await asyncio.wait_for(request.body(), BODY_TIMEOUT_S)
    except asyncio.TimeoutError:  # TimeoutError's alias from Python 3.11; distinct on 3.10
        raise RequestError(f"the request body did not arrive within {BODY_TIMEOUT_S:g} s", 408) from None
    if len(body) > MAX_BODY_BYTES:
        raise RequestError(f"the request body is larger than {MAX_BODY_BYTES} bytes", 413)
    if not body.strip():
        raise RequestError("the request body is empty (expected a JSON object)")
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(f"malformed JSON: {exc}") from None
    except RecursionError:  # json's parser recurses once per level: [[[[...]]]] a hundred thousand deep
        raise RequestError("malformed JSON: nested too deeply") from None


async def _cancel_on_disconnect(request: Request, job: Job) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            job.cancel()
            return


async def _whole(service: Service, job: Job) -> Response:
    """A non-streamed completion: every token, then one JSON body."""
    detokenizer = IncrementalDetokenizer(job.request.prompt_ids)
    parts: list[str] = []
    while True:
        item = await job.next()
        if isinstance(item, JobEnd):
            break
        parts.append(detokenizer.push(item.token_id))
    if item.status != 200:
        return _failed(service, job, item)
    if job.cancelled and item.finish_reason == "abort":
        _log(service, job, CLIENT_GONE)
        return Response(status_code=CLIENT_GONE)
    request = job.request
    body = completion_body(
        job.id,
        service.info.name,
        int(time.time()),
        "".join(parts) + detokenizer.flush(),
        list(job.token_ids) if request.token_ids else None,
        item.finish_reason,
        len(request.prompt_ids),
        len(job.token_ids),
    )
    _log(service, job, 200)
    return JSONResponse(body)


class _EventStream(StreamingResponse):
    """Server-sent events, one chunk per token, the finish reason, optionally the usage, [DONE].
    However the response ends (done, client gone, cancelled at shutdown) the job is stopped and the
    request logged once."""

    def __init__(self, service: Service, job: Job, first: JobToken | JobEnd) -> None:
        self.service, self.job, self.first = service, job, first
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
            self.job.cancel()
            if self.status == CLIENT_GONE and self.sent >= self.job.request.max_tokens:
                # gone before [DONE] but after every token it asked for: it was served
                _log(self.service, self.job, 200, stream=True, finish="length")
            else:
                _log(self.service, self.job, self.status, stream=True)

    async def _events(self):
        """One write per turn of the event loop: the tokens already delivered go out together, and so do
        the closing events. asyncio learns that a client hung up from a failed send, in a callback of a
        later turn; every write before that callback runs goes to the dead socket, and from the fifth on
        each logs "socket.send() raised exception." (a fast engine's backlog was hundreds). After one
        turn, uvicorn knows the client is gone: the stream is cancelled and its job with it."""
        job, service = self.job, self.service
        request, name, created = job.request, service.info.name, int(time.time())
        detokenizer = IncrementalDetokenizer(request.prompt_ids)
        item = self.first
        while isinstance(item, JobToken):
            tokens = [item]
            while isinstance(item := job.next_ready(), JobToken):
                tokens.append(item)
            yield "".join(self._token_event(token, detokenizer, created) for token in tokens)
            self.sent += len(tokens)  # resumed: the chunk went out
            if item is None:
                item = await job.next()
        if item.status != 200:  # the status line went out with the first token: the error goes in the stream
            self.status = item.status
            yield _event(error_body(item.error, item.status, kind="server_error")) + "data: [DONE]\n\n"
            return
        if job.cancelled and item.finish_reason == "abort":
            return  # nobody is listening
        finish = _event(
            chunk_body(
                job.id, name, created, detokenizer.flush(), [] if request.token_ids else None, item.finish_reason
            )
        )
        if request.include_usage:
            finish += _event(
                {
                    "id": job.id,
                    "object": "text_completion",
                    "created": created,
                    "model": name,
                    "choices": [],
                    "usage": usage(len(request.prompt_ids), len(job.token_ids)),
                }
            )
        yield finish + "data: [DONE]\n\n"
        self.status = 200

    def _token_event(self, token: JobToken, detokenizer: IncrementalDetokenizer, created: int) -> str:
        job = self.job
        ids = [token.token_id] if job.request.token_ids else None
        return _event(chunk_body(job.id, self.service.info.name, created, detokenizer.push(token.token_id), ids, None))


def _event(body: dict) -> str:
    return f"data: {json.dumps(body, separators=(',', ':'))}\n\n"


def _refuse(service: Service, exc: RequestError, arrived: int, headers: dict | None = None) -> Response:
    service.record(
        RequestLogEntry(stamp(), exc.status, "-", 0, None, (time.perf_counter_ns() - arrived) / 1e6, error=exc.message)
    )
    if exc.status == 408:  # the rest of the body may still come: not on this connection
        headers = {**(headers or {}), "Connection": "close"}
    return JSONResponse(exc.body(), exc.status, headers=headers)


def _failed(service: Service, job: Job, end: JobEnd) -> Response:
    _log(service, job, end.status, stream=job.request.stream, error=end.error)
    headers = {"Retry-After": "5"} if end.status == 503 else None
    kind = "service_unavailable" if end.status == 503 else "server_error"
    return JSONResponse(error_body(end.error, end.status, kind=kind), end.status, headers=headers)


def _log(service: Service, job: Job, status: int, stream: bool = False, error: str = "", finish: str = "") -> None:
    end = job.end
    ttft = (job.token_ns[0] - job.arrived_ns) / 1e6 if job.token_ns else None
    service.record(
        RequestLogEntry(
            stamp(),
            status,
            job.id,
            len(job.token_ids),
            ttft,
            (time.perf_counter_ns() - job.arrived_ns) / 1e6,
            stream,
            finish or (end.finish_reason if end is not None else "abort"),
            error or (end.error if end else ""),
        )
    )
