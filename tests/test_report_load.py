"""The load curve's data (Qt-free) and the report's Load section, from a hand-made results folder."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from whistle_stop.backends.report import figures as fg
from whistle_stop.backends.report.folder_data import load_folder
from whistle_stop.backends.report.html import build_report
from whistle_stop.backends.results.export import write_results
from whistle_stop.backends.results.load import LoadRequestRecord, Slo, load_levels, requests_from_runs
from whistle_stop.backends.results.records import RunRecord, TokenRecord

from .run_records import run_record

PROMPT, NEW = 8, 4


def _run(backend: str, repeat: int, itl: float) -> RunRecord:
    return run_record(
        backend,
        repeat,
        itl=itl,
        model="random:tiny",
        weights="random",
        prompt_tokens=PROMPT,
        new_tokens=NEW,
        import_s=1.0,
        load_s=0.1,
        ttft_ms=20.0,
        e2e_s=0.02 + 3 * itl / 1e3,
        tokens_generated=NEW,
    )


def _tokens(run: RunRecord, itl: float) -> list[TokenRecord]:
    return [
        TokenRecord(
            run.run_id,
            run.backend,
            run.repeat,
            False,
            i,
            100 + i,
            "x",
            20.0 + i * itl,
            None if i == 0 else itl,
            "decode",
        )
        for i in range(NEW)
    ]


def _round(repeat: int, gaps: tuple[float, ...]) -> list[LoadRequestRecord]:
    """One round of 2 requests at concurrency 2 against the server engine."""
    return [
        LoadRequestRecord(
            f"remote/c2/r{repeat}",
            "remote",
            "",
            PROMPT,
            NEW,
            2,
            repeat,
            False,
            stream,
            "ok",
            NEW,
            30.0,
            sum(gaps) / len(gaps),
            0.1,
            0.0,
            0.1,
            " ".join(map(str, gaps)),
        )
        for stream in range(2)
    ]


def _folder(path):
    runs = [_run("remote", 1, 10.0), _run("numpy", 1, 5.0)]
    tokens = _tokens(runs[0], 10.0) + _tokens(runs[1], 5.0)
    load = _round(1, (12.0, 14.0, 30.0))
    env = {
        "model": {"id": "random:tiny", "weights": "random"},
        "machine": {"cpu": "test cpu"},
        "settings": {"backends": ["remote", "numpy"], "concurrency": [1, 2], "slo_ttft_ms": 100.0, "slo_itl_ms": 50.0},
    }
    write_results(path, runs, tokens, env, load=load, slo=Slo(100.0, 50.0))
    return path, runs, tokens, load


def test_load_curve_has_a_point_per_level_with_itl_whiskers(tmp_path):
    _, runs, tokens, load = _folder(tmp_path / "load")
    levels = load_levels(requests_from_runs(runs, tokens) + load, Slo(), {"remote"})
    figure = fg.load_curve(levels)
    series = {s.name: s for s in figure.series}
    remote, numpy = series["remote"], series["numpy"]
    assert remote.labels == ["c=1", "c=2"] and numpy.labels == ["c=1"]  # a local engine: one reference point
    by_level = {lv.concurrency: lv for lv in levels if lv.backend == "remote"}
    assert remote.x == [by_level[1].itl_p50_ms, by_level[2].itl_p50_ms]
    assert remote.y == [by_level[1].output_tok_s, by_level[2].output_tok_s]
    assert remote.x_whiskers[1] == [by_level[2].itl_p90_ms, by_level[2].itl_p99_ms]
    assert remote.x[1] == pytest.approx(14.0) and remote.y[1] == pytest.approx(2 * NEW / 0.1)


def test_report_has_a_load_section_with_its_figure_and_table(tmp_path):
    from PySide6.QtGui import QImage

    folder, *_ = _folder(tmp_path / "load")
    data = load_folder(folder)
    assert len(data.load) == 2 and data.slo == Slo(100.0, 50.0)  # read back, SLO from environment.json
    out = tmp_path / "report"
    page = build_report([folder], out).read_text(encoding="utf-8")
    assert "<h3>Load</h3>" in page and "Output tokens/s vs median ITL under load" in page
    png = out / "1-load_curve.png"
    assert png.exists() and not QImage(str(png)).isNull()
    assert "<td>remote</td><td>2</td><td>server</td>" in page  # the level-2 row
    assert "<td>numpy</td><td>1</td><td>batch 1</td>" in page
    assert "TTFT &lt;= 100 ms and TPOT &lt;= 50 ms" in page


def test_folders_without_load_runs_have_no_load_section(tmp_path):
    runs = [_run("numpy", 1, 5.0)]
    write_results(tmp_path / "bench", runs, _tokens(runs[0], 5.0), {})
    page = build_report([tmp_path / "bench"], tmp_path / "report").read_text(encoding="utf-8")
    assert "<h3>Load</h3>" not in page and not (tmp_path / "report" / "1-load_curve.png").exists()


def test_markdown_page_has_the_load_levels_and_the_serve_cold_start(tmp_path):
    """`report --markdown` of a `bench --concurrency --serve-cold-start` folder: the command with its
    levels and SLOs, the levels' rows as bench printed them, and the serve cold-start table."""
    from whistle_stop.backends.report.markdown import measurement_markdown
    from whistle_stop.backends.serve.cold_start import ServeColdStart, write_csv

    folder, *_ = _folder(tmp_path / "load")
    environment = json.loads((folder / "environment.json").read_text())
    environment["settings"]["engine_options"] = {
        "remote": {"url": "http://127.0.0.1:8000/v1", "api_key_env": "<redacted>"}
    }
    (folder / "environment.json").write_text(json.dumps(environment))
    write_csv(folder, [ServeColdStart("numpy", "whistle-stop serve", "ok", 0.512, 0.401)])
    page = measurement_markdown(load_folder(folder))
    command = page.split("```")[1]
    assert "--concurrency 1,2 --slo-ttft-ms 100 --slo-itl-ms 50" in command
    assert "--remote-url http://127.0.0.1:8000/v1" in command and "redacted" not in command  # unknown: no flag
    assert command.strip().endswith("--serve-cold-start")
    assert "## Load" in page and "| remote | 2 | server |" in page and "| numpy | 1 | batch 1 |" in page
    assert "TTFT <= 100 ms and TPOT <= 50 ms" in page
    assert "## Serve cold start" in page and "| numpy | whistle-stop serve | 0.51 | 0.40 | ok |" in page


