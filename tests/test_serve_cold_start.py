"""`bench --serve-cold-start`: process start to first completed response for `serve` with each engine and
for an engine's own server program, beside the engines' own cold starts (a table and serve_cold_start.csv)."""

from __future__ import annotations

import csv
import dataclasses
import sys

import pytest

from whistle_stop.backends import registry
from whistle_stop.backends.cli.main import main
from whistle_stop.backends.engines.server.lifecycle import ServerCommand, ServerUnavailable
from whistle_stop.backends.serve import cold_start


def fake_own_server(model, port, threads, **kwargs) -> ServerCommand:
    """An engine's "own server" for tests: `serve` with the null engine, under another name."""
    command = cold_start.our_server("null", model, port, threads)
    return dataclasses.replace(command, name="fake own server")


def unavailable_own_server(model, port, threads, **kwargs) -> ServerCommand:
    raise ServerUnavailable("not installed here")


def test_bench_serve_cold_start_writes_the_table_and_csv(tmp_path, capsys):
    code = main(
        [
            "bench",
            "--model",
            "random:tiny",
            "--backends",
            "null",
            "--new-tokens",
            "2",
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--threads",
            "1",
            "--no-harness-calibration",
            "--serve-cold-start",
            "--out",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "serve cold start: process start to first completed response" in out.out
    with (tmp_path / cold_start.FILE).open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(cold_start.HEADERS)
    assert [(r["backend"], r["server"], r["status"]) for r in rows] == [("null", "whistle-stop serve", "ok")]
    serve_s, engine_s = float(rows[0]["serve_cold_start_s"]), float(rows[0]["engine_cold_start_s"])
    assert 0 < engine_s < serve_s < 60  # a server process and an HTTP request on top of the worker's cold start


def test_own_servers_are_timed_or_skipped_with_the_reason(tiny_model, prompt_ids):
    specs = {
        "null": dataclasses.replace(registry.get("null"), own_server=f"{__name__}:fake_own_server"),
        "numpy": dataclasses.replace(registry.get("numpy"), own_server=f"{__name__}:unavailable_own_server"),
    }
    said: list[str] = []
    rows = cold_start.measure(specs, tiny_model, list(prompt_ids), 1, {}, {"null": 0.2}, say=said.append)
    summary = [(r.engine, r.server, r.status, r.note) for r in rows]
    assert summary == [
        ("null", "whistle-stop serve", "ok", ""),
        ("null", "fake own server", "ok", ""),
        ("numpy", "whistle-stop serve", "ok", ""),
        ("numpy", "own server", "skipped", "not installed here"),
    ]
    assert rows[0].engine_cold_start_s == 0.2 and all(r.serve_cold_start_s for r in rows[:3])
    assert len(said) == 3


def test_the_csv_names_the_backend_and_a_file_from_before_still_reads(tmp_path):
    """`backend` as every other file names it; a file written when the column was `engine`
    (docs/measurements/data, users' own) reads the same, so `report` still shows its table."""
    from whistle_stop.backends.report.markdown import serve_cold_start_markdown

    rows = [
        cold_start.ServeColdStart("null", "whistle-stop serve", "ok", 0.5, 0.2),
        cold_start.ServeColdStart("numpy", "own server", "skipped", None, None, "not installed here"),
    ]
    path = cold_start.write_csv(tmp_path, rows)
    header, *_ = path.read_text(encoding="utf-8").splitlines()
    assert header.split(",")[0] == "backend" and "engine," not in header
    assert cold_start.read_csv(tmp_path) == rows
    page = serve_cold_start_markdown(tmp_path)
    old = tmp_path / "old"
    old.mkdir()
    (old / cold_start.FILE).write_text(path.read_text(encoding="utf-8").replace("backend,", "engine,", 1))
    assert cold_start.read_csv(old) == rows
    assert serve_cold_start_markdown(old) == page


def test_a_server_that_dies_at_start_is_a_failed_row(tiny_model, prompt_ids):
    command = ServerCommand([sys.executable, "-c", "print('no engine for you'); raise SystemExit(3)"], 1)
    seconds, problem = cold_start.time_to_first_response(command, list(prompt_ids), tiny_model, timeout_s=30)
    assert seconds is None and "exited (code 3)" in problem and "no engine for you" in problem


@pytest.mark.peers
def test_llama_cpp_server_has_an_own_server_command(tiny_model):
    spec = registry.get("llamacpp-q4_0")
    try:
        command = cold_start.own_server(spec, tiny_model, 1234, 1)
    except ServerUnavailable as exc:
        assert "GGUF" in str(exc) or "llama-cpp-python[server]" in str(exc)
        return
    assert command.argv[1:3] == ["-m", "llama_cpp.server"] and "--port" in command.argv
