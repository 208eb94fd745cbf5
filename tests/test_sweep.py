"""Sweeps with scripted engines: skipped cells, fair order, one load per engine, resume after a cancel."""

import csv
import json

import pytest

from tests import fake_engines
from tests.conftest import live_workers
from whistle_stop.backends import registry
from whistle_stop.backends.cli.main import main
from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.machine.bandwidth import Bandwidth
from whistle_stop.backends.machine.compute_peak import ComputePeaks
from whistle_stop.backends.runs.bench import BenchConfig
from whistle_stop.backends.runs.sweep import CellDone, SweepGrid, SweepNote, SweepSession
from whistle_stop.backends.worker.events import BackendEvent, Ready, RunRequest

SPECS = {n: fake_engines.spec(n) for n in ("a", "b")}
GRID = SweepGrid(prompt_tokens=(4, 1000), new_tokens=(3, 30))  # 1000 + 30 > 1024: skipped


def _session(out_dir, specs=SPECS, grid=GRID, cancel_after_cells=None, restart=False, cancel_at=None, **config):
    log = {"requests": [], "ready": [], "cells": [], "notes": []}
    box = {}

    def on_event(event):
        if isinstance(event, BackendEvent) and isinstance(event.event, RunRequest):
            log["requests"].append(event.event.run_id)
            if event.event.run_id == cancel_at:  # a cancel in the middle of a cell
                box["session"].cancel()
        elif isinstance(event, BackendEvent) and isinstance(event.event, Ready):
            log["ready"].append(event.backend)
        elif isinstance(event, SweepNote):
            log["notes"].append(event.message)
        elif isinstance(event, CellDone):
            log["cells"].append((event.prompt_tokens, event.new_tokens))
            if cancel_after_cells is not None and len(log["cells"]) == cancel_after_cells:
                box["session"].cancel()

    cfg = BenchConfig(
        model="random:tiny",
        backends=tuple(specs),
        threads=1,
        repeats=config.pop("repeats", 2),
        warmup=config.pop("warmup", 1),
        **config,
    )
    with registry.use(specs.values()):  # the session takes its engines' specs now
        session = SweepSession(cfg, grid, out_dir, restart=restart, on_event=on_event, measure_bandwidth=False)
    box["session"] = session
    return session, log


def _environment(out_dir):
    return json.loads((out_dir / "environment.json").read_text())


def test_grid_skips_cells_beyond_the_context(tiny_model, tmp_path):
    session, _ = _session(tmp_path)
    plan = session.prepare()
    assert [c.key for c in plan.cells] == [(4, 3), (4, 30), (1000, 3)]
    assert [(s.prompt_tokens, s.new_tokens) for s in plan.skipped] == [(1000, 30)]
    assert "exceed the context of 1024" in plan.skipped[0].reason
    assert [len(c.prompt_ids) for c in plan.cells] == [4, 4, 1000]


