"""`whistle-stop serve` in this process (uvicorn on a thread; every engine in its spawned worker): the
API, bad input (a clear 4xx each, and the server goes on), the API key, a client that goes away, a full
queue, a crashing engine, and `bench` through the `remote` engine against it (same greedy tokens as the
engine itself, and load rounds)."""

from __future__ import annotations

import csv
import http.client
import json
import logging
import socket
import struct
import threading
import time
from dataclasses import replace

import psutil
import pytest

from tests import fake_engines
from tests.conftest import wait_for
from tests.serve_helpers import GREEDY, HOST, complete, request, served, stream_events, wait_healthy
from whistle_stop.backends import server_metrics
from whistle_stop.backends.cli.main import main
from whistle_stop.backends.engines.remote_engine import FRESH_NOTE
from whistle_stop.backends.engines.remote_options import RemoteOptions
from whistle_stop.backends.runs.bench import BenchConfig, BenchSession
from whistle_stop.backends.sampling import SamplingParams
from whistle_stop.backends.serve import app as app_module
from whistle_stop.backends.serve.app import CLIENT_GONE
from whistle_stop.backends.serve.jobs import Job
from whistle_stop.backends.serve.request_log import parse as parse_log
from whistle_stop.backends.sources.tokenizer import decode

KEY = "sk-test-0123456789"


@pytest.fixture(scope="module")
def null_server(tiny_model):
    with served("null", tiny_model) as server:
        yield server


