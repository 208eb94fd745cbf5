"""Bandwidth that counts what is read: weight + KV bytes, the probe in its own process, its label."""

from __future__ import annotations

import os

import pytest

from whistle_stop.backends.machine import bandwidth as bw
from whistle_stop.backends.results.records import RunRecord, decode_bytes_per_token, fill_metrics
from whistle_stop.backends.status import RunStatus
from whistle_stop.backends.worker.events import Token


def _record(prompt_tokens: int) -> RunRecord:
    return RunRecord(
        "r",
        "e",
        "m",
        "w",
        "cpu",
        "fp32",
        1,
        prompt_tokens,
        5,
        "greedy",
        1.0,
        0,
        1.0,
        0,
        1,
        False,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        RunStatus.OK,
    )


def test_bandwidth_counts_weights_and_the_mean_kv_cache(monkeypatch):
    monkeypatch.setattr(bw, "last_level_cache", lambda: (3, 1024))  # the weights do not fit
    # First token at 10 ms, then one every 10 ms: 4 decode tokens in 40 ms = 100 tokens/s.
    tokens = [Token("r", i, 100 + i, "", (i + 1) * 10_000_000) for i in range(5)]
    record = _record(prompt_tokens=10)
    fill_metrics(record, 0, tokens, weight_bytes_per_token=1_000_000, kv_bytes_per_position=1_000)
    assert record.decode_tok_s == pytest.approx(100.0)
    # Decode token i (1..4) reads 10 + i cached positions: mean 12.5 = prompt + 5 / 2.
    assert decode_bytes_per_token(1_000_000, 1_000, 10, 5) == pytest.approx(1_012_500)
    assert record.bandwidth_gb_s == pytest.approx(1_012_500 * 100 / 1e9)
    assert "fit in" not in record.notes
    plain = _record(prompt_tokens=10)
    fill_metrics(plain, 0, tokens, 1_000_000)  # no KV figure: the weights alone
    assert plain.bandwidth_gb_s == pytest.approx(0.1)


def test_weights_that_fit_in_the_last_level_cache_are_flagged(monkeypatch):
    monkeypatch.setattr(bw, "last_level_cache", lambda: (3, 32 << 20))
    note = bw.fits_in_cache_note(13_000_000)
    assert note.startswith("weights (13.0 MB) fit in the L3 cache (34 MB)") and "does not bound" in note
    assert bw.fits_in_cache_note(500_000_000) == ""
    record = _record(prompt_tokens=4)
    fill_metrics(record, 0, [Token("r", i, 1, "", (i + 1) * 1_000_000) for i in range(3)], 13_000_000, 100)
    assert "fit in the L3 cache" in record.notes


def test_cpu_caches_read_from_sysfs(tmp_path):
    for index, (level, kind, size) in enumerate(
        [(1, "Data", "32K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"), (3, "Unified", "32768K")]
    ):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")
    assert bw.cpu_caches(tmp_path) == [(1, 32 << 10), (2, 1 << 20), (3, 32 << 20)]


def test_probe_runs_in_its_own_process_and_says_what_it_is():
    result = bw.measure_bandwidth(threads=1, n_bytes=8 << 20, passes=1)
    assert result.probe_pid and result.probe_pid != os.getpid()
    assert result.gb_s > 0 and result.bytes == 8 << 20 and result.threads == 1
    # the faster reader names the limit (which one wins on a small matrix is the machine's moment)
    assert result.reader in result.readers and result.gb_s == pytest.approx(max(result.readers.values()), abs=0.01)
    assert result.label.startswith(f"{result.reader} over a 8 MB fp32 matrix, 1 thread: ")
    assert result.compute_gflops > 0.5  # the cores' GEMM rate at the same moment (checked product)
    data = result.as_dict()
    assert data["label"] == result.label and "llc_bytes" in data
    assert bw.Bandwidth.from_dict(data) == result  # environment.json's extra keys read back


def test_cached_probe_keeps_working_and_labels_the_limit(monkeypatch):
    calls = []

    def fake(threads, n_bytes=None, passes=5):
        calls.append(threads)
        return bw.Bandwidth(10.0, 9.0, 1 << 30, threads, 5, "cpu", "now", probe_pid=1)

    monkeypatch.setattr(bw, "measure_bandwidth", fake)
    first = bw.probe_bandwidth(threads=3, refresh=True)
    again = bw.probe_bandwidth(threads=3)
    assert calls == [3] and again.cached and again.gb_s == first.gb_s
    assert again.label == "sgemv over a 1074 MB fp32 matrix, 3 threads: 10.0 GB/s"


def test_a_sized_probe_reads_that_many_bytes_and_leaves_the_cached_figure(monkeypatch):
    """The profile's probe reads an engine's bytes per token (at least MIN_SIZED_BYTES); only the
    default-size probe is cached as the machine's figure."""
    sizes = []

    def fake(threads, n_bytes=None, passes=5):
        sizes.append(n_bytes)
        return bw.Bandwidth(10.0, 9.0, n_bytes or 1 << 30, threads, 5, "cpu", "now", probe_pid=1)

    monkeypatch.setattr(bw, "measure_bandwidth", fake)
    monkeypatch.setattr(bw, "read_probe_cache", lambda file_name: {})
    monkeypatch.setattr(bw, "probe_bandwidth", lambda *a, **k: pytest.fail("a sized probe must not touch the cache"))
    assert bw.fresh_bandwidth(2, 77_000_000).bytes == 77_000_000
    assert bw.fresh_bandwidth(2, 1000).bytes == bw.MIN_SIZED_BYTES  # a tiny model: a read long enough to time
    assert sizes == [77_000_000, bw.MIN_SIZED_BYTES]