def test_sweep_resumes_after_a_cancel_without_repeating_finished_cells(tiny_model, tmp_path):
    first, log1 = _session(tmp_path, cancel_after_cells=1)
    result1 = first.run()
    assert result1.cancelled and log1["cells"] == [(4, 3)]
    assert sorted(log1["ready"]) == ["a", "b"]  # each worker loaded once
    # Warm-ups once per engine, then fair order inside the first cell: A B, A B (no engine twice in a row).
    assert log1["requests"][:6] == ["a/p4n3/w1", "b/p4n3/w1", "a/p4n3/r1", "b/p4n3/r1", "a/p4n3/r2", "b/p4n3/r2"]
    env = _environment(tmp_path)
    assert env["sweep"]["completed"] == [[4, 3]]
    assert env["sweep"]["skipped"] == [
        {"prompt_tokens": 1000, "new_tokens": 30, "reason": "1000 + 30 tokens exceed the context of 1024"}
    ]
    assert not live_workers()

    second, log2 = _session(tmp_path)
    plan = second.prepare()
    assert plan.completed == [(4, 3)] and [c.key for c in plan.cells] == [(4, 30), (1000, 3)]
    result2 = second.run()
    assert not result2.cancelled
    assert not [r for r in log2["requests"] if "/p4n3/" in r]  # the finished cell is not run again
    assert sorted(log2["ready"]) == ["a", "b"]
    # Every cell warms every engine up on its own shapes before its measured repeats.
    assert [r for r in log2["requests"] if "/w" in r] == ["a/p4n30/w1", "b/p4n30/w1", "a/p1000n3/w1", "b/p1000n3/w1"]
    cell2 = [r for r in log2["requests"] if "/p1000n3/" in r]
    assert cell2[:2] == ["a/p1000n3/w1", "b/p1000n3/w1"] and all("/r" in r for r in cell2[2:])
    assert log2["cells"] == [(4, 30), (1000, 3)]
    with (tmp_path / "runs.csv").open() as f:
        runs = [r for r in csv.DictReader(f) if r["is_warmup"] == "false"]
    per_cell = {}
    for r in runs:
        per_cell.setdefault((int(r["prompt_tokens"]), int(r["new_tokens"])), []).append(r["backend"])
    expected = {k: ["a", "a", "b", "b"] for k in [(4, 3), (4, 30), (1000, 3)]}
    assert {k: sorted(v) for k, v in per_cell.items()} == expected
    with (tmp_path / "tokens.csv").open() as f:
        tokens = list(csv.DictReader(f))
    assert sum(1 for t in tokens if t["run_id"] == "a/p4n30/r1") == 30
    assert _environment(tmp_path)["sweep"]["completed"] == [[4, 3], [4, 30], [1000, 3]]
    assert all(r.agree_tokens == r.new_tokens for r in result2.runs if not r.is_warmup)  # per-cell agreement


def test_a_cancel_mid_cell_keeps_only_the_finished_cells(tiny_model, tmp_path):
    """The cell a cancel cuts short runs again on a resume: its finished runs are not shown or written
    beside the complete cells (a row of fewer repeats than the others, then replaced)."""
    session, _ = _session(tmp_path, cancel_at="a/p4n30/r2")
    result = session.run()
    assert result.cancelled
    assert {(r.prompt_tokens, r.new_tokens) for r in result.runs} == {(4, 3)}
    assert {t.run_id.split("/")[1] for t in result.tokens} == {"p4n3"}
    with (tmp_path / "runs.csv").open() as f:
        assert {(r["prompt_tokens"], r["new_tokens"]) for r in csv.DictReader(f)} == {("4", "3")}
    assert _environment(tmp_path)["sweep"]["completed"] == [[4, 3]]


def test_a_damaged_folder_is_refused_in_one_line(tiny_model, tmp_path):
    """A resume trusts environment.json's finished cells: a list it cannot read, or finished cells
    whose records are gone, is refused (not a traceback, not a sweep with those cells silently empty)."""
    grid = SweepGrid((4, 8), (2,))
    _session(tmp_path, grid=grid, repeats=1, warmup=0)[0].run()
    environment = _environment(tmp_path)
    damaged = {**environment, "sweep": {**environment["sweep"], "completed": [["a", 2]]}}
    (tmp_path / "environment.json").write_text(json.dumps(damaged))
    with pytest.raises(UsageError, match=r"is damaged: its list of finished cells.*--restart"):
        _session(tmp_path, grid=grid, repeats=1, warmup=0)[0].prepare()
    for section, value, said in (
        ("sweep", {**environment["sweep"], "fingerprint": "x"}, "sweep.fingerprint"),
        ("bandwidth", [], "bandwidth"),
        ("prefill_roofline", [5], "prefill_roofline\\[0\\]"),
    ):
        (tmp_path / "environment.json").write_text(json.dumps({**environment, section: value}))
        with pytest.raises(UsageError, match=rf"is damaged: {said} should be an object.*--restart"):
            _session(tmp_path, grid=grid, repeats=1, warmup=0)[0].prepare()
    (tmp_path / "environment.json").write_text(json.dumps(environment))
    tokens = (tmp_path / "tokens.csv").read_text()
    (tmp_path / "tokens.csv").unlink()
    with pytest.raises(UsageError, match=r"tokens.csv holds no tokens of the finished run a/p4n2/r1.*--restart"):
        _session(tmp_path, grid=grid, repeats=1, warmup=0)[0].prepare()
    (tmp_path / "tokens.csv").write_text(tokens)
    lines = (tmp_path / "runs.csv").read_text().splitlines(keepends=True)
    (tmp_path / "runs.csv").write_text("".join(line for line in lines if "/p8n2/" not in line))
    with pytest.raises(UsageError, match=r"runs.csv holds no runs of the finished cell\(s\) p8n2;.*--restart"):
        _session(tmp_path, grid=grid, repeats=1, warmup=0)[0].prepare()
    (tmp_path / "runs.csv").unlink()
    with pytest.raises(UsageError, match=r"no runs of the finished cell\(s\) p4n2, p8n2"):
        _session(tmp_path, grid=grid, repeats=1, warmup=0)[0].prepare()


