"""No request makes `serve` answer 5xx, and none holds a worker or a connection for good.

hypothesis sends any JSON value as the body or as any one field, and any Unicode string (NULs and
unpaired surrogates included) as a prompt or a stop string: every answer is a 2xx or a 4xx, and the
server keeps serving. Oversized bodies and heads, and a client that sends its head slowly, get a 4xx
or are closed after the timeouts the server sets. The null engine (no compute) serves: what is
checked is the HTTP side, and it keeps each example quick."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.serve_helpers import HOST, complete, request, served

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from whistle_stop.backends.serve.app import MAX_BODY_BYTES  # noqa: E402
from whistle_stop.backends.serve.http_limits import MAX_HEAD_BYTES  # noqa: E402
from whistle_stop.backends.serve.protocol import KNOWN_FIELDS  # noqa: E402

HEAD_TIMEOUT_S = 1.0
FIELDS = [*sorted(KNOWN_FIELDS), "suffix", "logit_bias"]  # and two fields the server refuses
# Every code point, surrogates (category Cs) and NUL included: JSON carries them as \ud800 escapes.
# Surrogates are 2,048 of 1.1 million code points: the edge cases are drawn as often as all the rest.
EDGES = st.sampled_from(["\x00", "\ud800", "\udbff", "\udc00", "\udfff", "\ufffd", "\n", "\U0001f600", "."])
# (st.text leaves surrogates out whatever its alphabet: the characters are joined here instead)
ANY_TEXT = st.lists(st.one_of(st.characters(exclude_categories=()), EDGES), max_size=12).map("".join)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=8,
)
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def server(tiny_model):
    with served("null", tiny_model, head_timeout_s=HEAD_TIMEOUT_S) as served_server:
        yield served_server


def _post(port: int, body: object) -> int:
    raw = json.dumps(body).encode()  # ensure_ascii: a lone surrogate goes as its \u escape
    status, _, answer = request(port, "POST", "/v1/completions", raw=raw, timeout_s=60)
    assert status < 500, (body, answer)
    if status == 200 and isinstance(answer, str):  # a stream: its status went first, an error would come in it
        assert answer.endswith("data: [DONE]\n\n") and '"code":500' not in answer, (body, answer[-300:])
    return status


def _still_serving(port: int) -> None:
    status, _, answer = complete(port, {"prompt": "hi", "max_tokens": 2})
    assert status == 200, answer


@FUZZ
@given(body=JSON)
def test_any_json_body(server, body):
    assert 200 <= _post(server.port, body) < 500


@FUZZ
@given(field=st.sampled_from(FIELDS), value=JSON, stream=st.booleans())
def test_any_json_value_in_any_field(server, field, value, stream):
    assert 200 <= _post(server.port, {"prompt": "hi", "max_tokens": 2, "stream": stream, field: value}) < 500


@FUZZ
@given(prompt=ANY_TEXT, stop=st.lists(ANY_TEXT, max_size=5), stream=st.booleans())
def test_any_unicode_prompt_and_stop(server, prompt, stop, stream):
    status = _post(server.port, {"prompt": prompt, "stop": stop, "max_tokens": 3, "stream": stream, "logprobs": 1})
    encodable = all(not (0xD800 <= ord(c) <= 0xDFFF) for c in prompt + "".join(stop))
    if prompt and encodable and len(stop) <= 4:
        assert status == 200


def test_the_surrogate_prompt_is_a_400_not_a_500(server):
    """The class of valid JSON prompts that was a 500: an unpaired surrogate cannot be tokenised."""
    status, _, answer = request(server.port, "POST", "/v1/completions", raw=b'{"prompt": "a\\ud800b"}')
    assert status == 400 and "not valid Unicode" in answer["error"]["message"]
    _still_serving(server.port)


def _raw(port: int, data: bytes, read_timeout_s: float = 30.0) -> bytes:
    """What the server answers to `data`; b"reset" when it closed the connection before reading all of it
    (its answer, sent first, is lost with the reset: the refusal did not wait for the rest)."""
    with socket.create_connection((HOST, port), timeout=read_timeout_s) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the whole of it was read: its answer, if any, may still be readable
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            return received or b"reset"
        return received


def test_oversized_bodies_are_413(server):
    """Refused before they are read (a declared length over the limit), or read no further than the limit
    (chunked): a 413, or, where the client was still sending, the connection closed under it."""
    big = json.dumps({"prompt": "x" * (MAX_BODY_BYTES + 10)}).encode()
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    answer = _raw(server.port, head + b"Content-Length: %d\r\n\r\n" % len(big) + big)
    assert answer.startswith(b"HTTP/1.1 413") or answer == b"reset", answer[:100]
    assert b"connection: close" in answer.lower() or answer == b"reset"
    chunk = b"x" * 65536
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(MAX_BODY_BYTES // len(chunk) + 2))
    answer = _raw(server.port, head + b"Transfer-Encoding: chunked\r\n\r\n" + body + b"0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 413") or answer == b"reset", answer[:100]
    assert sum(" 413 " in line for line in server.lines) >= 2  # both refused, and logged
    _still_serving(server.port)


def test_an_oversized_head_is_a_4xx(server):
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (MAX_HEAD_BYTES + 10) + b"\r\n\r\n"
    answer = _raw(server.port, head)
    assert answer[:12] in (b"HTTP/1.1 400", b"HTTP/1.1 431") or answer == b"reset", answer[:100]
    _still_serving(server.port)


def test_a_client_that_sends_its_head_slowly_is_closed_after_the_timeout(server):
    started = time.monotonic()
    with socket.create_connection((HOST, server.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        received = b""
        for _ in range(4):  # a byte now and then: each arrives well within the timeout, the head never ends
            time.sleep(HEAD_TIMEOUT_S / 4)  # the slow client under test, not a wait for the server
            try:
                sock.sendall(b"X")
            except OSError:
                break
        try:
            while chunk := sock.recv(4096):
                received += chunk
        except ConnectionResetError:
            pass
    elapsed = time.monotonic() - started
    assert received.startswith(b"HTTP/1.1 408") or received == b"", received[:100]
    assert elapsed < HEAD_TIMEOUT_S + 10  # closed by the server, not by this client's 30 s timeout
    _still_serving(server.port)


def test_a_silent_connection_holds_no_worker(server):
    """Connections that send nothing, beside a request: the request is served at once."""
    sockets = [socket.create_connection((HOST, server.port)) for _ in range(8)]
    try:
        _still_serving(server.port)
    finally:
        for sock in sockets:
            sock.close()
    status, _, health = request(server.port, "GET", "/health")
    assert status == 200 and not any(w["busy"] for w in health["workers"])
