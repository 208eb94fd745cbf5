"""`report RESULTS_DIR --markdown FILE`: a dated run as Markdown for docs/measurements/, generated
from the records: environment, command, the verdict and the summary table with its intervals."""

from whistle_stop.backends.cli.main import main
from whistle_stop.backends.results.export import write_results
from whistle_stop.backends.results.verdict import verdict

from .run_records import run_record


def _run(backend, repeat, itl, dtype="fp32"):
    return run_record(
        backend,
        repeat,
        itl=itl,
        model="random:tiny",
        weights="random",
        dtype=dtype,
        threads=2,
        prompt_tokens=50,
        new_tokens=100,
        import_s=1.0,
        load_s=0.1,
        ttft_ms=50.0,
        peak_rss_mb=300.0,
        reference="hf",
        agree_tokens=100 if dtype == "fp32" else 41,
        cold_start_s=1.0 if repeat == 1 else None,
        build_s=18.6 if backend == "onnx-int8" else 0.0,
    )


ENVIRONMENT = {
    "app": {"name": "whistle-stop", "version": "0.1.0", "git_commit": "abc1234"},
    "machine": {
        "cpu": "AMD EPYC 7B13",
        "cpu_flags": ["avx2", "fma", "f16c"],
        "cores_logical": 2,
        "cores_physical": 2,
        "memory_gb": 23.5,
        "gpus": [],
        "os": "Linux-6.1-x86_64",
        "hostname": "dev",
    },
    "python": "3.11.7",
    "libraries": {
        "numpy": "2.4.6",
        "torch": "2.13.0+cpu",
        "transformers": "5.24.0",
        "onnxruntime": "1.32.0",
        "onnx": "1.19.0",
        "pyqtgraph": "0.14.0",
    },
    "model": {
        "id": "random:gpt2",
        "weights": "random",
        "weights_sha256_16": "0123456789abcdef",
        "n_layer": 12,
        "n_embd": 768,
    },
    "settings": {
        "model": "random:gpt2",
        "backends": ["hf", "onnx-int8"],
        "prompt": None,
        "prompt_tokens": 50,
        "new_tokens": 100,
        "sampling": {"decoding": "greedy", "temperature": 1.0, "top_k": 0, "top_p": 1.0, "seed": 0},
        "repeats": 5,
        "warmup": 1,
        "threads": 2,
        "mode": "fair",
        "reference": None,
    },
    "prompt_tokens": 50,
    "threads_resolved": 2,
    "threads_resolution": {"source": "--threads"},
    "reference": "hf",
    "finished_at": "2026-12-01T10:00:00+0000",
    "harness": {"null_itl_us_median": 40.0},
}


def test_markdown_page_from_a_scripted_results_folder(tmp_path, monkeypatch, capsys):
    runs = [_run("hf", r, 40.0 + r) for r in range(1, 6)] + [
        _run("onnx-int8", r, 6.0 + r / 10, "int8") for r in range(1, 6)
    ]
    folder = tmp_path / "results"
    write_results(folder, runs, [], ENVIRONMENT)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "2026-12-01-epyc.md"
    assert main(["report", str(folder), "--markdown", str(out)]) == 0
    assert not (tmp_path / "report").exists()  # --markdown alone writes no HTML
    page = out.read_text(encoding="utf-8")
    assert page.startswith("# 2026-12-01: random:gpt2, 2 engines")
    for expected in (
        "| CPU | AMD EPYC 7B13, 2 physical / 2 logical cores |",
        "| CPU flags | avx2 fma f16c |",
        "| memory | 23.5 GB |",
        "| OS | Linux-6.1-x86_64 |",
        "onnxruntime 1.32.0",
        "torch 2.13.0+cpu",
        "| commit | abc1234",
        "random weights - timing only",
        "2 threads (--threads)",
        "| finished | 2026-12-01T10:00:00+0000 |",
        "python main.py bench --model random:gpt2 --backends hf,onnx-int8 --prompt-tokens 50 "
        "--new-tokens 100 --repeats 5 --warmup 1 --threads 2",
        "## Verdict",
        "## Summary",
        "| build s |",
        "5 runs: 93.8% (min–max)",
        "harness cost per token (null engine): 40 us",
    ):
        assert expected in page, expected
    assert "pyqtgraph" not in page  # not a library of these engines
    for line in verdict(runs, reference="hf").lines():
        assert line in page
    assert "one-time build 18.60 s" in page