def test_other_settings_are_refused_unless_restart(tiny_model, tmp_path):
    grid = SweepGrid((4,), (2,))
    session, _ = _session(tmp_path, grid=grid, repeats=1, warmup=0)
    session.run()
    with pytest.raises(UsageError, match=r"other settings \(repeats: 1 then, 2 now\).*--restart"):
        _session(tmp_path, grid=grid, repeats=2, warmup=0)[0].prepare()
    with pytest.raises(UsageError, match=r"warmup: 0 then, 1 now"):  # a first repeat's first-call costs
        _session(tmp_path, grid=grid, repeats=1, warmup=1)[0].prepare()
    from whistle_stop.backends.runs.sweep_plan import fingerprint_differences

    fingerprint = _environment(tmp_path)["sweep"]["fingerprint"]
    later = ("warmup", "cold", "libraries", "thread_env", "app_commit")
    older = {k: v for k, v in fingerprint.items() if k not in later}
    assert fingerprint_differences(older, fingerprint) == []  # begun before the keys
    restarted, log = _session(tmp_path, grid=grid, repeats=2, warmup=0, restart=True)
    assert [c.key for c in restarted.prepare().cells] == [(4, 2)]
    restarted.run()
    assert len(log["requests"]) == 4
    assert _environment(tmp_path)["sweep"]["fingerprint"]["repeats"] == 2


def test_a_resume_on_other_software_is_refused(tiny_model, tmp_path, monkeypatch):
    """Cells measured before an upgrade of an engine's runtime are not mixed with cells after it."""
    from whistle_stop.backends.runs import sweep_plan

    grid = SweepGrid((4,), (2,))
    _session(tmp_path, grid=grid, repeats=1, warmup=0)[0].run()
    real = sweep_plan.library_versions
    monkeypatch.setattr(sweep_plan, "library_versions", lambda backends: {**real(backends), "numpy": "0.0.1"})
    with pytest.raises(UsageError, match=r"libraries\.numpy: '[0-9.]+' then, '0\.0\.1' now"):
        _session(tmp_path, grid=grid, repeats=1, warmup=0)[0].prepare()
    monkeypatch.setattr(sweep_plan, "library_versions", real)
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    with pytest.raises(UsageError, match=r"thread_env\.OMP_NUM_THREADS: None then, '7' now"):
        _session(tmp_path, grid=grid, repeats=1, warmup=0)[0].prepare()


def test_a_bench_folder_is_not_mistaken_for_a_sweep(tiny_model, tmp_path):
    (tmp_path / "runs.csv").write_text("run_id\n")
    (tmp_path / "environment.json").write_text("{}")
    with pytest.raises(UsageError, match="not from a sweep"):
        _session(tmp_path)[0].prepare()


def _engine_a_and_fixed_probes(monkeypatch) -> None:
    """A scripted engine "a", and the machine's probes (benchmarks) answered with fixed figures."""
    monkeypatch.setitem(registry.ENGINES, "a", fake_engines.spec("a"))
    monkeypatch.setattr(registry, "available", lambda name: (True, ""))
    monkeypatch.setattr(
        "whistle_stop.backends.runs.sweep.probe_bandwidth",
        lambda threads: Bandwidth(10.0, 9.0, 1 << 30, threads, 5, "test cpu", "now"),
    )
    monkeypatch.setattr("whistle_stop.backends.runs.sweep.probe_compute_peaks", lambda threads: PEAKS)


