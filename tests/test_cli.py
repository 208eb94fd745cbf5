"""`main.py`: bad input gets one clear line and exit 2; a bench on random:tiny end to end."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from tests import fake_engines
from whistle_stop.backends import registry
from whistle_stop.backends.cli.main import main
from whistle_stop.backends.machine.gpu import cuda_available
from whistle_stop.backends.report import plots

ROOT = Path(__file__).resolve().parent.parent


def _bench(capsys, *args):
    code = main(["bench", "--model", "random:tiny", "--repeats", "1", "--warmup", "0", *args])
    return code, capsys.readouterr()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--prompt", "   "], "prompt is empty"),
        (["--prompt-tokens", "1000", "--new-tokens", "100"], "exceed the model's context of 1024"),
        (["--new-tokens", "0"], "--new-tokens must be >= 1"),
        (["--temperature", "-1", "--decoding", "sample"], "temperature must be >= 0"),
        (["--top-p", "0"], "top-p must be in (0, 1]"),
        (["--top-p", "1.5"], "top-p must be in (0, 1]"),
        (["--top-k", "-3"], "top-k must be >= 0"),
        (["--backends", "hf,warp-drive"], "unknown backend 'warp-drive'; known backends: hf, hf-bf16"),
        (["--backends", "hf,numpy,hf"], "listed more than once: hf"),
        (["--prompt", "Hi", "--prompt-example", "repeating-code"], "not allowed with argument --prompt"),
        (["--model", "random:huge"], "unknown model 'random:huge'"),
        (["--model", "./missing-folder"], "does not exist"),
        (["--repeats", "0"], "--repeats must be >= 1"),
        (["--threads", "-2"], "--threads must be >= 0"),
        (["--new-tokens", "ten"], "invalid int value"),
        (["--concurrency", "0,2"], "--concurrency levels must be 1 to 256"),
        (["--concurrency", "two"], "expected comma-separated whole numbers"),
        (["--slo-ttft-ms", "-5", "--concurrency", "2"], "--slo-ttft-ms must be > 0"),
        (["--timeout", "nan"], "--timeout must be a number of seconds > 0"),  # NaN passed `<= 0`
        (["--timeout", "inf"], "--timeout must be a number of seconds > 0"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, args, message):
    code, out = _bench(capsys, "--out", str(tmp_path), *args)
    assert code == 2
    assert message in out.err
    assert out.err.count("\n") == 1 and "Traceback" not in out.err
    assert not (tmp_path / "runs.csv").exists()


@pytest.mark.parametrize("args", [["--mode", "race"], ["--concurrency", "1,2"]])
def test_profile_refuses_what_it_would_not_do(capsys, tmp_path, args):
    """profile runs one engine at a time: a race's records were flagged concurrent, load levels were dropped."""
    code = main(["profile", "--model", "random:tiny", "--backends", "null", "--out", str(tmp_path / "p"), *args])
    err = capsys.readouterr().err
    assert code == 2 and "profile runs one engine at a time" in err and err.count("\n") == 1
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("content", [b"caf\xe9 au lait", bytes(range(256))])
def test_a_prompt_file_that_is_not_utf8_is_one_line(capsys, tmp_path, content):
    prompt = tmp_path / "prompt.txt"
    prompt.write_bytes(content)
    code, out = _bench(capsys, "--out", str(tmp_path / "out"), "--prompt-file", str(prompt))
    assert code == 2 and "cannot read --prompt-file" in out.err  # was UnicodeDecodeError's traceback
    assert out.err.count("\n") == 1


def test_a_huge_prompt_length_is_refused_before_its_tokens_are_built(capsys, tmp_path, monkeypatch):
    import whistle_stop.backends.sources.prompts as prompts

    built = prompts.prompt_of_length

    def guarded(n_tokens: int) -> list[int]:
        assert n_tokens <= 1024, "a list of 10**9 token ids: the memory runs out"
        return built(n_tokens)

    monkeypatch.setattr(prompts, "prompt_of_length", guarded)
    code, out = _bench(capsys, "--out", str(tmp_path), "--prompt-tokens", "1000000000")
    assert code == 2 and "exceed the model's context of 1024" in out.err and out.err.count("\n") == 1


