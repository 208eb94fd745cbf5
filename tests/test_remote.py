"""The `remote` engine against servers on 127.0.0.1: fake ones for every failure, and a real one.

All traffic stays on 127.0.0.1; every wait is bounded by a condition with a timeout. `remote` is a
core engine: only the test of a real llama.cpp server needs the [peers] extra (marked `peers`).
"""

from __future__ import annotations

import importlib.util
import json
import socket
import threading
import time
import urllib.request
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.engine_process import in_child
from whistle_stop.backends.engine import EngineOptions
from whistle_stop.backends.engines.remote_options import RemoteOptions
from whistle_stop.backends.sampling import Sampler, SamplingParams

SECRET = "sk-whistle-test-0123456789abcdef"
KEY_ENV = "WHISTLE_STOP_TEST_REMOTE_KEY"


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models") and self.server.owner:
            self._json(200, {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": self.server.owner}]})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def _prefix_cached(self, body: dict) -> bool:
        """A prefix-caching server: a prompt whose first tokens (and salt, on vLLM) were seen before
        is served from the cache: its prefill is skipped, so its TTFT is one decode step."""
        prompt = body.get("prompt")
        head = tuple(prompt[:8]) if isinstance(prompt, list) else str(prompt)[:32]
        salt = body.get("cache_salt") if self.server.owner == "vllm" else None
        key = (head, salt)
        hit = key in self.server.cache
        self.server.cache.add(key)
        self.server.hits.append(hit)
        return hit

    def do_POST(self) -> None:
        server = self.server
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        server.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        server.got_request.set()
        mode = server.mode
        if mode == "stall":
            server.release.wait(60)  # never answers while the test runs
            return
        if mode == "garbage_http":
            self.wfile.write(b"this is not HTTP at all\r\n\r\n")
            return
        if mode == "error401":
            self._json(401, {"error": {"message": f"invalid API key {(self.headers.get('Authorization') or '')[7:]}"}})
            return
        if mode == "reject_ext" and "ignore_eos" in body:
            self._json(400, {"error": {"message": "Unrecognized request argument supplied: ignore_eos"}})
            return
        if mode == "prefix_cache" and not self._prefix_cached(body):
            time.sleep(0.05)  # the prefill a cache hit skips (what the TTFT would show)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if mode == "garbage_sse":
            self.wfile.write(b"data: {this is not json\n\n")
            return
        if mode == "chunks":  # 4 tokens an event every 20 ms, as a speculating server streams them
            for start in range(0, body["max_tokens"], 4):
                time.sleep(0.02)
                ids = list(range(100 + start, 100 + min(start + 4, body["max_tokens"])))
                self._event({"choices": [{"index": 0, "text": " hi" * len(ids), "token_ids": ids}]})
            self.wfile.write(b"data: [DONE]\n\n")
            return
        for index in range(body["max_tokens"]):
            if mode == "cut" and index == 2:  # the connection drops: no finish_reason, no [DONE]
                self.close_connection = True
                return
            choice = {"index": 0, "text": " hello", "finish_reason": None}
            if mode != "text":
                choice["token_ids"] = [100 + index]
            self._event({"id": "x", "object": "text_completion", "choices": [choice]})
        self._event({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
        self.wfile.write(b"data: [DONE]\n\n")

    def _event(self, data: dict) -> None:
        self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()

    def _json(self, status: int, data: dict) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@contextmanager
def fake_server(mode: str = "ok", owner: str = "vllm"):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.mode, server.requests, server.owner = mode, [], owner
    server.cache, server.hits = set(), []
    server.got_request, server.release = threading.Event(), threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def remote(url: str, tiny_model, **settings):
    from whistle_stop.backends import registry

    engine = registry.create("remote", EngineOptions(threads=1, settings=RemoteOptions(url=url, model="m", **settings)))
    info = engine.load(tiny_model, lambda *a: None)
    return engine, info


def tokens_of(engine, ids, n, params=None, cancel=None):
    return list(engine.stream(ids, n, Sampler(params or SamplingParams()), cancel))


def test_streams_token_ids_and_asks_for_exactly_n(tiny_model, prompt_ids, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    with fake_server() as (server, url):
        engine, info = remote(url, tiny_model, api_key_env=KEY_ENV)
        assert tokens_of(engine, prompt_ids, 7) == list(range(100, 107))
    assert info.device == f"remote (127.0.0.1:{url.split(':')[2].split('/')[0]})"
    assert SECRET not in info.notes and SECRET not in engine.run_notes
    request = server.requests[0]
    assert request["path"] == "/v1/completions" and request["auth"] == f"Bearer {SECRET}"
    body = request["body"]
    assert body["prompt"] == list(prompt_ids) and body["max_tokens"] == 7 and body["stream"] is True
    assert body["ignore_eos"] is True and "min_tokens" not in body and body["temperature"] == 0


def _post(url: str, body: dict) -> None:
    request = urllib.request.Request(
        url + "/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def test_a_server_streaming_several_tokens_an_event_is_timed_per_decoded_token(tiny_model, prompt_ids):
    """An event's tokens share its arrival and its step: the run is a multi-token one, its ms/token the
    time per token after the first event's (~5 ms), never the ~0 gap inside an event."""
    from tests.run_records import run_record
    from whistle_stop.backends.results.records import fill_metrics
    from whistle_stop.backends.sources.tokenizer import IncrementalDetokenizer
    from whistle_stop.backends.worker.child import _relay
    from whistle_stop.backends.worker.events import RunRequest

    with fake_server("chunks") as (_, url):
        engine, _ = remote(url, tiny_model)
        request = RunRequest("r", tuple(prompt_ids), 16, SamplingParams())
        start = time.perf_counter_ns()
        tokens = list(
            _relay(engine, request, Sampler(request.sampling), IncrementalDetokenizer(), threading.Event(), start)
        )
    assert [t.step for t in tokens] == [i // 4 for i in range(16)]
    record = run_record("remote", new_tokens=16)
    fill_metrics(record, start, tokens, 0)
    assert record.multi_token_steps and record.decoded_tokens == 12
    assert 3.0 < record.ms_per_token < 15.0 and record.itl_p50_ms < 1.0  # the median gap is inside an event
    from whistle_stop.backends.results.summary import speculation_notes, summarize_backends

    (note,) = speculation_notes(summarize_backends([record]))
    assert note.startswith("remote: several tokens per step")


def test_fake_prefix_cache_serves_a_repeated_prompt_from_the_cache(prompt_ids):
    """The fake server does cache: the same prompt again is a hit (its TTFT would be one decode
    step), a prompt with another first token is not."""
    body = {"prompt": list(prompt_ids), "max_tokens": 2, "stream": True}
    with fake_server("prefix_cache", owner="") as (server, url):
        _post(url, body)
        _post(url, body)
        _post(url, {**body, "prompt": [7] + list(prompt_ids)[1:]})
    assert server.hits == [False, True, False]


@pytest.mark.parametrize("owner", ["vllm", "someone-else", ""])  # (llama.cpp: cache_prompt false, real test below)
def test_remote_runs_are_never_served_from_the_prefix_cache(tiny_model, prompt_ids, owner):
    with fake_server("prefix_cache", owner=owner) as (server, url):
        engine, _ = remote(url, tiny_model)
        for _ in range(4):  # a warm-up and three repeats of the same prompt
            assert tokens_of(engine, prompt_ids, 3) == [100, 101, 102]
    assert server.hits == [False] * 4
    bodies = [r["body"] for r in server.requests]
    assert all(len(b["prompt"]) == len(prompt_ids) for b in bodies)  # the measured prompt length is kept
    if owner == "vllm":  # the server's own salt: the prompt goes out as it is
        assert all(b["prompt"] == list(prompt_ids) for b in bodies)
        assert len({b["cache_salt"] for b in bodies}) == 4 and "cache_salt" in engine.run_notes
    else:  # no salt known: a random prefix, the rest of the prompt as it is
        assert all(b["prompt"][2:] == list(prompt_ids)[2:] and "cache_salt" not in b for b in bodies)
        assert len({tuple(b["prompt"][:2]) for b in bodies}) == 4
        assert "random per request" in engine.run_notes


def test_text_only_server_is_retokenised_and_noted(tiny_model, prompt_ids):
    from whistle_stop.backends.sources.tokenizer import encode

    with fake_server("text") as (_, url):
        engine, _ = remote(url, tiny_model)
        tokens = tokens_of(engine, prompt_ids, 4, SamplingParams("sample", 0.7, 0, 1.0, 5))
    assert tokens == encode(" hello") * 4
    assert "re-tokenised" in engine.run_notes and "seed 5" in engine.run_notes


def test_server_rejecting_extensions_gets_a_plain_request(tiny_model, prompt_ids):
    with fake_server("reject_ext") as (server, url):
        engine, _ = remote(url, tiny_model)
        assert tokens_of(engine, prompt_ids, 3) == [100, 101, 102]
    assert "ignore_eos" in server.requests[0]["body"] and "ignore_eos" not in server.requests[1]["body"]
    assert "may stop early" in engine.run_notes


def test_connection_refused_is_a_clear_error(tiny_model, prompt_ids):
    from whistle_stop.backends.engines.remote_stream import RemoteError

    engine, _ = remote(f"http://127.0.0.1:{free_port()}/v1", tiny_model)
    with pytest.raises(RemoteError, match="connection refused"):
        tokens_of(engine, prompt_ids, 3)


def test_stalled_server_times_out(tiny_model, prompt_ids):
    from whistle_stop.backends.engines.remote_stream import RemoteError

    with fake_server("stall") as (server, url):
        engine, _ = remote(url, tiny_model, timeout_s=0.5)
        with pytest.raises(RemoteError, match="read timeout"):
            tokens_of(engine, prompt_ids, 3)
        assert server.got_request.is_set()


def test_cancel_while_the_server_stalls_returns(tiny_model, prompt_ids):
    with fake_server("stall") as (server, url):
        engine, _ = remote(url, tiny_model, timeout_s=60)
        cancel = threading.Event()
        threading.Thread(target=lambda: server.got_request.wait(30) and cancel.set(), daemon=True).start()
        assert tokens_of(engine, prompt_ids, 3, cancel=cancel) == []
        assert cancel.is_set()


@pytest.mark.parametrize(
    "mode, message", [("garbage_sse", "malformed server-sent event"), ("garbage_http", "malformed HTTP response")]
)
def test_garbage_is_a_clear_error(tiny_model, prompt_ids, mode, message):
    from whistle_stop.backends.engines.remote_stream import RemoteError

    with fake_server(mode) as (_, url):
        engine, _ = remote(url, tiny_model)
        with pytest.raises(RemoteError, match=message):
            tokens_of(engine, prompt_ids, 3)


def test_http_error_carries_the_servers_message_without_the_key(tiny_model, prompt_ids, monkeypatch):
    from whistle_stop.backends.engines.remote_stream import RemoteError

    monkeypatch.setenv(KEY_ENV, SECRET)
    with fake_server("error401") as (_, url):
        engine, _ = remote(url, tiny_model, api_key_env=KEY_ENV)
        with pytest.raises(RemoteError) as caught:
            tokens_of(engine, prompt_ids, 3)
    assert "HTTP 401" in str(caught.value) and "invalid API key <redacted>" in str(caught.value)
    assert SECRET not in str(caught.value)


def _bench(url: str, out, new_tokens: int = 4):
    from whistle_stop.backends.results.export import write_results
    from whistle_stop.backends.runs.bench import BenchConfig, BenchSession

    config = BenchConfig(
        model="random:tiny",
        backends=("remote",),
        prompt_tokens=6,
        new_tokens=new_tokens,
        repeats=1,
        warmup=0,
        threads=1,
        engine_options={"remote": RemoteOptions(url=url, model="m", api_key_env=KEY_ENV)},
    )
    result = BenchSession(config).run()
    write_results(out, result.runs, result.tokens, result.environment)
    return result


def test_bench_records_never_contain_the_key(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    with fake_server() as (server, url):
        ok = _bench(url, tmp_path / "ok")
    with fake_server("error401") as (_, url):
        failed = _bench(url, tmp_path / "failed")
    down = _bench(f"http://127.0.0.1:{free_port()}/v1", tmp_path / "down")
    assert server.requests[0]["auth"] == f"Bearer {SECRET}"  # the key was used...
    assert [r.status for r in ok.runs] == ["ok"] and ok.runs[0].tokens_generated == 4
    assert ok.runs[0].device.startswith("remote (127.0.0.1:")
    assert failed.runs[0].status == "error" and "HTTP 401" in failed.runs[0].error
    assert down.runs[0].status == "error" and "connection refused" in down.runs[0].error
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"runs.csv", "tokens.csv", "environment.json"}
    for path in written:  # ...and appears in none of the files
        assert SECRET not in path.read_text(encoding="utf-8"), path


@contextmanager
def llama_cpp_server(gguf_path, tmp_path):
    """`python -m llama_cpp.server` on 127.0.0.1, waited for (bounded) and killed at the end."""
    import http.client
    import subprocess
    import sys
    import time

    port = free_port()
    log = (tmp_path / "server.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(gguf_path),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "1024",
            "--n_threads",
            "1",
            "--n_threads_batch",
            "1",
            "--type_k",
            "0",
            "--type_v",
            "0",
        ],  # an f32 KV cache, as our own f32 llama.cpp engine uses
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline, ready, pause = time.monotonic() + 180, False, threading.Event()
        while not ready and time.monotonic() < deadline and process.poll() is None:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/v1/models")
                ready = conn.getresponse().status == 200
                conn.close()
            except OSError:
                pause.wait(0.25)  # not listening yet: poll again, bounded by the deadline
        if not ready:
            pytest.fail(f"llama_cpp.server did not come up: {(tmp_path / 'server.log').read_text()[-2000:]}")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.kill()
        process.wait(30)
        log.close()


def _f32_gguf(model) -> Path:
    """Our f32 GGUF export of the model, for `in_child`: the llama.cpp engine's module loads libllama."""
    from whistle_stop.backends.engines.llamacpp.engine import GGUF_FILE, ensure_gguf

    return ensure_gguf(model, "f32", 1, lambda *a: None) / GGUF_FILE


@pytest.mark.peers
def test_real_llama_cpp_server(tiny_model, prompt_ids, hf_reference, tmp_path):
    for module in ("llama_cpp", "gguf"):  # found, not imported: libllama runs in children only
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} not installed")
    for module in ("uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings"):
        pytest.importorskip(module)
    from whistle_stop.backends.sources.tokenizer import decode

    path = in_child(_f32_gguf, tiny_model)
    with llama_cpp_server(path, tmp_path) as url:
        engine, info = remote(url, tiny_model)
        first = tokens_of(engine, prompt_ids, 8)
        notes = engine.run_notes
        second = tokens_of(engine, prompt_ids, 8)  # the text-prompt fallback is remembered
    reference = hf_reference.greedy(prompt_ids, 8)
    assert "text prompt" in notes and "re-tokenised" in notes  # llama-cpp-python returns text only
    assert "may stop early" not in notes  # it accepted every field that keeps the logits plain
    assert decode(first) == decode(reference) == decode(second)
    assert info.device.startswith("remote (127.0.0.1:")


def _marks(owner) -> list:
    marks = getattr(owner, "pytestmark", [])
    return marks if isinstance(marks, list) else [marks]


def test_only_the_real_llama_cpp_server_needs_the_peers_extra():
    """`-m "not peers"` (no optional engines installed) still runs every fake-server test."""
    import sys

    file_wide = _marks(sys.modules[__name__])
    marked = {
        name
        for name, test in globals().items()
        if name.startswith("test_") and any(mark.name == "peers" for mark in file_wide + _marks(test))
    }
    assert marked == {"test_real_llama_cpp_server"}


def test_a_stream_cut_mid_way_is_an_error_not_a_short_run(tiny_model, prompt_ids):
    """A dropped connection (no finish_reason, no [DONE]) was an ok run of 2 tokens: its tokens counted in
    a load round's throughput as a completed request's."""
    from whistle_stop.backends.engines.remote_stream import RemoteError

    with fake_server("cut") as (_, url):
        engine, _ = remote(url, tiny_model)
        with pytest.raises(RemoteError, match="closed the stream after 2 of 5 tokens"):
            tokens_of(engine, prompt_ids, 5)
