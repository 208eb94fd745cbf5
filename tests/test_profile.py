"""The `profile` command: breakdowns that add up, each profiler adapter on a real small run,
valid Chrome traces, and profiled runs kept out of the benchmark records."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.fake_engines import phased_spec
from whistle_stop.backends import registry
from whistle_stop.backends.machine.bandwidth import Bandwidth
from whistle_stop.backends.machine.compute_peak import ComputePeaks
from whistle_stop.backends.profilers.categories import KERNELS, Category, OpFamily, classify
from whistle_stop.backends.results.roofline import prefill_bytes, prefill_flops
from whistle_stop.backends.runs.config import BenchConfig
from whistle_stop.backends.runs.profile import ProfileSession
from whistle_stop.backends.status import RunStatus

BANDWIDTH = Bandwidth(gb_s=10.0, median_gb_s=10.0, bytes=1, threads=1, passes=1, cpu="test", measured_at="now")
PEAKS = ComputePeaks(peaks={"fp32": {"gops": 0.5, "median_gops": 0.4, "isa": "test fma"}}, threads=1, cpu="test")


def _profile(tmp_path, backends, specs=None, new_tokens=12, repeats=1):
    config = BenchConfig(
        model="random:tiny",
        backends=tuple(backends),
        prompt="Hello world, this is a test",
        new_tokens=new_tokens,
        repeats=repeats,
        warmup=1,
        threads=1,
    )
    with registry.use((specs or {}).values()):  # the session takes its engines' specs now
        session = ProfileSession(
            config,
            tmp_path / "prof",
            bandwidth=lambda threads, n_bytes, device="cpu": BANDWIDTH,
            compute_peaks=lambda threads: PEAKS,
        )
    return session.run()


def _trace_events(path) -> list[dict]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return data["traceEvents"] if isinstance(data, dict) else data


def test_known_costs_land_in_their_categories(tmp_path):
    result = _profile(tmp_path, ["phased"], {"phased": phased_spec()})
    (profile,) = result.profiles
    assert profile.status == "ok", profile.error
    decode, prefill = profile.decode, profile.prefill
    ms = lambda b, c: b.categories[c.value]  # noqa: E731
    # decode: linear 4 ms, attention 2 ms, 1 ms of Python (generous bounds: these are sleeps)
    assert 3.6 < ms(decode, Category.MATMUL) < 5.5 and 1.8 < ms(decode, Category.ATTENTION) < 3.0
    assert 0.8 < ms(decode, Category.FRAMEWORK) < 2.0
    assert 7.6 < ms(prefill, Category.MATMUL) < 10.0
    for phase in (decode, prefill):  # the categories add up to the measured step
        assert abs(phase.categories[Category.UNATTRIBUTED.value]) <= 0.1 * phase.step_ms
        assert phase.attributed_ms == pytest.approx(phase.step_ms, rel=0.1)
    assert profile.floor_ms == pytest.approx(1e6 / 10e9 * 1e3)  # 1 MB per token at 10 GB/s
    assert profile.ms_per_token and profile.profiled_ms_per_token and profile.overhead_pct is not None
    # the profiled run is never a benchmark record
    assert [r.run_id for r in result.bench.runs] == ["phased/w1", "phased/r1"]
    names = {e["name"] for e in _trace_events(profile.trace_file)}
    assert {"linear", "attention", "whistle_stop::decode", "whistle_stop::prefill"} <= names
    assert profile.top_ops[0].name == "linear" and profile.top_ops[0].phase == "decode"


def test_the_prefill_is_held_to_its_roofline(tmp_path):
    """TTFT against the larger of the prompt's FLOPs over its arithmetic's peak (here fp32's: the
    phased engine says none, and fp32 is its precision's) and its bytes over the bandwidth; the peak
    and its instructions go to environment.json, the figures to the prefill table and the files."""
    from whistle_stop.backends.profile.files import read_profile, write_profile
    from whistle_stop.backends.profile.table import PREFILL_HEADERS, prefill_row

    result = _profile(tmp_path, ["phased"], {"phased": phased_spec()})
    (profile,) = result.profiles
    prompt = len(result.bench.prompt_ids)
    config = result.bench.model.gpt2_config
    assert profile.prefill_arithmetic == "fp32" and profile.peak_gops == 0.5 and profile.peak_isa == "test fma"
    assert profile.prefill_flops == prefill_flops(config, prompt)
    assert profile.prefill_bytes == prefill_bytes(1_000_000, 0, prompt)  # the phased engine's 1 MB, no KV
    compute_ms, memory_ms = profile.prefill_flops / 0.5e6, profile.prefill_bytes / 10e6
    assert profile.roofline_ms == pytest.approx(max(compute_ms, memory_ms))
    assert profile.ttft_share == pytest.approx(profile.roofline_ms / profile.ttft_ms)
    assert result.bench.environment["compute_peaks"]["peaks"]["fp32"]["isa"] == "test fma"
    row = dict(zip(PREFILL_HEADERS, prefill_row(profile)))
    assert row["roofline"] == f"{profile.roofline_ms:.1f}" and row["roofline share"].endswith("%")
    assert row["peak G/s"] == "0" and row["arithmetic"] == "fp32"
    write_profile(tmp_path / "files", result.profiles, {})
    (read_back,) = read_profile(tmp_path / "files")
    assert read_back.roofline_ms == pytest.approx(profile.roofline_ms)
    assert "ttft_share" in (tmp_path / "files" / "breakdown.csv").read_text().splitlines()[0]


def test_a_slower_phase_of_the_cores_shows_beside_the_roofline_share():
    """The roofline holds a prefill to the machine's best peak (a slow phase only lowers one); where
    this profile's own probe read lower, the table shows it and the share it would give, as decode's
    floor share shows its slower bandwidth probe."""
    from whistle_stop.backends.profile.breakdown import EngineProfile
    from whistle_stop.backends.profile.table import PREFILL_HEADERS, prefill_row

    profile = EngineProfile("e", ttft_ms=20.0, prefill_flops=8e9, prefill_bytes=1e6, probe_gb_s=50.0)
    profile.peak_gops, profile.peak_probed_gops = 800.0, 500.0
    assert profile.ttft_share == pytest.approx(10.0 / 20.0)
    assert profile.ttft_share_at_probe == pytest.approx(16.0 / 20.0)
    row = dict(zip(PREFILL_HEADERS, prefill_row(profile)))
    assert row["roofline share"] == "50% (80%)" and row["peak G/s"] == "800 (500)"
    profile.peak_probed_gops = 790.0  # within the probe's own noise: one figure
    row = dict(zip(PREFILL_HEADERS, prefill_row(profile)))
    assert row["roofline share"] == "50%" and row["peak G/s"] == "800"
    bytes_bound = EngineProfile("b", ttft_ms=20.0, prefill_flops=1e6, prefill_bytes=1.8e8, probe_gb_s=50.0)
    bytes_bound.peak_gops, bytes_bound.peak_probed_gops = 800.0, 500.0  # the peak moved; the bytes' time did not
    row = dict(zip(PREFILL_HEADERS, prefill_row(bytes_bound)))
    assert row["roofline share"] == "18%" and row["peak G/s"] == "800 (500)"  # not "18% (18%)"


@pytest.mark.parametrize(
    "engine, expected_events",
    [
        ("hf", "aten::"),
        ("torch-static", "whistle_stop_kernels::gemv"),
        ("torch-static-bf16", "whistle_stop_kernels::gemv"),
        ("numpy", "linear"),
        ("onnx", "model_run"),
        ("onnx-concat", "model_run"),
        ("nanogpt", "aten::"),
    ],
)
def test_each_profiler_adapter_explains_a_real_run(tmp_path, engine, expected_events):
    if not registry.available(engine)[0]:
        pytest.skip(f"{engine} unavailable")
    result = _profile(tmp_path, [engine], new_tokens=10)
    (profile,) = result.profiles
    assert profile.status == "ok", profile.error
    decode = profile.decode
    assert decode.categories[Category.MATMUL.value] > 0
    assert sum(decode.categories[c.value] for c in KERNELS) > 0
    assert abs(decode.categories[Category.UNATTRIBUTED.value]) <= 0.1 * decode.step_ms
    assert profile.top_ops and all(op.ms_per_step >= 0 for op in profile.top_ops)
    assert any(expected_events in e.get("name", "") for e in _trace_events(profile.trace_file))


def test_each_engine_is_judged_against_the_faster_probe_around_it(tmp_path):
    """The bandwidth moves between minutes: every engine gets a probe just before its runs and
    one just after it closes, of its own bytes per token, and its floor uses the faster of the two."""
    from dataclasses import replace

    rates = iter([10.0, 20.0, 40.0, 5.0])  # engine one: 10 then 20; engine two: 40 then 5
    gemm = iter([90.0, 60.0, 0.0, 0.0])  # the cores: fast then slow; engine two's probes (older entries) without
    probes = []

    sizes = []

    def probe(threads, n_bytes, device="cpu"):
        sizes.append(n_bytes)
        probes.append(
            replace(BANDWIDTH, gb_s=next(rates), compute_gflops=next(gemm), measured_at=f"probe {len(probes) + 1}")
        )
        return probes[-1]

    config = BenchConfig(
        model="random:tiny", backends=("one", "two"), prompt="Hello world", new_tokens=6, repeats=1, warmup=0, threads=1
    )
    specs = {"one": phased_spec("one"), "two": phased_spec("two")}
    with registry.use(specs.values()):
        result = ProfileSession(config, tmp_path / "prof", bandwidth=probe).run()
    one, two = result.profiles
    assert (one.probe_gb_s, two.probe_gb_s) == (20.0, 40.0)
    assert (one.slower_probe_gb_s, two.slower_probe_gb_s) == (10.0, 5.0)  # how far the machine moved
    assert one.floor_ms == pytest.approx(2 * two.floor_ms)
    assert one.floor_share_at_slower == pytest.approx(2 * one.floor_share)  # the floor the slower probe would set
    assert two.floor_share_at_slower == pytest.approx(8 * two.floor_share)
    assert "probe 2" in one.probe_label and "probe 3" in two.probe_label
    # each probe reads what its engine reads per token: a smaller working set streams faster
    assert sizes == [int(one.bytes_per_token)] * 2 + [int(two.bytes_per_token)] * 2 and sizes[0] > 0
    assert result.bandwidth.gb_s == 40.0  # environment.json: the session's fastest probe
    # the faster of its two; none measured: unknown
    assert (one.probe_compute_gflops, two.probe_compute_gflops) == (90.0, None)
    from whistle_stop.backends.profile.table import HEADERS, profile_row

    gflops = HEADERS.index("GEMM GFLOP/s")
    assert profile_row(one)[gflops] == "90" and profile_row(two)[gflops] == "-"
    assert profile_row(one)[HEADERS.index("probe GB/s")] == "20.0 (10.0)"
    known = replace(one, ms_per_token=one.floor_ms * 4, floor_note="")  # a floor share of 25%; 50% at the slower probe
    assert profile_row(known)[HEADERS.index("floor share")] == "25% (50%)"
    steady = replace(known, slower_probe_gb_s=one.probe_gb_s)  # two probes that agree: one figure each
    assert [profile_row(steady)[HEADERS.index(h)] for h in ("probe GB/s", "floor share")] == ["20.0", "25%"]


def test_a_cuda_engines_floor_is_probed_on_its_gpu(tmp_path):
    """A CUDA engine streams its weights from the GPU's memory: its floor's probes must read there
    (a host probe gave an H100 engine a 'floor' it beat by 43%), and the run's figure stays the host's."""
    from rich.console import Console

    from tests.fake_engines import spec
    from whistle_stop.backends.cli.profile_command import print_profile

    asked = []
    host = replace(BANDWIDTH, gb_s=20.0)
    gpu = replace(BANDWIDTH, gb_s=3000.0, device="cuda", device_name="a test GPU", reader="sum")

    def probe(threads, n_bytes, device="cpu"):
        asked.append(device)
        return gpu if device == "cuda" else host

    config = BenchConfig(
        model="random:tiny",
        backends=("host", "gpu"),
        prompt="Hello world",
        new_tokens=6,
        repeats=1,
        warmup=0,
        threads=1,
    )
    specs = {"host": spec("host", decode_s=0.001), "gpu": spec("gpu", decode_s=0.001, device="cuda")}
    with registry.use(specs.values()):
        result = ProfileSession(config, tmp_path / "prof", bandwidth=probe).run()
    on_host, on_gpu = result.profiles
    assert asked == ["cpu", "cpu", "cuda", "cuda"]
    assert (on_host.probe_gb_s, on_gpu.probe_gb_s) == (20.0, 3000.0)
    assert on_gpu.floor_device == "cuda" and "on a test GPU" in on_gpu.probe_label
    assert result.bandwidth.gb_s == 20.0  # environment.json's figure is the host's, never the GPU's
    console = Console(record=True, width=400)
    print_profile(result, console)
    assert "a CUDA engine's by its GPU" in " ".join(console.export_text().split())  # the title wraps


def test_a_gpu_engine_gets_no_cpu_cache_note():
    from whistle_stop.backends.machine.bandwidth import fits_in_cache_note, last_level_cache_bytes

    size = last_level_cache_bytes()
    if not size:
        pytest.skip("this OS reports no CPU cache")
    assert fits_in_cache_note(size // 2, "cpu") and not fits_in_cache_note(size // 2, "cuda")


def test_engine_without_a_profiler_shows_its_total_and_harness(tmp_path):
    result = _profile(tmp_path, ["null"], new_tokens=10)
    (profile,) = result.profiles
    assert profile.profiler == "none" and "total and harness only" in profile.note and not profile.trace_file
    for phase in (profile.prefill, profile.decode):  # the engine's call and the harness make the whole step
        parts = phase.categories
        assert parts[Category.ENGINE_UNSPLIT.value] > 0 and parts[Category.HARNESS.value] > 0
        assert parts[Category.ENGINE_UNSPLIT.value] + parts[Category.HARNESS.value] == pytest.approx(phase.step_ms)
        assert parts[Category.UNATTRIBUTED.value] == pytest.approx(0, abs=1e-9)


def test_an_engine_with_its_own_loop_gets_its_ttft_as_prefill(tmp_path):
    """ctranslate2, the GenAI runtimes, remote and vLLM generate in their own loop: prefill's step is
    the TTFT (run start -> first token), all of it the engine's but the harness, nothing unattributed."""
    from tests.fake_engines import own_loop_spec

    specs = {"own": own_loop_spec("own", prefill_s=0.04, decode_s=0.005)}
    result = _profile(tmp_path, ["own"], specs, new_tokens=8)
    (profile,) = result.profiles
    assert profile.status == "ok", profile.error
    assert "own loop" in profile.note
    for phase, delay_ms in ((profile.prefill, 40), (profile.decode, 5)):
        engine = phase.categories[Category.ENGINE_UNSPLIT.value]
        assert delay_ms <= phase.step_ms < 3 * delay_ms, phase  # lower bound exact (busy waits), upper: no nonsense
        assert engine >= delay_ms - phase.categories[Category.HARNESS.value]
        assert abs(phase.categories[Category.UNATTRIBUTED.value]) <= 0.01 * phase.step_ms
        assert phase.attributed_ms == pytest.approx(phase.step_ms)


def test_categories_of_common_operations():
    assert classify("aten::addmm", OpFamily.TORCH) is Category.MATMUL
    assert classify("whistle_stop_kernels::gemv", OpFamily.TORCH) is Category.MATMUL  # the project's own decode kernel
    assert classify("aten::_scaled_dot_product_flash_attention_for_cpu", OpFamily.TORCH) is Category.ATTENTION
    assert classify("aten::index_copy_", OpFamily.TORCH) is Category.KV_CACHE
    assert classify("aten::view", OpFamily.TORCH) is Category.FRAMEWORK
    assert classify("TorchDynamo Cache Lookup", OpFamily.TORCH) is Category.FRAMEWORK
    assert classify("MatMulInteger", OpFamily.ORT) is Category.MATMUL
    assert classify("GroupQueryAttention", OpFamily.ORT) is Category.ATTENTION
    assert classify("SkipLayerNormalization", OpFamily.ORT) is Category.NORM_ACTIVATION
    assert classify("kv_write", OpFamily.NUMPY_FUNCTIONS) is Category.KV_CACHE


def test_profile_command_writes_tables_traces_and_charts(tmp_path, monkeypatch, capsys):
    from whistle_stop.backends.cli.main import main

    monkeypatch.setattr(
        "whistle_stop.backends.runs.profile.fresh_bandwidth", lambda threads, n_bytes=None, device="cpu": BANDWIDTH
    )
    monkeypatch.setattr("whistle_stop.backends.runs.profile.probe_compute_peaks", lambda threads, refresh: PEAKS)
    out = tmp_path / "prof"
    code = main(
        [
            "profile",
            "--model",
            "random:tiny",
            "--backends",
            "numpy,null",
            "--new-tokens",
            "8",
            "--repeats",
            "1",
            "--threads",
            "1",
            "--out",
            str(out),
        ]
    )
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "numpy" in printed.out and "matmul" in printed.out
    assert "roofline share" in printed.out and "fp32 0 G/s (test fma)" in printed.out
    for name in ("breakdown.csv", "top_ops.csv", "profile.json", "runs.csv", "profile_decode.png", "numpy.trace.json"):
        assert (out / name).exists(), name
    rows = (out / "breakdown.csv").read_text().splitlines()
    assert len(rows) == 1 + 4  # two engines x (prefill, decode)
    assert json.loads((out / "profile.json").read_text())["backends"][0]["floor_ms"] > 0


def _profile_command(out: Path, *extra: str) -> list[str]:
    args = ["--model", "random:tiny", "--backends", "null", "--new-tokens", "3", "--repeats", "1", "--threads", "1"]
    return ["profile", *args, "--out", str(out), *extra]


def test_profile_with_no_plots_writes_the_records_and_no_chart(tmp_path, monkeypatch, capsys):
    """--no-plots, as sweep's: the tables and records without profile_*.png (nor ones an earlier run left)."""
    from whistle_stop.backends.cli.main import main

    def no_render(*_args, **_kwargs):
        raise AssertionError("a chart was drawn with --no-plots")

    monkeypatch.setattr("whistle_stop.backends.runs.profile.fresh_bandwidth", lambda *a, **k: BANDWIDTH)
    monkeypatch.setattr("whistle_stop.backends.runs.profile.probe_compute_peaks", lambda *a, **k: PEAKS)
    monkeypatch.setattr("whistle_stop.backends.report.plots.render_png", no_render)
    monkeypatch.setattr("whistle_stop.backends.cli.charts.qt_platform_problem", no_render)
    out = tmp_path / "prof"
    out.mkdir()
    (out / "profile_decode.png").write_bytes(b"an earlier run's chart")
    code = main(_profile_command(out, "--no-plots"))
    err = capsys.readouterr().err
    assert code == 0, err
    for name in ("breakdown.csv", "top_ops.csv", "profile.json", "runs.csv", "environment.json"):
        assert (out / name).exists(), name
    assert not list(out.glob("*.png")) and "charts" not in err


def test_a_profile_chart_that_fails_halfway_leaves_no_chart(tmp_path, monkeypatch, capsys):
    """The decode chart drawn, the prefill chart failing: one line, and no lone decode chart beside the records."""
    from whistle_stop.backends.cli.main import main
    from whistle_stop.backends.report import plots

    drawn = plots.render_png

    def decode_only(figure, path, *args, **kwargs):
        if "prefill" in path.name:
            raise RuntimeError("out of pixels")
        return drawn(figure, path, *args, **kwargs)

    monkeypatch.setattr("whistle_stop.backends.runs.profile.fresh_bandwidth", lambda *a, **k: BANDWIDTH)
    monkeypatch.setattr("whistle_stop.backends.runs.profile.probe_compute_peaks", lambda *a, **k: PEAKS)
    monkeypatch.setattr(plots, "render_png", decode_only)
    out = tmp_path / "prof"
    code = main(_profile_command(out))
    err = capsys.readouterr().err
    assert code == 0, err
    assert [line for line in err.splitlines() if "charts" in line] == ["charts skipped: out of pixels"]
    assert (out / "breakdown.csv").exists() and not list(out.glob("*.png"))


def test_report_includes_a_profile_folder(tmp_path):
    """`report` on a profile folder: its tables (the command's rows), top operations and charts."""
    from whistle_stop.backends.profile.files import read_profile, write_profile
    from whistle_stop.backends.profile.table import profile_row
    from whistle_stop.backends.report.html import build_report
    from whistle_stop.backends.results.export import write_results

    result = _profile(tmp_path, ["phased"], {"phased": phased_spec()})
    folder = tmp_path / "prof"
    write_results(folder, result.bench.runs, result.bench.tokens, result.bench.environment)
    write_profile(folder, result.profiles, {"model": "random:tiny"})
    (read_back,) = read_profile(folder)
    assert profile_row(read_back) == profile_row(result.profiles[0])
    page = build_report([folder], tmp_path / "report").read_text(encoding="utf-8")
    assert "Profile: decode step" in page and "Most expensive operations" in page and "linear" in page
    assert (tmp_path / "report" / "1-profile_decode.png").exists() and "Where a decode step goes" in page


def test_a_speculative_engine_is_judged_per_decoded_token_and_says_how_it_beats_the_single_token_floor(tmp_path):
    """Its floor is the bytes target and draft read per decoded token (what it counted), beside its
    target's single-token floor, which it may run below; the profile says how."""
    from tests.fake_engines import burst_spec
    from whistle_stop.backends.profile.files import read_profile, write_profile
    from whistle_stop.backends.profile.table import speculation_line

    slow = replace(BANDWIDTH, gb_s=0.1, median_gb_s=0.1)  # 1 MB of weights: a 10 ms single-token floor
    config = BenchConfig(model="random:tiny", backends=("burst",), prompt_tokens=4, new_tokens=21, repeats=2, threads=1)
    with registry.use([burst_spec("burst", burst=4, step_s=0.02)]):
        session = ProfileSession(config, tmp_path / "prof", bandwidth=lambda threads, n_bytes, device="cpu": slow)
    (profile,) = session.run().profiles
    assert profile.status == "ok", profile.error
    assert profile.bytes_per_token == pytest.approx(250_000) and profile.single_token_bytes >= 1_000_000
    assert profile.floor_ms == pytest.approx(2.5) and profile.single_token_floor_ms >= 10.0
    assert profile.spec_tokens_per_pass == pytest.approx(4.0) and profile.spec_acceptance == pytest.approx(0.75)
    line = speculation_line(profile)
    assert "4.00 tokens per target pass" in line and "below the single-token floor" in line
    assert profile.ms_per_token < profile.single_token_floor_ms
    assert profile.profiled_ms_per_token > 3.0  # its TPOT too, not the ~0 median gap inside a burst
    write_profile(tmp_path / "again", [profile], {})
    (read,) = read_profile(tmp_path / "again")
    assert read.single_token_bytes == profile.single_token_bytes and speculation_line(read) == line


def test_a_run_that_failed_midway_is_no_figure_of_the_profile(tmp_path):
    """The profile's ms/token and TTFT are bench's: medians of the finished measured runs. A run that
    failed after a few slow tokens has timings, and must not move them."""
    from tests.fake_engines import spec

    odd = spec("odd", decode_s=0.002, odd_run=3, odd_decode_s=0.03, fail_at=6)  # warm-up, r1, then r2 fails
    result = _profile(tmp_path, ["odd"], {"odd": odd}, repeats=2)
    (profile,) = result.profiles
    runs = [r for r in result.bench.runs if not r.is_warmup]
    assert [r.status for r in runs] == [RunStatus.OK, RunStatus.ERROR] and runs[1].ms_per_token > 20
    assert profile.status == RunStatus.OK and profile.ms_per_token < 10  # r1's 2 ms, not a median with r2's 30


def test_each_engine_s_roofline_has_the_cores_probed_right_before_its_runs(tmp_path):
    """The cores' speed moves over minutes: each engine's bracket is the probe taken as its runs begin."""
    probes = iter([0.5, 0.25])

    def peaks(threads):
        entry = dict(PEAKS.peaks["fp32"], probed_gops=next(probes))
        return ComputePeaks(peaks={"fp32": entry}, threads=threads, cpu="test")

    config = BenchConfig(model="random:tiny", backends=("a", "b"), new_tokens=4, repeats=1, warmup=0, threads=1)
    with registry.use([phased_spec("a"), phased_spec("b")]):
        session = ProfileSession(
            config, tmp_path / "prof", bandwidth=lambda threads, n_bytes, device="cpu": BANDWIDTH, compute_peaks=peaks
        )
        result = session.run()
    assert [p.peak_probed_gops for p in result.profiles] == [0.5, 0.25]
    assert all(p.peak_gops == 0.5 for p in result.profiles)  # the machine's best, the same for every engine


def test_every_engine_s_roofline_uses_the_run_s_final_best_peak(tmp_path, monkeypatch):
    """The cores read 20, 15, then 25 G/s (a tiny model's scale) right before three engines' runs: a
    peak only rises with a probe, so once all have run every row is held to 25, as the table's title
    says, and the first two keep their own probes in brackets. A row judged against the best known at
    its own moment (20 for the first two) put engines of one table against different peaks. The files
    say what is shown."""
    from rich.console import Console

    from whistle_stop.backends.cli.profile_command import print_profile
    from whistle_stop.backends.machine import compute_peak
    from whistle_stop.backends.profile.files import read_profile, write_profile
    from whistle_stop.backends.profile.table import PREFILL_HEADERS, prefill_row

    monkeypatch.setattr(compute_peak, "CACHE_FILE", "compute-peaks-profile-test.json")  # no machine's best yet
    reads = iter([(20.0, "t1", 1), (15.0, "t2", 2), (25.0, "t3", 3)])

    def measure(threads, passes=5):
        gops, when, pid = next(reads)
        entry = {"gops": gops, "median_gops": gops - 1, "isa": "test fma", "measured_at": when, "probe_pid": pid}
        return ComputePeaks(peaks={"fp32": entry}, threads=threads, cpu="test", measured_at=when, probe_pid=pid)

    monkeypatch.setattr(compute_peak, "measure_compute_peaks", measure)
    config = BenchConfig(model="random:tiny", backends=("a", "b", "c"), new_tokens=4, repeats=1, warmup=0, threads=1)
    from whistle_stop.backends.runs.profile import ProfileEngineDone

    events = []
    with registry.use([phased_spec("a"), phased_spec("b"), phased_spec("c")]):
        session = ProfileSession(
            config, tmp_path / "prof", events.append, bandwidth=lambda threads, n_bytes, device="cpu": BANDWIDTH
        )
        result = session.run()  # the default probe: measured afresh, merged with the best so far
    assert [p.status for p in result.profiles] == ["ok"] * 3
    # the live rows (the window's): every row so far at the best peak so far, one peak per table
    live = [[p.peak_gops for p in e.so_far] for e in events if isinstance(e, ProfileEngineDone)]
    assert live == [[20.0], [20.0, 20.0], [25.0, 25.0, 25.0]]
    assert [p.peak_gops for p in result.profiles] == [25.0] * 3
    assert [p.peak_probed_gops for p in result.profiles] == [20.0, 15.0, 25.0]
    for p in result.profiles:
        assert p.roofline.bound == "compute"  # 1 MB at 10 GB/s is 0.1 ms, the FLOPs at 25 G/s 0.5 ms
        assert p.roofline_ms == pytest.approx(p.prefill_flops / 25e6)
        assert p.ttft_share == pytest.approx(p.roofline_ms / p.ttft_ms)
    first, second, third = (dict(zip(PREFILL_HEADERS, prefill_row(p))) for p in result.profiles)
    assert (first["peak G/s"], second["peak G/s"], third["peak G/s"]) == ("25 (20)", "25 (15)", "25")
    a = result.profiles[0]
    at_best, at_own = 100 * a.prefill_flops / 25e6 / a.ttft_ms, 100 * a.prefill_flops / 20e6 / a.ttft_ms
    assert first["roofline share"] == f"{at_best:.0f}% ({at_own:.0f}%)"  # the best's, and at its own probe's
    console = Console(record=True, width=400)
    print_profile(result, console)
    assert "roofline's peaks: fp32 25 G/s" in console.export_text()
    # environment.json: the best, and the probe it came from (the third), beside the last probe's read
    fp32 = result.bench.environment["compute_peaks"]["peaks"]["fp32"]
    assert (fp32["gops"], fp32["measured_at"], fp32["probe_pid"], fp32["probed_gops"]) == (25.0, "t3", 3, 25.0)
    write_profile(tmp_path / "files", result.profiles, {})
    read_back = read_profile(tmp_path / "files")
    assert [(p.peak_gops, p.peak_probed_gops) for p in read_back] == [(25.0, 20.0), (25.0, 15.0), (25.0, 25.0)]
    assert [p.roofline_ms for p in read_back] == pytest.approx([p.roofline_ms for p in result.profiles])
    with open(tmp_path / "files" / "breakdown.csv", newline="") as handle:
        written = [row for row in csv.DictReader(handle) if row["phase"] == "prefill"]
    assert [float(row["peak_gops"]) for row in written] == [25.0] * 3
    shown = [p.roofline_ms for p in result.profiles]
    assert [float(row["roofline_ms"]) for row in written] == pytest.approx(shown, rel=1e-3)


def test_the_profiled_ms_per_token_of_an_engine_whose_first_step_makes_several_is_bench_s(tmp_path):
    """hf-assisted checks its first drafts with the prompt: those tokens come in the TTFT, and bench's
    ms/token is over the tokens after that step. The profiled run's figure (the overhead's other half)
    is computed the same way: 4 passes of at least 20 ms over the 16 tokens after a first step of 5 is
    at least 5 ms, where a mean over all 20 gaps read 4 ms (a -20% 'overhead' that was not there)."""
    from tests.fake_engines import burst_spec

    config = BenchConfig(model="random:tiny", backends=("burst",), prompt_tokens=4, new_tokens=21, repeats=1, threads=1)
    with registry.use([burst_spec("burst", burst=4, step_s=0.02, first=5)]):
        session = ProfileSession(config, tmp_path / "prof", bandwidth=lambda threads, n_bytes, device="cpu": BANDWIDTH)
    (profile,) = session.run().profiles
    assert profile.status == "ok", profile.error
    assert profile.ms_per_token >= 5.0 and profile.profiled_ms_per_token >= 5.0
    # the decode breakdown's step is per token decoded after the first step too (its categories sum to it)
    assert profile.decode.steps == 16 and profile.decode.step_ms == pytest.approx(
        profile.profiled_ms_per_token, rel=0.01
    )


def test_a_prefill_is_held_to_its_own_device_s_roofline_and_only_with_known_bytes(tmp_path):
    """A GPU's prefill is held to its GPU's peaks (an H100's 6 ms TTFT read 240% of a 14.6 ms CPU
    roofline), not the host's; a remote server's or the null engine's (no bytes: 28% of a roofline
    for an engine that computes nothing) to none, and this host's bandwidth is no floor for them."""
    from tests.fake_engines import spec
    from whistle_stop.backends.profile.table import PREFILL_HEADERS, prefill_row

    gpu_peaks = ComputePeaks(
        peaks={"fp32": {"gops": 50.0, "median_gops": 49.0, "isa": "Test GPU: cuBLAS SGEMM, no TF32"}},
        cpu="Test GPU",
    )
    config = BenchConfig(
        model="random:tiny", backends=("host", "gpu", "null"), new_tokens=4, repeats=1, warmup=0, threads=1
    )
    asked = []

    def probe(threads, n_bytes, device="cpu"):
        asked.append(device)
        return BANDWIDTH

    specs = [spec("host", decode_s=0.001), spec("gpu", decode_s=0.001, device="cuda")]
    with registry.use(specs):
        session = ProfileSession(
            config,
            tmp_path / "prof",
            bandwidth=probe,
            compute_peaks=lambda threads: PEAKS,
            gpu_compute_peaks=lambda: gpu_peaks,
        )
    result = session.run()
    host, gpu, null = result.profiles
    assert host.peak_gops == 0.5 and host.roofline_ms is not None and host.ttft_share is not None
    assert gpu.peak_gops == 50.0 and gpu.peak_isa.startswith("Test GPU") and gpu.roofline_ms is not None
    assert gpu.roofline_ms == pytest.approx(host.roofline_ms / 100, rel=1e-6)  # compute-bound at 100x the peak
    assert result.bench.environment["gpu_compute_peaks"]["cpu"] == "Test GPU"
    assert null.roofline_ms is None and null.ttft_share is None and not null.prefill_arithmetic
    row = dict(zip(PREFILL_HEADERS, prefill_row(null)))
    assert [row[h] for h in ("roofline", "roofline share", "peak G/s", "arithmetic")] == ["-"] * 4
    assert null.probe_gb_s is None and asked == ["cpu", "cpu", "cuda", "cuda"]  # the null engine: no probe

    with registry.use(specs):  # no GPU peaks (a failed probe): no roofline, rather than the CPU's
        session = ProfileSession(
            config, tmp_path / "prof2", bandwidth=probe, compute_peaks=lambda threads: PEAKS, gpu_compute_peaks=_fail
        )
    _, gpu, _ = session.run().profiles
    assert gpu.roofline_ms is None and gpu.ttft_share is None


def _fail():
    raise RuntimeError("torch sees no CUDA GPU")


def _written_profile():
    """A profile as `profile` leaves one: every figure the files carry, both phases, an operation."""
    from whistle_stop.backends.profile.breakdown import EngineProfile, OpShare, PhaseBreakdown

    categories = {c.value: 0.5 for c in Category}
    return EngineProfile(
        "numpy",
        precision="fp32",
        profiler="numpy's own timers",
        ms_per_token=10.0,
        profiled_ms_per_token=11.0,
        ttft_ms=60.0,
        bytes_per_token=5e8,
        probe_gb_s=50.0,
        probe_label="sgemv 50 GB/s at now",
        slower_probe_gb_s=40.0,
        probe_compute_gflops=200.0,
        decode=PhaseBreakdown("decode", 9, 10.5, categories),
        prefill=PhaseBreakdown("prefill", 1, 60.0, categories),
        top_ops=[
            OpShare("decode", "linear", "matmul", 4.0, 12.0, 0.4),
            OpShare("decode", "copy_", "kv cache", 1.0, 12.0, 0.1),
        ],
    )


def test_profile_csvs_name_their_columns_as_the_other_files_do(tmp_path):
    """snake_case identifiers (the categories' keys, not their labels), `backend` as in every other
    file, and the probe's bandwidth never under runs.csv's name for the engine's own rate."""
    import csv
    import re

    from whistle_stop.backends.profile.files import write_profile

    profile = _written_profile()
    write_profile(tmp_path, [profile], {})
    with (tmp_path / "breakdown.csv").open(newline="", encoding="utf-8") as f:
        breakdown = list(csv.DictReader(f))
    with (tmp_path / "top_ops.csv").open(newline="", encoding="utf-8") as f:
        top_ops = list(csv.DictReader(f))
    for rows in (breakdown, top_ops):
        assert all(re.fullmatch(r"[a-z][a-z0-9_]*", column) for column in rows[0]), list(rows[0])
        assert rows[0]["backend"] == "numpy" and "engine" not in rows[0]
    row = breakdown[0]
    assert {"engine_not_split_ms", "framework_python_ms", "norm_and_activation_ms", "kv_cache_ms"} <= set(row)
    assert (row["probe_gb_s"], row["slower_probe_gb_s"], row["probe_compute_gflops"]) == ("50.00", "40.00", "200.00")
    assert "bandwidth_gb_s" not in row and "compute_gflops" not in row
    # the unprofiled runs' median TTFT, under one name in both files
    engine = json.loads((tmp_path / "profile.json").read_text(encoding="utf-8"))["backends"][0]
    assert float(row["ttft_ms"]) == engine["ttft_ms"] == 60.0 and "prefill_ms" not in engine
    assert engine["probe_gb_s"] == 50.0 and "bandwidth_gb_s" not in engine


def test_profile_json_names_the_backend_and_the_categories_as_breakdown_csv_does(tmp_path):
    """`backend` as in every other file (the entry's key and the list's, `backends`), and each phase's
    categories under breakdown.csv's keys (`kv_cache`, not the label "kv cache"); the Python attribute
    stays `engine`."""
    from whistle_stop.backends.profile.files import read_profile, write_profile

    profile = _written_profile()
    write_profile(tmp_path, [profile], {})
    written = json.loads((tmp_path / "profile.json").read_text(encoding="utf-8"))
    assert set(written) == {"settings", "backends"}
    (engine,) = written["backends"]
    assert engine["backend"] == "numpy" and "engine" not in engine
    for phase in ("decode", "prefill"):
        assert list(engine[phase]["categories"]) == [c.key for c in Category]
    assert [op["category"] for op in engine["top_ops"]] == ["matmul", "kv_cache"]  # top_ops.csv's too
    with (tmp_path / "top_ops.csv").open(newline="", encoding="utf-8") as f:
        assert [row["category"] for row in csv.DictReader(f)] == ["matmul", "kv_cache"]
    assert read_profile(tmp_path) == [profile]


def test_every_profile_table_names_its_first_column_backend_as_bench_s_does():
    """The decode and prefill tables, as `profile` prints them (left-aligned, a name), the Markdown page
    and the HTML report: the column of engines is `backend`, the bench table's name for it."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from whistle_stop.backends.cli.profile_command import print_profile
    from whistle_stop.backends.profile.table import headers
    from whistle_stop.backends.report.html import _profile_html
    from whistle_stop.backends.report.markdown import profile_markdown
    from whistle_stop.backends.results.summary import SUMMARY_HEADERS
    from whistle_stop.backends.runs.profile import ProfileResult

    name = SUMMARY_HEADERS[0]
    assert name == "backend" and [headers(phase)[0] for phase in ("decode", "prefill")] == [name, name]
    profiles = [replace(_written_profile(), engine="a"), replace(_written_profile(), engine="numpy-longer")]
    console = Console(file=io.StringIO(), width=400, force_terminal=False, color_system=None)
    print_profile(ProfileResult(SimpleNamespace(), profiles), console)
    printed = console.file.getvalue().splitlines()
    assert [line.split("┃")[1].strip() for line in printed if line.startswith("┃")] == [name, name]
    assert len([line for line in printed if line.startswith("│ a ")]) == 2  # a name: left-aligned
    markdown = profile_markdown(profiles)
    heads = [markdown[i + 2] for i, line in enumerate(markdown) if line.startswith("## Profile:")]
    assert [head.split("|")[1].strip() for head in heads] == [name, name]
    assert _profile_html(SimpleNamespace(profiles=profiles)).count(f"<thead><tr><th>{name}</th>") == 2


def test_a_profile_json_from_before_the_renames_still_opens(tmp_path):
    """Folders written before the probe's figures, the TTFT, the backend and the list (`engines`) were
    renamed and the categories keyed by key (docs/measurements/data, users' own) read back as they were
    written: the report and the window's Open show them."""
    from whistle_stop.backends.profile.files import read_profile, write_profile
    from whistle_stop.backends.profile.table import prefill_row, profile_row

    profile = _written_profile()
    write_profile(tmp_path, [profile], {})
    path = tmp_path / "profile.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    old_names = {
        "probe_gb_s": "bandwidth_gb_s",
        "slower_probe_gb_s": "slower_bandwidth_gb_s",
        "probe_label": "bandwidth_label",
        "probe_compute_gflops": "compute_gflops",
        "ttft_ms": "prefill_ms",
        "backend": "engine",
    }
    data["engines"] = [{old_names.get(k, k): v for k, v in e.items()} for e in data.pop("backends")]
    labels = {c.key: c.value for c in Category}
    for engine in data["engines"]:
        for phase in ("decode", "prefill"):
            engine[phase]["categories"] = {labels[k]: ms for k, ms in engine[phase]["categories"].items()}
        for op in engine["top_ops"]:
            op["category"] = labels[op["category"]]
    path.write_text(json.dumps(data), encoding="utf-8")
    (read_back,) = read_profile(tmp_path)
    assert read_back == profile
    assert profile_row(read_back) == profile_row(profile) and prefill_row(read_back) == prefill_row(profile)