def test_a_sweep_with_no_cell_that_fits_the_context_is_bad_input(capsys, tmp_path):
    args = ["--model", "random:tiny", "--prompt-tokens", "1000", "--new-tokens", "100", "--out", str(tmp_path)]
    code = main(["sweep", *args, "--no-plots"])
    err = capsys.readouterr().err
    assert code == 2 and "no cell of the sweep fits the model's context of 1024 tokens" in err  # was 0, no runs
    assert err.count("\n") == 1 and not (tmp_path / "runs.csv").exists()


def test_corrupt_model_folder(capsys, tmp_path, tiny_model):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "config.json").write_text((tiny_model.folder / "config.json").read_text())
    (folder / "model.safetensors").write_bytes((tiny_model.safetensors).read_bytes()[:1000])
    code, out = _bench(capsys, "--model", str(folder), "--out", str(tmp_path / "out"))
    assert code == 2 and "corrupt or incomplete" in out.err and "Traceback" not in out.err


def test_unwritable_out_fails_before_anything_runs(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, out = _bench(capsys, "--out", str(blocker / "results"))
    assert code == 2 and "cannot write to --out" in out.err and "Traceback" not in out.err


def test_a_backend_failing_at_run_time_gives_exit_1_and_the_others_go_on(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(registry.ENGINES, "boom", fake_engines.spec("boom", fail_at=1))
    monkeypatch.setitem(registry.ENGINES, "calm", fake_engines.spec("calm"))
    monkeypatch.setattr(registry, "available", lambda name: (True, ""))
    code, out = _bench(capsys, "--backends", "boom,calm", "--new-tokens", "4", "--out", str(tmp_path))
    assert code == 1
    with (tmp_path / "runs.csv").open() as f:
        statuses = {row["backend"]: row["status"] for row in csv.DictReader(f)}
    assert statuses == {"boom": "error", "calm": "ok"}


@pytest.mark.parametrize(
    "command, stuck, extra, written",
    [
        ("bench", {"load_s": 600.0}, [], "runs.csv"),  # hangs while loading
        # scored teacher-forced: it hangs at position 10, past the bench's 4 tokens
        ("quality", {"hang_at": 10}, ["--max-length", "16", "--stride", "8", "--reference", "calm"], "quality.csv"),
    ],
)
def test_timeout_ends_a_hang_at_load_and_while_scoring(capsys, tmp_path, monkeypatch, command, stuck, extra, written):
    """--timeout bounded only the wait for a token: a worker that hung while loading or scoring a
    perplexity window held the command for 900 s, whatever --timeout said."""
    import threading

    from tests.conftest import live_workers

    monkeypatch.setitem(registry.ENGINES, "stuck", fake_engines.spec("stuck", **stuck))
    monkeypatch.setitem(registry.ENGINES, "calm", fake_engines.spec("calm"))
    monkeypatch.setattr(registry, "available", lambda name: (True, ""))
    # main() runs on a thread here: no PNG (Qt makes its application in the main thread only)
    monkeypatch.setattr(plots, "render_png", lambda figure, path, *size: path)
    args = [command, "--model", "random:tiny", "--backends", "stuck,calm", "--repeats", "1", "--warmup", "0"]
    args += ["--prompt-tokens", "4", "--new-tokens", "4", "--timeout", "1", "--out", str(tmp_path), *extra]
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(code=main(args)), daemon=True)
    thread.start()
    thread.join(60)  # far under the 900 s default: the test fails instead of holding the suite
    assert not thread.is_alive(), "still waiting for the hung worker"
    err = capsys.readouterr().err
    assert box["code"] == 1, err
    with (tmp_path / written).open() as f:
        rows = {row["backend"]: row for row in csv.DictReader(f)}
    assert rows["stuck"]["status"] == "timeout" and "no answer for 1 s" in rows["stuck"]["error"]
    assert rows["calm"]["status"] == "ok"
    assert not live_workers()


def test_backends_lists_every_engine_with_reasons(capsys):
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    for name in registry.names():
        assert name in out
    if not cuda_available():  # a GPU machine lists the CUDA engines as available
        assert "torch-static-cuda" in out and "needs a CUDA GPU" in out


def test_bench_end_to_end_through_main_py(tmp_path):
    out_dir = tmp_path / "results"
    proc = subprocess.run(
        [
            sys.executable,
            "main.py",
            "bench",
            "--model",
            "random:tiny",
            "--backends",
            "hf,hf-int8",
            "--prompt-tokens",
            "20",
            "--new-tokens",
            "12",
            "--repeats",
            "2",
            "--warmup",
            "1",
            "--out",
            str(out_dir),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "random weights - timing only" in proc.stdout
    assert "hf-int8" in proc.stdout and "reference" in proc.stdout
    with (out_dir / "runs.csv").open() as f:
        runs = list(csv.DictReader(f))
    with (out_dir / "tokens.csv").open() as f:
        tokens = list(csv.DictReader(f))
    assert len(runs) == 6 and all(r["status"] == "ok" and r["weights"] == "random" for r in runs)
    assert len(tokens) == 6 * 12
    assert {r["dtype"] for r in runs} == {"fp32", "int8"}
    assert (out_dir / "environment.json").exists()


def test_bench_concurrency_prints_the_load_table(capsys, tmp_path, tiny_model):
    from tests.fake_servers import fake_vllm_server

    with fake_vllm_server(FAKE_VLLM_STEP_MS="5", FAKE_VLLM_PER_SEQ_MS="1") as server:
        code, out = _bench(
            capsys,
            "--backends",
            "numpy,remote",
            "--remote-url",
            server.base_url + "/v1",
            "--concurrency",
            "1,2",
            "--new-tokens",
            "6",
            "--prompt-tokens",
            "8",
            "--slo-ttft-ms",
            "5000",
            "--out",
            str(tmp_path),
        )
    assert code == 0, out.err
    assert "load: 8-token prompts, 6 new tokens, levels 1, 2" in out.out
    assert "goodput req/s" in out.out and "TTFT <= 5000 ms" in out.out
    rows = list(csv.DictReader((tmp_path / "load.csv").open()))
    assert {(r["backend"], r["concurrency"], r["kind"]) for r in rows} == {
        ("numpy", "1", "batch 1"),
        ("remote", "1", "server"),
        ("remote", "2", "server"),
    }


CHART_RUNS = {
    "quality": ["--new-tokens", "3", "--max-length", "32", "--stride", "32"],
    "sweep": ["--prompt-tokens", "4", "--new-tokens", "3"],
    "profile": ["--new-tokens", "3"],
}


def _chart_command(command: str, out: Path) -> list[str]:
    """A cheap run of a command that draws charts: the null engine on random:tiny, one run."""
    common = ["--model", "random:tiny", "--backends", "null", "--repeats", "1", "--warmup", "0", "--threads", "1"]
    return [command, *common, "--out", str(out), *CHART_RUNS[command]]


@pytest.mark.parametrize("command", list(CHART_RUNS))
def test_a_chart_that_cannot_render_is_one_line_and_the_numbers_stay(capsys, tmp_path, monkeypatch, command):
    """Without pyqtgraph or Qt (a headless GPU server, say) each command says in one line that its charts
    were skipped and why; the results are on disk, no chart is, and the command exits 0."""

    def no_charts(*_args, **_kwargs):
        raise ModuleNotFoundError("No module named 'pyqtgraph'")

    monkeypatch.setattr("whistle_stop.backends.report.plots.render_png", no_charts)
    from whistle_stop.backends.machine.bandwidth import Bandwidth
    from whistle_stop.backends.machine.compute_peak import ComputePeaks

    fixed = Bandwidth(10.0, 9.0, 1 << 30, 1, 5, "test cpu", "now")  # the probes are benchmarks: fixed answers
    peaks = ComputePeaks(peaks={"fp32": {"gops": 0.5, "median_gops": 0.4, "isa": "test fma"}}, threads=1, cpu="test")
    monkeypatch.setattr("whistle_stop.backends.runs.sweep.probe_bandwidth", lambda *a, **k: fixed)
    monkeypatch.setattr("whistle_stop.backends.runs.sweep.cached_bandwidth", lambda *a, **k: fixed)
    monkeypatch.setattr("whistle_stop.backends.runs.profile.fresh_bandwidth", lambda *a, **k: fixed)
    monkeypatch.setattr("whistle_stop.backends.runs.profile.probe_compute_peaks", lambda *a, **k: peaks)
    out = tmp_path / command
    code = main(_chart_command(command, out))
    err = capsys.readouterr().err
    assert code == 0, err
    said = [line for line in err.splitlines() if "charts" in line]
    assert said == ["charts skipped: No module named 'pyqtgraph'"], err
    assert (out / "runs.csv").exists() and not list(out.glob("*.png"))
    assert command != "quality" or (out / "quality.csv").exists()
    assert command != "profile" or (out / "breakdown.csv").exists()


def test_a_qt_that_cannot_start_skips_the_charts_in_one_line_and_the_command_ends(tmp_path):
    """Qt aborts the process when no platform plugin starts (a DISPLAY that does not answer, say): the
    command ran to its end anyway, its records written, and said why in one line (it died of SIGABRT)."""
    import os

    out = tmp_path / "quality"
    env = {**os.environ, "QT_QPA_PLATFORM": "no-such-platform"}
    proc = subprocess.run(
        [sys.executable, "main.py", *_chart_command("quality", out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "charts" in line]
    assert len(said) == 1 and said[0].startswith("charts skipped: Qt cannot start here"), proc.stderr
    assert "no-such-platform" in said[0] and "QT_QPA_PLATFORM=offscreen" in said[0]
    assert (out / "quality.csv").exists() and not list(out.glob("*.png"))
    assert "perplexity" in proc.stdout  # the table after the charts was printed


def test_a_report_where_qt_cannot_start_is_one_line_and_exit_2(tmp_path):
    """The HTML report embeds its charts: where Qt cannot start it aborted the process (SIGABRT, a core);
    now it is refused in one line, and the Markdown page, which has no chart, is still written."""
    import os

    folder = tmp_path / "bench"
    args = ["--model", "random:tiny", "--backends", "numpy", "--new-tokens", "2", "--repeats", "1", "--warmup", "0"]
    assert main(["bench", *args, "--out", str(folder)]) == 0
    env = {**os.environ, "QT_QPA_PLATFORM": "no-such-platform"}
    command = [sys.executable, "main.py", "report", str(folder), "--out", str(tmp_path / "report")]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: the HTML report cannot draw its charts: Qt cannot start here"), line
    assert not (tmp_path / "report").exists()
    markdown = [sys.executable, "main.py", "report", str(folder), "--markdown", str(tmp_path / "run.md")]
    assert subprocess.run(markdown, cwd=ROOT, env=env, capture_output=True, timeout=300).returncode == 0
    assert (tmp_path / "run.md").exists()


def test_bench_summary_gives_the_interval_its_true_level():
    """Six runs: min..max at 96.9%, not a bare 95% nor "min-max with 5 runs or fewer"."""
    from io import StringIO
    from types import SimpleNamespace

    from rich.console import Console

    from tests.test_stats import _run
    from whistle_stop.backends.cli.bench_command import print_summary
    from whistle_stop.backends.runs.bench import BenchConfig
    from whistle_stop.backends.runs.result import BenchResult

    config = BenchConfig(model="random:tiny", backends=("a",), new_tokens=4)
    result = BenchResult(
        config,
        SimpleNamespace(label="random:tiny", is_random=True),
        [1, 2, 3, 4],
        [_run("a", r, 2.0 + r) for r in range(6)],
    )
    console = Console(file=StringIO(), width=400)
    print_summary(result, console)
    printed = " ".join(console.file.getvalue().split())
    assert "4.50 [2.00–7.00]" in printed and "its confidence level with 6 runs: 96.9% (min–max)" in printed


def _interrupt_at_measured_run(monkeypatch, which: int) -> None:
    """Ctrl+C once the `which`-th measured run is recorded: KeyboardInterrupt in the main thread (as
    SIGINT raises it), while the session's thread holds still until the command has cancelled, so
    exactly `which` measured runs finish, however fast the engine."""
    import _thread
    import threading

    from whistle_stop.backends.results.summary import is_measured
    from whistle_stop.backends.runs.events import RunRecorded
    from whistle_stop.backends.runs.orchestrator import Orchestrator

    init, cancel = Orchestrator.__init__, Orchestrator.cancel
    cancelled, seen = threading.Event(), []

    def initialising(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        emit = self.emit

        def emitting(event) -> None:
            emit(event)
            if isinstance(event, RunRecorded) and is_measured(event.record):
                seen.append(event.record)
                if len(seen) == which:
                    _thread.interrupt_main()
                    assert cancelled.wait(60), "the command did not cancel"

        self.emit = emitting

    def cancelling(self) -> None:
        cancelled.set()
        cancel(self)

    monkeypatch.setattr(Orchestrator, "__init__", initialising)
    monkeypatch.setattr(Orchestrator, "cancel", cancelling)


@pytest.mark.parametrize(
    "command, extra, which, kept",
    [
        ("bench", ["--repeats", "3"], 2, "2 of 3 planned runs kept"),
        # Two cells of two runs: the first cell is complete, the second is run again on resume.
        (
            "sweep",
            ["--repeats", "2", "--prompt-tokens", "4", "--new-tokens", "3,5"],
            3,
            "2 of 4 planned runs kept (1 of 2 cells complete)",
        ),
        (
            "quality",
            ["--repeats", "2", "--new-tokens", "3", "--max-length", "32", "--stride", "32"],
            1,
            "1 of 2 planned runs kept, perplexity of 0 of 1 engines",
        ),
        ("profile", ["--repeats", "2", "--new-tokens", "3"], 1, "1 of 2 planned runs kept, 0 of 1 engines profiled"),
    ],
)
def test_ctrl_c_keeps_the_finished_runs_says_how_many_and_exits_130(
    capsys, tmp_path, monkeypatch, command, extra, which, kept
):
    """`bench && report` must tell a cancelled run from a complete one: exit 130 (SIGINT's), and
    the line says what of the plan was kept and where."""
    from whistle_stop.backends.machine.bandwidth import Bandwidth
    from whistle_stop.backends.results.export import read_csv

    fixed = Bandwidth(10.0, 9.0, 1 << 30, 1, 5, "test cpu", "now")  # the probes are benchmarks: a fixed answer
    monkeypatch.setattr("whistle_stop.backends.runs.sweep.probe_bandwidth", lambda *a, **k: fixed)
    monkeypatch.setattr("whistle_stop.backends.runs.sweep.cached_bandwidth", lambda *a, **k: fixed)
    monkeypatch.setattr("whistle_stop.backends.runs.profile.fresh_bandwidth", lambda *a, **k: fixed)
    _interrupt_at_measured_run(monkeypatch, which)
    out = tmp_path / command
    code = main(
        [
            command,
            "--model",
            "random:tiny",
            "--backends",
            "null",
            "--warmup",
            "0",
            "--threads",
            "1",
            "--out",
            str(out),
            *extra,
        ]
    )
    err = " ".join(capsys.readouterr().err.split())
    assert code == 130, err
    assert f"cancelled: {kept}; partial results written to {out}" in err
    # the folder holds what the line says it kept (a sweep's half cell is not: a resume runs it again)
    kept_runs = int(kept.split()[0])
    assert sum(row["status"] == "ok" and row["is_warmup"] == "false" for row in read_csv(out / "runs.csv")) == kept_runs


def test_a_sweep_cancelled_before_its_first_cell_finished_prints_no_empty_table(capsys, tmp_path, monkeypatch):
    from whistle_stop.backends.machine.bandwidth import Bandwidth

    fixed = Bandwidth(10.0, 9.0, 1 << 30, 1, 5, "test cpu", "now")
    monkeypatch.setattr("whistle_stop.backends.runs.sweep.probe_bandwidth", lambda *a, **k: fixed)
    monkeypatch.setattr("whistle_stop.backends.runs.sweep.cached_bandwidth", lambda *a, **k: fixed)
    _interrupt_at_measured_run(monkeypatch, 1)
    args = ["sweep", "--model", "random:tiny", "--backends", "null", "--warmup", "0", "--threads", "1"]
    args += ["--repeats", "2", "--prompt-tokens", "4", "--new-tokens", "3", "--out", str(tmp_path / "s")]
    assert main(args) == 130
    out = capsys.readouterr().out
    assert "no cell has a measured run" in out and "prompt" not in out


@pytest.mark.parametrize("command", ["bench", "quality", "profile", "sweep"])
def test_no_command_s_default_repeats_set_off_its_own_few_repeats_caveat(command):
    """quality ran 2 repeats by default, and its verdict then said 'fewer than 3 repeats; use --repeats 5'."""
    from whistle_stop.backends.cli.parser import build_parser
    from whistle_stop.backends.results.verdict import MIN_REPEATS

    assert build_parser().parse_args([command]).repeats >= MIN_REPEATS


def test_more_threads_than_cpus_is_said_as_the_engines_own_oversubscription(monkeypatch):
    """--threads above the logical CPUs: the warning names the threads, not "other processes"."""
    import io

    from rich.console import Console

    from whistle_stop.backends.cli import bench_command

    monkeypatch.setattr(bench_command.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(bench_command.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    err = Console(file=io.StringIO(), width=300)
    bench_command._warn_if_busy(999, err)
    text = err.file.getvalue()
    assert "--threads 999 on 2 logical CPUs" in text and "other processes" not in text
    quiet = Console(file=io.StringIO(), width=300)
    bench_command._warn_if_busy(2, quiet)
    assert quiet.file.getvalue() == ""