def test_completion_streamed_and_not(null_server):
    port = null_server.port
    status, _, body = complete(port, {"prompt": "Hello", "max_tokens": 5, "temperature": 0, "return_token_ids": True})
    assert status == 200, body
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length" and len(choice["token_ids"]) == 5
    assert choice["text"] == decode(choice["token_ids"])
    assert body["usage"] == {"prompt_tokens": 1, "completion_tokens": 5, "total_tokens": 6}
    status, events = stream_events(
        port,
        {
            "prompt": [15496, 11],
            "max_tokens": 4,
            "temperature": 0,
            "return_token_ids": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert status == 200 and events[-1] == "[DONE]"
    tokens = [e["choices"][0]["token_ids"][0] for e in events[:-1] if e["choices"] and e["choices"][0]["token_ids"]]
    assert tokens == choice["token_ids"][:4]  # the null engine's logits do not depend on the prompt
    assert events[-3]["choices"][0]["finish_reason"] == "length" and events[-2]["usage"]["completion_tokens"] == 4
    status, _, models = request(port, "GET", "/v1/models")
    assert (
        status == 200 and models["data"][0]["id"] == "random:tiny" and models["data"][0]["owned_by"] == "whistle-stop"
    )
    status, _, health = request(port, "GET", "/health")
    assert status == 200 and health["status"] == "ok"
    logged = [parse_log(line) for line in null_server.lines if parse_log(line)]
    assert [(e.status, e.tokens, e.stream) for e in logged[-2:]] == [(200, 5, False), (200, 4, True)]
    assert all(e.ttft_ms is not None and e.ttft_ms > 0 for e in logged[-2:])


@pytest.mark.parametrize(
    "body, status, message",
    [
        (b"{not json", 400, "malformed JSON"),
        (b"", 400, "body is empty"),
        (b"[1, 2]", 400, "must be a JSON object"),
        (b"[" * 100_000 + b"]" * 100_000, 400, "nested too deeply"),  # json.loads' RecursionError: had been a 500
        ({"prompt": "hi", "max_tokens": 4, "tempreature": 0.5}, 400, "unknown field(s): tempreature"),
        ({"prompt": "hi " * 1000, "max_tokens": 100}, 400, "maximum context length is 1024"),
        ({"prompt": list(range(1020)), "max_tokens": 10}, 400, "1030 (1020 in the prompt, 10 in the completion)"),
        ({"prompt": "hi", "max_tokens": 0}, 400, "max_tokens must be >= 1 (0 only with echo)"),
        ({"prompt": "hi", "max_tokens": -3}, 400, "max_tokens must be >= 1"),
        ({"prompt": "hi", "max_tokens": "ten"}, 400, "max_tokens must be a whole number"),
        ({"prompt": "hi", "temperature": -0.5}, 400, "temperature must be >= 0"),
        ({"prompt": "hi", "top_p": 0}, 400, "top_p must be in (0, 1]"),
        ({"prompt": "hi", "top_p": 1.5}, 400, "top_p must be in (0, 1]"),
        ({"prompt": "hi", "top_k": -1}, 400, "top_k must be >= 0"),
        ({"prompt": "hi", "seed": -1}, 400, "seed must be >= 0"),
        ({"prompt": "", "max_tokens": 2}, 400, "the prompt is empty"),
        ({"max_tokens": 2}, 400, "the prompt is missing"),
        ({"prompt": [1, 99999]}, 400, "token id 99999 is outside the vocabulary"),
        ({"prompt": ["a", 1]}, 400, "a list of prompts must hold only texts"),
        ({"prompt": "hi", "n": 0}, 400, "n must be from 1 to best_of"),
        ({"prompt": "hi", "stop": ["\n"] * 5}, 400, "stop takes at most 4 strings"),
        ({"prompt": "a\ud800"}, 400, "prompt is not valid Unicode"),
        ({"prompt": "hi", "stream": "yes"}, 400, "stream must be true or false"),
        ({"prompt": "hi", "model": "gpt-4"}, 404, "the model 'gpt-4' does not exist"),
    ],
)
def test_bad_input_is_a_clear_4xx_and_the_server_goes_on(null_server, body, status, message):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    got, _, answer = request(null_server.port, "POST", "/v1/completions", raw=raw)
    assert got == status, answer
    assert message in answer["error"]["message"] and answer["error"]["code"] == status
    assert complete(null_server.port, {"prompt": "hi", "max_tokens": 2})[0] == 200  # still serving
    assert parse_log(null_server.lines[-2]).status == status  # logged too


def test_wrong_routes_and_methods_answer_json(null_server):
    """Each says what to call instead: a client's author reads the message, not Starlette's 'Not Found'."""
    status, headers, body = request(null_server.port, "GET", "/v1/completions")
    assert status == 405 and body["error"]["code"] == 405
    assert body["error"]["message"].startswith("GET is not allowed on /v1/completions; this server answers POST")
    assert "POST" in headers.get("allow", headers.get("Allow", ""))
    status, _, body = request(null_server.port, "GET", "/v2/nothing")
    assert status == 404 and body["error"]["code"] == 404
    assert body["error"]["message"].startswith("no route GET /v2/nothing; this server answers POST /v1/completions")
    status, _, body = request(null_server.port, "POST", "/v1/chat/completions")
    assert status == 404 and "GPT-2 has no chat template" in body["error"]["message"]


def test_the_api_key_is_required_and_never_logged(tiny_model):
    with served("null", tiny_model, api_key=KEY) as server:
        port = server.port
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
            status, _, body = complete(port, {"prompt": "hi", "max_tokens": 2}, headers)
            assert status == 401 and "API key" in body["error"]["message"]
        assert request(port, "GET", "/v1/models")[0] == 401
        good = {"Authorization": f"Bearer {KEY}"}
        assert complete(port, {"prompt": "hi", "max_tokens": 2}, good)[0] == 200
        assert stream_events(port, {"prompt": "hi", "max_tokens": 2}, good)[0] == 200
        assert request(port, "GET", "/health")[0] == 200 and request(port, "GET", "/metrics")[0] == 200
        assert not any(KEY in line for line in server.lines)


def _slow_spec(name: str = "slow", decode_s: float = 0.05, **kwargs):
    return fake_engines.spec(name, decode_s=decode_s, **kwargs)


def _stream_request(port: int, max_tokens: int) -> socket.socket:
    """A raw socket that has sent one streamed greedy completion request (the test reads and hangs up)."""
    sock = socket.create_connection((HOST, port))
    body = json.dumps({"prompt": "hi", "max_tokens": max_tokens, "stream": True, **GREEDY}).encode()
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    return sock


def test_a_client_that_goes_away_cancels_its_generation(tiny_model):
    with served(_slow_spec(), tiny_model) as server:
        sock = _stream_request(server.port, 1000)
        received = b""
        while b"data:" not in received:
            received += sock.recv(4096)
        sock.close()  # gone after the first token; 1000 tokens would take 50 s
        began = time.monotonic()
        status, _, answer = complete(server.port, {"prompt": "hi", "max_tokens": 3})
        assert status == 200 and time.monotonic() - began < 5, answer
        logged = [parse_log(line) for line in server.lines if parse_log(line)]
        assert logged[0].status == 499 and logged[0].finish == "abort" and logged[0].tokens < 100
        text = request(server.port, "GET", "/metrics")[2]
        assert 'finished_reason="abort"} 1' in text


def _send_partial(port: int, body: bytes, declared: int) -> socket.socket:
    """A POST whose Content-Length says `declared` bytes, with only `body` sent."""
    sock = socket.create_connection((HOST, port))
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(declared).encode() + b"\r\n\r\n" + body
    )
    return sock


def _logged(server) -> list:
    return [parse_log(line) for line in server.lines if parse_log(line)]


class _Records(logging.Handler):
    """uvicorn's error log (where an unhandled exception's traceback goes), kept for a test. Added once
    the server runs: uvicorn's config replaces its loggers' handlers."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_body_that_never_completes_is_a_408(null_server, monkeypatch):
    monkeypatch.setattr(app_module, "BODY_TIMEOUT_S", 0.5)
    before = len(_logged(null_server))
    sock = _send_partial(null_server.port, b'{"prompt": "hi"', 100)
    sock.settimeout(10)
    answer = b""
    try:
        while chunk := sock.recv(4096):  # the server answers, then closes: the rest may still come
            answer += chunk
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within 0.5 s" in answer, answer
    assert [e.status for e in _logged(null_server)[before:]] == [408]
    assert complete(null_server.port, {"prompt": "hi", "max_tokens": 2})[0] == 200  # still serving


def test_a_client_gone_mid_body_is_logged_without_a_traceback(null_server):
    errors = _Records()
    logging.getLogger("uvicorn.error").addHandler(errors)
    try:
        before = len(_logged(null_server))
        _send_partial(null_server.port, b'{"prompt": "hi"', 100).close()
        wait_for(lambda: len(_logged(null_server)) > before, timeout_s=10)
        gone = _logged(null_server)[before]
        assert gone.status == 499 and "went away before its request body was complete" in gone.error
        assert complete(null_server.port, {"prompt": "hi", "max_tokens": 2})[0] == 200
    finally:
        logging.getLogger("uvicorn.error").removeHandler(errors)
    assert errors.records == []  # ClientDisconnect had been an unhandled exception, its traceback logged


def test_a_client_that_read_every_token_and_left_before_done_was_served(tiny_model, monkeypatch):
    """The worker's end comes just after its last token; a client that has its max_tokens tokens may
    close before the finish chunk and [DONE]. It was served: 200/length in the log, not 499/abort."""
    finish = Job.finish

    def late_finish(job, end=None):  # the worker's end arrives once the server has seen the client go
        deadline = time.monotonic() + 10
        while not job.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        return finish(job, end)

    monkeypatch.setattr(Job, "finish", late_finish)
    with served(_slow_spec(decode_s=0.01), tiny_model) as server:
        sock = _stream_request(server.port, 3)
        received = b""
        while received.count(b"data:") < 3:
            received += sock.recv(4096)
        assert b"[DONE]" not in received and b'"finish_reason":"length"' not in received
        sock.close()
        wait_for(lambda: _logged(server), timeout_s=10)
        entry = _logged(server)[0]
        assert (entry.status, entry.finish, entry.tokens) == (200, "length", 3), entry


class BurstEngine(fake_engines.ScriptedEngine):
    """Its first 300 tokens at once (a backlog for the server to send), then one every 50 ms."""

    def decode(self, token_id):
        return self._step(0.0 if self._position < 300 else 0.05)


def test_a_client_that_hangs_up_mid_stream_is_quiet_and_stops_its_generation(tiny_model, caplog, capfd):
    """A client reset while a fast engine's tokens piled up: each went on to the dead socket, and asyncio
    logged "socket.send() raised exception." on stderr for every one from the fifth on. Now one line in the
    request log (499, abort), nothing on stderr, the engine's run stopped, and the next request is served."""
    spec = replace(fake_engines.spec("bursty"), target="tests.test_serve:BurstEngine")
    errors = _Records()
    with served(spec, tiny_model) as server:
        logging.getLogger("uvicorn.error").addHandler(errors)
        try:
            for _ in range(3):
                before = len(_logged(server))
                sock = _stream_request(server.port, 1000)
                received = b""
                while b"data:" not in received:
                    received += sock.recv(4096)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()  # a reset (a client killed with unread data): its next send fails at once
                wait_for(lambda: len(_logged(server)) > before, timeout_s=10)  # noqa: B023 - waited on here
                gone = _logged(server)[before:]
                assert [(e.status, e.finish) for e in gone] == [(CLIENT_GONE, "abort")] and gone[0].tokens < 400
                began = time.monotonic()  # the other 600 tokens would take 30 s
                assert complete(server.port, {"prompt": "hi", "max_tokens": 3, **GREEDY})[0] == 200
                assert time.monotonic() - began < 5
        finally:
            logging.getLogger("uvicorn.error").removeHandler(errors)
    assert errors.records == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    err = capfd.readouterr().err
    assert "socket.send() raised exception" not in err and "Traceback" not in err, err


def test_a_shutdown_while_the_engine_loads_ends_the_load_at_once(tiny_model):
    """A load is not a request to let finish: the loading worker is closed at once (it waited out the
    requests' grace, 10 s, then had its pipe closed under the read: an AttributeError, swallowed)."""
    with served(fake_engines.spec("loady", load_s=60), tiny_model, wait=False) as server:
        slot = server.service.pool.slots[0]
        wait_for(lambda: slot._starting is not None and slot._starting.pid is not None)
        pid = slot._starting.pid
        began = time.monotonic()
    assert time.monotonic() - began < 4
    assert not slot.thread.is_alive() and not psutil.pid_exists(pid)
    assert slot.worker is None and slot._starting is None
    assert not [line for line in server.lines if "internal error" in line or "restart" in line], server.lines


def test_a_full_queue_answers_503_with_retry_after(tiny_model):
    with served(_slow_spec(decode_s=0.02), tiny_model, queue=1) as server:
        pool = server.service.pool
        results: list[int] = []

        def one() -> None:
            results.append(complete(server.port, {"prompt": "hi", "max_tokens": 100, **GREEDY})[0])

        threads = [threading.Thread(target=one) for _ in range(2)]  # one runs, one waits
        threads[0].start()
        wait_for(lambda: pool.running == 1)
        threads[1].start()
        wait_for(lambda: pool.scheduler.waiting == 1)
        status, headers, body = complete(server.port, {"prompt": "hi", "max_tokens": 2})
        assert status == 503 and int(headers["retry-after"]) >= 1, body
        assert "queue is full" in body["error"]["message"]
        for thread in threads:
            thread.join(30)
        assert results == [200, 200]  # nothing lost
        assert complete(server.port, {"prompt": "hi", "max_tokens": 2})[0] == 200
        assert 'reason="queue_full"} 1' in request(server.port, "GET", "/metrics")[2]


def test_a_worker_that_keeps_dying_waits_longer_each_time():
    from whistle_stop.backends.serve.pool import restart_delay

    assert [restart_delay(n) for n in range(9)] == [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


@pytest.mark.parametrize("how", ["crash_at", "segfault_at"])
def test_a_crashing_worker_gives_500_then_a_fresh_worker(tiny_model, how):
    with served(fake_engines.spec("crashy", **{how: 3}), tiny_model) as server:
        port = server.port
        assert complete(port, {"prompt": "hi", "max_tokens": 2, **GREEDY})[0] == 200  # crashes only at its 4th token
        status, _, body = complete(port, {"prompt": "hi", "max_tokens": 8, **GREEDY})
        assert status == 500 and "worker was lost" in body["error"]["message"], (body, server.lines)
        status, _, health = request(port, "GET", "/health")
        assert status == 503 and health["status"] == "restarting" and "crashed" in health["reason"], health
        wait_healthy(port, 30)
        status, _, body = complete(port, {"prompt": "hi", "max_tokens": 2, **GREEDY})
        assert status == 200, body
        # crashes after streaming began
        status, events = stream_events(port, {"prompt": "hi", "max_tokens": 8, **GREEDY})
        assert status == 200 and "error" in events[-2] and events[-1] == "[DONE]"
        wait_healthy(port, 30)
        metrics = request(port, "GET", "/metrics")[2]
        assert (
            "whistle_stop:worker_restarts_total" in metrics and 'restarts_total{model_name="random:tiny"} 2' in metrics
        )


def test_metrics_are_readable_by_the_server_metrics_reader(null_server):
    complete(null_server.port, {"prompt": "hi", "max_tokens": 6})
    text = request(null_server.port, "GET", "/metrics")[2]
    parsed = server_metrics.parse(text)
    assert parsed.ttft is not None and parsed.ttft.count >= 1 and parsed.itl.count >= 5
    found = server_metrics.samples(text)
    ttft = server_metrics.histogram(found, server_metrics.TTFT_METRICS[0])
    assert ttft.count == parsed.ttft.count and ttft.buckets[-1][1] == ttft.count
    assert 0 < ttft.quantile(0.5) < 1
    assert server_metrics.value(found, server_metrics.WAITING_METRIC) == 0


def test_greedy_tokens_through_the_server_equal_the_engines_own(tiny_model):
    with served("numpy", tiny_model) as server:
        config = BenchConfig(
            model="random:tiny",
            backends=("numpy", "remote"),
            prompt_tokens=12,
            new_tokens=10,
            repeats=1,
            warmup=0,
            threads=1,
            engine_options={"remote": RemoteOptions(url=f"{server.url}/v1")},
        )
        result = BenchSession(config).run()
    by_engine = {r.backend: r for r in result.runs}
    assert all(r.status == "ok" for r in result.runs), [r.error for r in result.runs]
    tokens = {name: [t.token_id for t in result.tokens if t.run_id == r.run_id] for name, r in by_engine.items()}
    assert len(tokens["numpy"]) == 10 and tokens["remote"] == tokens["numpy"]
    assert FRESH_NOTE in by_engine["remote"].notes  # the prompt went unchanged: no prefix to defeat
    assert server_metrics.CROSS_CHECK_PREFIX in by_engine["remote"].notes


def test_sampled_tokens_through_the_server_equal_the_engines_own(tiny_model):
    """The same shared sampler, the same seed: the same tokens as the engine driven directly."""
    from tests.conftest import engine_tokens

    ids, sampling = list(range(300, 312)), SamplingParams("sample", 0.8, 40, 0.95, 7)
    with served("numpy", tiny_model) as server:
        status, _, body = complete(
            server.port,
            {
                "prompt": ids,
                "max_tokens": 8,
                "temperature": 0.8,
                "top_k": 40,
                "top_p": 0.95,
                "seed": 7,
                "ignore_eos": True,
                "return_token_ids": True,
            },
        )
    assert status == 200, body
    assert body["choices"][0]["token_ids"] == engine_tokens("numpy", tiny_model, ids, 8, sampling)


def test_bench_remote_with_load_rounds_against_the_server(tiny_model, tmp_path, capsys):
    with served("numpy", tiny_model) as server:
        code = main(
            [
                "bench",
                "--model",
                "random:tiny",
                "--backends",
                "remote",
                "--remote-url",
                f"{server.url}/v1",
                "--concurrency",
                "1,2,4,8",
                "--new-tokens",
                "4",
                "--prompt-tokens",
                "8",
                "--repeats",
                "1",
                "--warmup",
                "0",
                "--threads",
                "1",
                "--no-harness-calibration",
                "--out",
                str(tmp_path),
            ]
        )
    out = capsys.readouterr()
    assert code == 0, out.err
    with (tmp_path / "load.csv").open() as f:
        rows = list(csv.DictReader(f))
    levels = {int(r["concurrency"]): r for r in rows if r["backend"] == "remote"}
    assert sorted(levels) == [1, 2, 4, 8]
    assert all(int(r["failed"]) == 0 and int(r["requests"]) == c for c, r in levels.items())


def test_a_scripted_engine_failure_is_a_500_and_the_worker_stays(tiny_model):
    with served(fake_engines.spec("failing", fail_at=2), tiny_model) as server:
        status, _, body = complete(server.port, {"prompt": "hi", "max_tokens": 5, **GREEDY})
        assert status == 500 and "scripted failure" in body["error"]["message"], (body, server.lines)
        assert complete(server.port, {"prompt": "hi", "max_tokens": 2})[0] == 200
        assert request(server.port, "GET", "/health")[0] == 200


def test_health_says_loading_until_the_engine_is_ready(tiny_model):
    with served(fake_engines.spec("loady", load_s=1.5), tiny_model, wait=False) as server:
        status, _, body = request(server.port, "GET", "/health")
        assert status == 503 and body["status"] == "loading"
        wait_healthy(server.port, 30)


def test_two_workers_serve_two_streams_at_once(tiny_model):
    with served(_slow_spec(decode_s=0.05), tiny_model, workers=2) as server:
        statuses: list[int] = []
        threads = [
            threading.Thread(
                target=lambda: statuses.append(complete(server.port, {"prompt": "hi", "max_tokens": 20, **GREEDY})[0])
            )
            for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        found = server_metrics.samples(request(server.port, "GET", "/metrics")[2])
    queued = server_metrics.histogram(found, server_metrics.QUEUE_TIME_METRIC)
    assert statuses == [200, 200] and queued.count == 2
    assert queued.total_s < 0.5  # side by side: neither waited for the other's second of decoding


def test_http_keep_alive_connections_are_served(null_server):
    conn = http.client.HTTPConnection(HOST, null_server.port, timeout=30)
    for _ in range(3):
        conn.request(
            "POST",
            "/v1/completions",
            body=json.dumps({"prompt": "hi", "max_tokens": 2}),
            headers={"Content-Type": "application/json"},
        )
        response = conn.getresponse()
        assert response.status == 200 and json.loads(response.read())["usage"]["completion_tokens"] == 2
    conn.close()


def test_the_streaming_machinery_loads_at_startup_not_after_the_first_token():
    """anyio imports its backend at the first task group, a streamed answer's: the first request after a start
    sent its first byte ~55 ms after its first token (its TTFT in the server's log was 11 ms, the client's 66)."""
    import subprocess
    import sys

    code = (
        "import asyncio, sys\n"
        "from whistle_stop.backends.serve.app import create_app\n"
        "class Service:\n"
        "    def start(self): pass\n"
        "    def close(self): pass\n"
        "app = create_app(Service())\n"
        "assert 'anyio._backends._asyncio' not in sys.modules\n"
        "async def started():\n"
        "    async with app.router.lifespan_context(app):\n"
        "        assert 'anyio._backends._asyncio' in sys.modules\n"
        "asyncio.run(started())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_an_engine_that_generates_in_its_own_loop_refuses_logprobs_but_serves_the_rest(tiny_model):
    """Its tokens come without logits: logprobs and best_of > n are a 400, before a worker has loaded too;
    stop, echo, n and prompt lists need none."""
    with served(fake_engines.own_loop_spec(), tiny_model, wait=False) as server:
        early = complete(server.port, {"prompt": "hi", "max_tokens": 2, "logprobs": 1, **GREEDY})  # queued or refused
        wait_healthy(server.port)
        for body in ({"logprobs": 0}, {"n": 1, "best_of": 2, "temperature": 1}):
            status, _, answer = complete(server.port, {"prompt": "hi", "max_tokens": 2, **GREEDY, **body})
            assert status == 400 and "generates in its own loop" in answer["error"]["message"], answer
        status, _, answer = complete(
            server.port, {"prompt": ["hi", "yo"], "max_tokens": 3, "n": 2, "echo": True, "stop": ["zz"], **GREEDY}
        )
        assert status == 200 and len(answer["choices"]) == 4 and answer["choices"][0]["text"].startswith("hi")
    assert early[0] == 400 and "generates in its own loop" in early[2]["error"]["message"]