def test_every_view_of_a_load_says_throughput_counts_completed_requests_only(tmp_path):
    """A failed request's tokens are not output (vLLM's rule): the terminal's footer, the reports' and
    the Load tab's notes and the curve's axis say so, and the terminal prints the reports' own notes."""
    from types import SimpleNamespace

    from rich.console import Console

    from whistle_stop.backends.cli.load_table import print_load
    from whistle_stop.backends.results.load import load_notes

    _, runs, tokens, load = _folder(tmp_path / "load")
    load[1] = replace(load[1], status="error", error="boom")
    levels = load_levels(requests_from_runs(runs, tokens) + load, Slo(), {"remote"})
    (level,) = [lv for lv in levels if lv.concurrency == 2]
    assert level.output_tok_s == pytest.approx(NEW / 0.1)  # the completed request's tokens only
    assert "completed requests" in load_notes(levels, Slo())[0]
    assert fg.load_curve(levels).y_label == "output tokens/s (completed requests)"
    console = Console(record=True, width=400)
    config = SimpleNamespace(slo=Slo(), concurrency=(1, 2))
    print_load(SimpleNamespace(config=config, runs=runs, tokens=tokens, load=load), console)
    printed = console.export_text()
    assert all(line in printed for line in load_notes(levels, Slo()))