def test_markdown_needs_one_bench_folder(tmp_path, capsys):
    folder = tmp_path / "results"
    write_results(folder, [_run("hf", 1, 40.0)], [], ENVIRONMENT)
    assert main(["report", str(folder), str(folder), "--markdown", str(tmp_path / "x.md")]) == 2
    assert "--markdown takes one results folder" in capsys.readouterr().err


def test_markdown_page_of_a_profile_folder_has_its_tables_and_options(tmp_path):
    from whistle_stop.backends.profile.breakdown import EngineProfile, PhaseBreakdown
    from whistle_stop.backends.profile.files import write_profile

    settings = dict(ENVIRONMENT["settings"], backends=["native"], engine_options={"native": {"kv": "int8"}})
    runs = [_run("native", r, 10.0) for r in range(1, 6)]
    folder = tmp_path / "profile"
    write_results(folder, runs, [], dict(ENVIRONMENT, settings=settings))
    decode = PhaseBreakdown("decode", 99, 10.5, {"matmul": 9.0, "attention": 1.0})
    prefill = PhaseBreakdown("prefill", 1, 60.0, {"matmul": 55.0})
    profile = EngineProfile(
        "native",
        precision="fp32",
        profiler="the native step's own timers",
        ms_per_token=10.0,
        ttft_ms=60.0,
        bytes_per_token=5e8,
        probe_gb_s=50.0,
        probe_compute_gflops=200.0,
        prefill_arithmetic="fp32",
        peak_gops=234.0,
        prefill_flops=8.6e9,
        prefill_bytes=5e8,
        decode=decode,
        prefill=prefill,
    )
    write_profile(folder, [profile], settings)
    out = tmp_path / "profile.md"
    assert main(["report", str(folder), "--markdown", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "python main.py profile --model random:gpt2 --backends native" in page
    assert ", each engine alone (profile), reference" in page and "fair mode" not in page  # not interleaved
    assert page.split("```")[1].strip().endswith("--native-kv int8")  # the option that was not the default
    assert "## Profile: decode, ms per token" in page
    assert "| native | 10.00 | - | 10.00 | 50.0 | 100% | 200 |" in page  # the floor: 500 MB at 50 GB/s
    assert "## Profile: prefill, ms for the prompt" in page
    assert "| native | 60.0 | 60.0 | 36.8 |" in page  # 8.6 GFLOP at 234 G/s


def test_markdown_to_a_folder_is_one_line(tmp_path, capsys):
    folder = tmp_path / "results"
    write_results(folder, [_run("hf", 1, 40.0)], [], ENVIRONMENT)
    assert main(["report", str(folder), "--markdown", str(tmp_path)]) == 2  # was IsADirectoryError
    err = capsys.readouterr().err
    assert "cannot write --markdown" in err and err.count("\n") == 1


def test_a_cancelled_folder_says_what_it_kept_atop_its_page(tmp_path):
    """A folder whose command was cancelled holds fewer runs than its settings planned: the page says
    so in the command's own words, so a partial run never reads as a complete one."""
    runs = [_run("hf", r, 40.0 + r) for r in range(1, 4)] + [_run("onnx-int8", r, 6.0, "int8") for r in (1, 2)]
    folder = write_results(tmp_path / "results", runs, [], {**ENVIRONMENT, "cancelled": True})[0].parent
    out = tmp_path / "page.md"
    assert main(["report", str(folder), "--markdown", str(out)]) == 0
    assert "**cancelled: 5 of 10 planned runs kept; partial results**" in out.read_text(encoding="utf-8")
