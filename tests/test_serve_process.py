"""The `serve` command as users run it, in its own process: bad flags are one line and exit 2; SIGTERM
and Ctrl+C let in-flight requests finish (or cancel them at --shutdown-timeout) and leave no worker
behind; and a bounded soak at concurrency 8 loses nothing and keeps the server's memory flat."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from tests.serve_helpers import GREEDY, HOST, complete, start_serve, stop_serve
from whistle_stop.backends.cli.main import main

SLOW = {"slow": {"decode_s": 0.02}}  # a scripted engine: 50 tokens a second


@pytest.mark.parametrize(
    "args, message",
    [
        (["--backend", "warp-drive"], "unknown backend 'warp-drive'"),
        (["--backend", "null", "--port", "70000"], "--port must be from 0 to 65535"),
        (["--backend", "null", "--workers", "0"], "--workers must be from 1 to 64"),
        (["--backend", "null", "--queue", "-1"], "--queue must be >= 0"),
        (["--backend", "null", "--shutdown-timeout", "0"], "--shutdown-timeout must be a number of seconds > 0"),
        (["--backend", "null", "--head-timeout", "nan"], "--head-timeout must be a number of seconds > 0"),
        (["--backend", "null", "--api-key-env", "WHISTLE_STOP_TEST_UNSET_KEY"], "that environment variable is not set"),
        (["--backend", "null", "--api-key-env", "not a name"], "is not an environment variable name"),
        (["--model", "random:tiny"], "the following arguments are required: --backend"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(capsys, args, message):
    code = main(["serve", "--model", "random:tiny", *args] if "--model" not in args else ["serve", *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err


def test_a_busy_port_is_one_line(capsys):
    with socket.socket() as busy:
        busy.bind((HOST, 0))
        busy.listen(1)
        code = main(["serve", "--backend", "null", "--model", "random:tiny", "--port", str(busy.getsockname()[1])])
    err = capsys.readouterr().err
    assert code == 2 and "cannot listen on 127.0.0.1:" in err and err.count("\n") == 1, err


@pytest.mark.parametrize(
    "scripted, args, reason",
    [
        ({"fail_load": True}, [], "scripted load failure"),
        # --timeout bounded only a token: a load that hung held the server, unable to serve, for 900 s
        ({"load_s": 600.0}, ["--timeout", "1"], "worker timeout: no answer for 1 s"),
    ],
)
def test_an_engine_that_cannot_load_stops_the_server_with_exit_1(tmp_path, scripted, args, reason):
    import subprocess
    import sys

    from tests.serve_helpers import _BOOTSTRAP, ROOT

    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _BOOTSTRAP,
            json.dumps({"broken": scripted}),
            "serve",
            "--backend",
            "broken",
            "--model",
            "random:tiny",
            "--port",
            "0",
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1, out.stderr
    assert "broken could not load" in out.stderr and reason in out.stderr
    assert "Traceback" not in out.stderr


def _workers(pid: int) -> list[psutil.Process]:
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if "resource_tracker" not in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def _gone(processes: list[psutil.Process]) -> bool:
    _, alive = psutil.wait_procs(processes, timeout=10)
    return not alive


def _stream_in_thread(port: int, max_tokens: int) -> tuple[threading.Thread, dict]:
    """A streamed request on a thread: `result` gets its token count, whether [DONE] came, and when it ended."""
    result: dict = {"tokens": 0, "done": False, "first": threading.Event()}

    def run() -> None:
        import http.client

        conn = http.client.HTTPConnection(HOST, port, timeout=60)
        try:
            conn.request(
                "POST",
                "/v1/completions",
                body=json.dumps(
                    {"prompt": "hi", "max_tokens": max_tokens, "stream": True, "return_token_ids": True, **GREEDY}
                ),
                headers={"Content-Type": "application/json"},
            )
            response = conn.getresponse()
            for raw in response:
                line = raw.decode().strip()
                if line == "data: [DONE]":
                    result["done"] = True
                elif line.startswith("data: "):
                    choice = json.loads(line[6:])["choices"][0]
                    result["tokens"] += len(choice.get("token_ids") or [])
                    result["first"].set()
        except (OSError, ValueError) as exc:
            result["error"] = repr(exc)
        finally:
            result["ended"] = time.monotonic()
            result["first"].set()
            conn.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl+C"])
def test_a_signal_lets_the_request_in_flight_finish_and_leaves_no_worker(tmp_path, sig):
    served = start_serve(
        tmp_path, "--backend", "slow", "--model", "random:tiny", "--shutdown-timeout", "20", scripted=SLOW
    )
    workers = _workers(served.process.pid)
    assert len(workers) == 1
    thread, result = _stream_in_thread(served.port, 60)  # about 1.2 s of tokens
    assert result["first"].wait(30) and result["tokens"] > 0, result
    served.process.send_signal(sig)
    code = served.process.wait(30)
    thread.join(30)
    assert result["done"] and result["tokens"] == 60, result  # finished, not cut
    assert code == 0 and "stopped" in served.stderr(), served.stderr()
    assert _gone(workers)
    with pytest.raises(OSError):
        complete(served.port, {"prompt": "hi", "max_tokens": 1})


def test_past_the_shutdown_timeout_the_request_is_cancelled(tmp_path):
    served = start_serve(
        tmp_path, "--backend", "slow", "--model", "random:tiny", "--shutdown-timeout", "1", scripted=SLOW
    )
    workers = _workers(served.process.pid)
    thread, result = _stream_in_thread(served.port, 1000)  # 20 s of tokens
    assert result["first"].wait(30) and result["tokens"] > 0, result
    signalled = time.monotonic()
    served.process.send_signal(signal.SIGTERM)
    code = served.process.wait(30)
    thread.join(30)
    assert code == 0 and time.monotonic() - signalled < 15
    assert not result["done"] and result["tokens"] < 1000 and result["ended"] - signalled < 10, result
    assert _gone(workers)
    assert "499" in served.stdout() or "abort" in served.stdout()  # logged as cancelled


def test_a_bounded_soak_loses_nothing_and_keeps_memory_flat(tmp_path):
    served = start_serve(tmp_path, "--backend", "null", "--model", "random:tiny", "--threads", "1")
    server = psutil.Process(served.process.pid)
    workers = _workers(served.process.pid)
    body = {"prompt": "The quick brown fox", "max_tokens": 4, "temperature": 0, "return_token_ids": True}

    def one(_index: int) -> int:
        status, _, answer = complete(served.port, body)
        return len(answer["choices"][0]["token_ids"]) if status == 200 else -status

    with ThreadPoolExecutor(8) as pool:
        warm = list(pool.map(one, range(80)))
        rss_warm = server.memory_info().rss
        rest = list(pool.map(one, range(320)))  # bounded: 400 requests in all
        rss_end = server.memory_info().rss
    assert warm + rest == [4] * 400  # every request answered, every answer whole
    print(f"server RSS after warm-up {rss_warm / 2**20:.1f} MB, at the end {rss_end / 2**20:.1f} MB")
    assert rss_end - rss_warm < 8 * 2**20, (rss_warm, rss_end)
    log = [line for line in served.stdout().splitlines() if " 200 cmpl-" in line]
    assert len(log) == 400
    assert stop_serve(served) == 0
    assert _gone(workers) and _workers_gone_from(server)


def _workers_gone_from(server: psutil.Process) -> bool:
    try:
        return not server.children(recursive=True)
    except psutil.NoSuchProcess:
        return True