def test_plots_name_the_limit_and_the_engines_it_does_not_bound():
    from whistle_stop.backends.report import sweep_figures

    runs = [_record(prompt_tokens=4)]
    runs[0].decode_tok_s, runs[0].bandwidth_gb_s, runs[0].new_tokens = 100.0, 0.1, 3
    environment = {
        "bandwidth": {
            "gb_s": 10.0,
            "label": "sgemv over a 1074 MB fp32 matrix, 2 threads: 10.0 GB/s",
            "llc_bytes": 32 << 20,
        },
        "engines": {"e": {"dtype": "fp32", "weight_bytes_per_token": 1_000_000}},
    }
    figure = sweep_figures.decode_vs_output(runs, 10.0, environment)
    assert "sgemv over a 1074 MB" in figure.limits[0].label
    assert "limit: sgemv" in figure.note and "weights of e fit in the last-level cache" in figure.note
    # weights a few times the cache but a quarter of the probe's bytes or less: said to be able to beat it
    environment["bandwidth"]["bytes"] = 1 << 30
    environment["engines"] = {
        "e": {"dtype": "int4", "weight_bytes_per_token": 85_000_000},
        "big": {"dtype": "fp32", "weight_bytes_per_token": 500_000_000},
    }
    note = sweep_figures.decode_vs_output(runs, 10.0, environment).note
    assert "e reads under a quarter of the probe's 1074 MB per token" in note and "so it can beat this limit" in note
    assert "big" not in note and "last-level" not in note
    # an engine on a GPU: no host limit line stands for it, and the note says why
    gpu_run = _record(prompt_tokens=4)
    gpu_run.backend, gpu_run.device, gpu_run.dtype = "g", "cuda", "bf16"
    environment["engines"]["g"] = {"dtype": "bf16", "weight_bytes_per_token": 250_000_000}
    figure = sweep_figures.decode_vs_output([*runs, gpu_run], 10.0, environment)
    assert not any(limit.label.startswith("bf16") for limit in figure.limits)
    assert "g runs on a GPU" in figure.note and "no host limit line bounds them" in figure.note


def test_probe_takes_the_faster_reader_and_names_it():
    from whistle_stop.backends.kernels import native

    result = bw.measure_bandwidth(threads=1, n_bytes=8 << 20, passes=2)
    expected = {"sgemv", "own kernel"} if native.compiler() else {"sgemv"}
    assert set(result.readers) == expected
    assert result.reader in expected and result.gb_s == pytest.approx(max(result.readers.values()), abs=0.01)
    assert result.label.startswith(f"{result.reader} over a 8 MB fp32 matrix, 1 thread:")
    assert bw.Bandwidth.from_dict(result.as_dict()) == result


def _torch_sees_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.cuda
def test_gpu_probe_reads_the_gpus_memory():
    """A CUDA engine's floor: the probe reads its bytes on the GPU (in its own process)."""
    if not _torch_sees_cuda():
        pytest.skip("needs a CUDA GPU")
    from whistle_stop.backends.machine.gpu_bandwidth import measure_gpu_bandwidth

    result = bw.fresh_bandwidth(1, 64 << 20, device="cuda")
    assert result.device == "cuda" and result.device_name and result.bytes == 64 << 20
    assert set(result.readers) == {"cuBLAS gemv", "sum"}
    assert result.gb_s == pytest.approx(max(result.readers.values()), abs=0.01)
    assert result.gb_s > 100 and result.compute_gflops > 1000  # any CUDA GPU's memory and cores beat these
    assert "on " + result.device_name in result.label and result.probe_pid != os.getpid()
    assert measure_gpu_bandwidth(8 << 20, passes=2).passes == 2


def test_gpu_probe_without_a_gpu_says_so():
    if _torch_sees_cuda():
        pytest.skip("checks the message without a GPU")
    with pytest.raises(RuntimeError, match="sees no CUDA GPU"):
        bw.fresh_bandwidth(1, 8 << 20, device="cuda")


@pytest.mark.cuda
def test_gpu_peaks_are_the_gpu_s_gemms():
    """A CUDA engine's prefill roofline: fp32 (no TF32) and bf16 GEMM peaks of its GPU, named, in
    a process of their own; bf16 on tensor cores beats fp32."""
    if not _torch_sees_cuda():
        pytest.skip("needs a CUDA GPU")
    from whistle_stop.backends.machine.gpu_compute_peak import measure_gpu_peaks

    peaks = measure_gpu_peaks(passes=3)
    assert set(peaks.peaks) == {"fp32", "bf16"} and peaks.probe_pid != os.getpid()
    assert all(entry["isa"].startswith(peaks.cpu) for entry in peaks.peaks.values())
    assert all((e["measured_at"], e["probe_pid"]) == (peaks.measured_at, peaks.probe_pid) for e in peaks.peaks.values())
    assert peaks.peaks["fp32"]["gops"] > 1000 and peaks.peaks["bf16"]["gops"] > peaks.peaks["fp32"]["gops"]


def test_gpu_peaks_without_a_gpu_say_so():
    if _torch_sees_cuda():
        pytest.skip("checks the message without a GPU")
    from whistle_stop.backends.machine.gpu_compute_peak import measure_gpu_peaks

    with pytest.raises(RuntimeError, match="sees no CUDA GPU"):
        measure_gpu_peaks(passes=1)