def test_sweep_command_writes_records_and_plots(capsys, tmp_path, monkeypatch):
    _engine_a_and_fixed_probes(monkeypatch)
    out = tmp_path / "sweep"
    code = main(
        [
            "sweep",
            "--model",
            "random:tiny",
            "--backends",
            "a",
            "--prompt-tokens",
            "4,8,1020",
            "--new-tokens",
            "2,5",
            "--repeats",
            "2",
            "--warmup",
            "0",
            "--threads",
            "1",
            "--out",
            str(out),
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "skipped: prompt 1020, new 5" in captured.err
    assert _environment(out)["bandwidth"]["gb_s"] == 10.0
    for name in ("ttft_vs_prompt", "decode_vs_output", "itl_vs_position"):
        assert (out / f"{name}.png").stat().st_size > 1000
    bad = ["sweep", "--model", "random:tiny", "--backends", "a", "--prompt-tokens", "4,x", "--out", str(out)]
    assert main(bad) == 2
    assert "comma-separated whole numbers" in capsys.readouterr().err


def test_a_sweep_started_over_leaves_no_chart_of_the_one_before(capsys, tmp_path, monkeypatch):
    """--restart with one new token each: no decode to draw, and the decode charts the discarded
    sweep drew into --out are gone (they would pass for this sweep's)."""
    _engine_a_and_fixed_probes(monkeypatch)
    out = tmp_path / "sweep"
    args = ["sweep", "--model", "random:tiny", "--backends", "a", "--repeats", "1", "--warmup", "0"]
    args += ["--threads", "1", "--prompt-tokens", "4", "--out", str(out)]
    assert main([*args, "--new-tokens", "3"]) == 0, capsys.readouterr().err
    assert (out / "decode_vs_output.png").exists() and (out / "itl_vs_position.png").exists()
    assert main([*args, "--new-tokens", "1", "--restart"]) == 0, capsys.readouterr().err
    assert (out / "ttft_vs_prompt.png").exists()
    assert not (out / "decode_vs_output.png").exists() and not (out / "itl_vs_position.png").exists()


PEAKS = ComputePeaks(peaks={"fp32": {"gops": 2.0, "median_gops": 2.0, "isa": "test fma"}}, threads=1, cpu="test")


def test_the_ttft_grid_draws_prefill_s_roofline(capsys, tmp_path, monkeypatch):
    """`sweep --grid ttft-vs-length`: prompts of 1 to 1,023 tokens with one new token each; the
    roofline per arithmetic (here fp32's, the fake engine's precision) kept in environment.json
    and drawn as a dashed curve on the TTFT chart."""
    from whistle_stop.backends.report.sweep_figures import ttft_vs_prompt
    from whistle_stop.backends.results.reader import load_results
    from whistle_stop.backends.results.roofline import prefill_bytes, prefill_flops
    from whistle_stop.backends.runs.sweep_grid import GRIDS
    from whistle_stop.backends.sources.model_files import resolve_model

    _engine_a_and_fixed_probes(monkeypatch)
    out = tmp_path / "sweep"
    args = ["sweep", "--model", "random:tiny", "--backends", "a", "--repeats", "1", "--warmup", "0", "--threads", "1"]
    assert main([*args, "--grid", "ttft-vs-length", "--prompt-tokens", "4", "--out", str(out)]) == 2
    assert "not both" in capsys.readouterr().err
    assert main([*args, "--grid", "ttft-vs-length", "--no-plots", "--out", str(out)]) == 0, capsys.readouterr().err
    environment = _environment(out)
    assert environment["sweep"]["prompt_tokens"] == list(GRIDS["ttft-vs-length"].grid.prompt_tokens)
    assert environment["sweep"]["prompt_tokens"][0] == 1 and environment["sweep"]["prompt_tokens"][-1] == 1023
    assert environment["sweep"]["new_tokens"] == [1] and not environment["sweep"]["skipped"]
    assert environment["compute_peaks"]["peaks"]["fp32"]["isa"] == "test fma"
    (curve,) = environment["prefill_roofline"]
    assert curve["arithmetic"] == "fp32" and curve["engines"] == ["a"]
    config = resolve_model("random:tiny").gpt2_config
    weight_bytes = environment["engines"]["a"]["weight_bytes_per_token"]
    for tokens, ms in curve["points"]:
        expected = max(prefill_flops(config, tokens) / 2e6, prefill_bytes(weight_bytes, 0, tokens) / 10e6)
        assert ms == pytest.approx(expected, rel=1e-3)
    runs, _, _ = load_results(out)
    (limit,) = ttft_vs_prompt(runs, 10.0, environment).limits
    assert limit.x == [p[0] for p in curve["points"]] and limit.y == [p[1] for p in curve["points"]]
    assert "fp32 roofline" in limit.label and "test fma" in limit.label


def test_a_roofline_s_label_names_another_arithmetic_s_peak_only_where_it_stands_in():
    """The legend sits beside a narrow chart in the window: "fp32 roofline (fp32 peak ...)" said fp32
    twice. The peak's arithmetic is named where it is not the curve's own (bf16 on a CPU without bf16
    instructions is held to fp32's peak)."""
    from whistle_stop.backends.report.sweep_figures import roofline_limits
    from whistle_stop.backends.results.roofline_curves import ENVIRONMENT_KEY

    def curve(arithmetic: str, held: str, isa: str) -> dict:
        return {"device": "cpu", "arithmetic": arithmetic, "peak_arithmetic": held, "peak_gops": 236.4, "isa": isa,
                "engines": ["e"], "points": [[1, 1.0], [2, 2.0]]}  # fmt: skip

    environment = {ENVIRONMENT_KEY: [curve("fp32", "fp32", "avx512f vfmadd231ps zmm"), curve("bf16", "fp32", "fma")]}
    assert [limit.label for limit in roofline_limits(environment)] == [
        "fp32 roofline (peak 236 G/s, avx512f vfmadd231ps zmm)",
        "bf16 roofline (fp32 peak 236 G/s, fma)",
    ]


def test_a_cuda_engine_s_ttft_is_drawn_against_its_gpu_s_roofline(tiny_model, tmp_path, monkeypatch):
    """A CUDA engine's curve divides by its GPU's GEMM peak and bandwidth (probed once, after the
    load), the host engine's by the CPU's; without the GPU's probes there is no GPU curve."""
    from whistle_stop.backends.report.sweep_figures import ttft_vs_prompt
    from whistle_stop.backends.results.roofline import prefill_bytes, prefill_flops

    gpu_peaks = ComputePeaks(peaks={"fp32": {"gops": 200.0, "median_gops": 190.0, "isa": "Test GPU: SGEMM"}})
    monkeypatch.setattr(
        "whistle_stop.backends.runs.sweep.probe_bandwidth",
        lambda threads: Bandwidth(10.0, 9.0, 1 << 30, threads, 5, "test cpu", "now"),
    )
    monkeypatch.setattr("whistle_stop.backends.runs.sweep.probe_compute_peaks", lambda threads: PEAKS)
    gpu_bandwidth = Bandwidth(1000.0, 900.0, 1 << 30, 1, 5, "test cpu", "now", device="cuda")
    monkeypatch.setattr("whistle_stop.backends.runs.sweep.measure_gpu_bandwidth", lambda: gpu_bandwidth)
    monkeypatch.setattr("whistle_stop.backends.runs.sweep.measure_gpu_peaks", lambda: gpu_peaks)
    specs = {"host": fake_engines.spec("host"), "gpu": fake_engines.spec("gpu", device="cuda")}
    session, _ = _session(tmp_path, specs=specs, grid=SweepGrid((4, 64), (1,)), repeats=1, warmup=0)
    session.measure_bandwidth = True
    result = session.run()
    environment = _environment(tmp_path)
    assert environment["gpu_compute_peaks"]["peaks"]["fp32"]["isa"] == "Test GPU: SGEMM"
    curves = {curve["device"]: curve for curve in environment["prefill_roofline"]}
    assert curves["cpu"]["engines"] == ["host"] and curves["cuda"]["engines"] == ["gpu"]
    weight_bytes = environment["engines"]["gpu"]["weight_bytes_per_token"]
    config = tiny_model.gpt2_config
    for tokens, ms in curves["cuda"]["points"]:
        expected = max(prefill_flops(config, tokens) / 200e6, prefill_bytes(weight_bytes, 0, tokens) / 1000e6)
        assert ms == pytest.approx(expected, rel=1e-3, abs=1e-4)  # kept to 4 decimals
    labels = [limit.label for limit in ttft_vs_prompt(result.runs, 10.0, environment).limits]
    assert any("on the GPU" in label and "Test GPU" in label for label in labels)

    def no_gpu():
        raise RuntimeError("torch sees no CUDA GPU")

    monkeypatch.setattr("whistle_stop.backends.runs.sweep.measure_gpu_peaks", no_gpu)
    session, _ = _session(tmp_path / "again", specs=specs, grid=SweepGrid((4,), (1,)), repeats=1, warmup=0)
    session.measure_bandwidth = True
    session.run()
    assert [curve["device"] for curve in _environment(tmp_path / "again")["prefill_roofline"]] == ["cpu"]


def test_a_resume_that_adds_lengths_keeps_the_roofline_over_every_cell(tiny_model, tmp_path, monkeypatch):
    """A resume with other prompt lengths adds cells to the folder's: prefill's roofline spans the
    finished cells' lengths too, not only the lengths of the command that ran last."""
    monkeypatch.setattr(
        "whistle_stop.backends.runs.sweep.probe_bandwidth",
        lambda threads: Bandwidth(10.0, 9.0, 1 << 30, threads, 5, "test cpu", "now"),
    )
    monkeypatch.setattr("whistle_stop.backends.runs.sweep.probe_compute_peaks", lambda threads: PEAKS)
    for grid in (SweepGrid((4, 512), (1,)), SweepGrid((4, 8), (1,))):
        session, _ = _session(tmp_path, grid=grid, repeats=1, warmup=0)
        session.measure_bandwidth = True
        session.run()
    environment = _environment(tmp_path)
    assert environment["sweep"]["completed"] == [[4, 1], [8, 1], [512, 1]]
    (curve,) = environment["prefill_roofline"]
    lengths = [tokens for tokens, _ in curve["points"]]
    assert {4, 8, 512} <= set(lengths) and lengths[-1] == 512


def test_a_worker_lost_in_one_cell_is_restarted_for_the_next(tiny_model, tmp_path):
    # Crashes at its 21st token: cells with 3 new tokens run fine, cells with 30 crash.
    specs = {"crashy": fake_engines.spec("crashy", crash_at=20), "calm": fake_engines.spec("calm")}
    grid = SweepGrid(prompt_tokens=(4, 8, 16, 32), new_tokens=(3, 30))
    session, log = _session(tmp_path, specs=specs, grid=grid, repeats=1, warmup=1)
    result = session.run()
    crashy = {(r.prompt_tokens, r.new_tokens, r.is_warmup): r.status for r in result.runs if r.backend == "crashy"}
    # Every cell warms up first, so a cell with 30 new tokens crashes in its warm-up already.
    assert crashy[(4, 30, True)] == "crashed" and (4, 30, False) not in crashy
    assert crashy[(8, 3, False)] == "ok"  # restarted after the crash in the cell before
    assert crashy[(8, 30, True)] == "crashed"
    assert crashy[(16, 3, False)] == "ok"  # second restart
    assert (16, 30, True) in crashy  # one more crash...
    assert log["ready"].count("crashy") == 3  # ...but no third restart: at most two per sweep
    assert (32, 3, False) not in crashy  # and the cells left say why they have no crashy row, once
    assert (
        sum("crashy: worker crashed again after 2 restarts; not run in the cells left" in n for n in log["notes"]) == 1
    )
    assert all(r.status == "ok" for r in result.runs if r.backend == "calm")
    assert not live_workers()


def test_a_decode_limit_that_moves_past_three_figures_reads_as_one_value():
    """A limit whose ends round alike read '2.67e+03 -> 2.67e+03 tok/s'."""
    from whistle_stop.backends.report.sweep_figures import output_floor_curves

    engines = {"x": {"weight_bytes_per_token": 1e6, "dtype": "fp32", "kv_bytes_per_position": 1.0}}
    (limit,) = output_floor_curves({"engines": engines}, [], 10.0, 4, [2, 4])
    assert "->" not in limit.label and limit.label.endswith(": 1e+04 tok/s")
