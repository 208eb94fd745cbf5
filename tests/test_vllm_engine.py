"""The managed `vllm` engine: its server's lifecycle against a fake vLLM (tests/fake_vllm) in a
fake environment (started, reused across runs, stopped at the end, on cancel and when its worker
is killed: nothing left running), and, marked slow, the real vLLM CPU server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from whistle_stop.backends import registry
from whistle_stop.backends.engine import EngineOptions
from whistle_stop.backends.engines.vllm.engine import cpu_binding
from whistle_stop.backends.engines.vllm.environment import OVERRIDE_VARIABLE
from whistle_stop.backends.machine.gpu import cuda_available
from whistle_stop.backends.runs.bench import BenchSession
from whistle_stop.backends.runs.config import BenchConfig
from whistle_stop.backends.status import RunStatus
from whistle_stop.backends.worker.events import BackendEvent, Token
from whistle_stop.backends.worker.process import Worker, WorkerError

from .fake_servers import alive, environ, fake_vllm_environment, pids_in

MODEL = "random:tiny-h32"  # vLLM's CPU attention needs head sizes >= 32
# The engine serves vLLM's CUDA build where torch sees a GPU, its CPU build elsewhere.
FLAVOUR = "cuda" if cuda_available() else "cpu"


@pytest.fixture(scope="module")
def h32_model(isolated_cache):
    from whistle_stop.backends.sources.model_files import resolve_model

    return resolve_model(MODEL)


@pytest.fixture
def fake_env(tmp_path):
    pids = tmp_path / "pids.txt"
    with environ(
        **{
            OVERRIDE_VARIABLE: str(fake_vllm_environment(tmp_path / "env")),
            "FAKE_VLLM_PIDS": str(pids),
            "FAKE_VLLM_STEP_MS": "5",
            "FAKE_VLLM_PER_SEQ_MS": "1",
        }
    ):
        yield pids


def _wait_gone(pids: list[int], timeout_s: float = 20.0) -> list[int]:
    """Wait until these processes have exited (psutil waits on each one's end); the ones still alive."""
    import psutil

    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    _, alive_procs = psutil.wait_procs(procs, timeout=timeout_s)
    return [p.pid for p in alive_procs if alive(p.pid)]


def test_server_started_reused_and_stopped(h32_model, fake_env):
    config = BenchConfig(model=MODEL, backends=("vllm",), prompt_tokens=8, new_tokens=5, repeats=2, concurrency=(2,))
    result = BenchSession(config).run()
    measured = [r for r in result.runs if not r.is_warmup]
    assert [r.status for r in measured] == [RunStatus.OK, RunStatus.OK]
    assert all(r.tokens_generated == 5 for r in measured)
    assert len([r for r in result.load if not r.is_warmup]) == 4  # the load rounds ran on the same server
    record = measured[0]
    assert record.device.startswith(f"vLLM 0.0-fake {FLAVOUR} at 127.0.0.1:") and record.dtype == "fp32"
    assert ("VLLM_CPU_OMP_THREADS_BIND" in record.notes) == (FLAVOUR == "cpu") and "server start" in record.notes
    assert record.build_s is not None and record.load_s is not None
    assert record.ttft_ms < 5_000  # the server's start is load time, not TTFT
    pids = pids_in(fake_env)
    assert len(pids) == 2, "one server (and its helper) for warm-up, repeats and load rounds"
    assert _wait_gone(pids) == []


def test_bf16_server_gets_its_dtype_and_is_compared_with_the_fp32_one(h32_model, fake_env, tmp_path, monkeypatch):
    """vllm-bf16 is vllm with another dtype: bfloat16 on its server's command line (the fake refuses a
    dtype vLLM does not know), bf16 in its records and the verdict's 16-bit group, half the weight bytes
    per token, and its tokens compared with the fp32 server's (the reference here: no hf in the run)."""
    from whistle_stop.backends.families import PrecisionGroup
    from whistle_stop.backends.results.verdict import verdict

    argv_file = tmp_path / "argv.jsonl"
    monkeypatch.setenv("FAKE_VLLM_ARGV", str(argv_file))
    config = BenchConfig(model=MODEL, backends=("vllm", "vllm-bf16"), prompt_tokens=8, new_tokens=6, repeats=2)
    assert config.reference_backend == "vllm"
    result = BenchSession(config).run()
    measured = {name: [r for r in result.runs if r.backend == name and not r.is_warmup] for name in config.backends}
    assert [r.status for name in config.backends for r in measured[name]] == [RunStatus.OK] * 4
    dtypes = [argv[argv.index("--dtype") + 1] for argv in map(json.loads, argv_file.read_text().splitlines())]
    assert dtypes == ["float32", "bfloat16"]  # one server per engine, in the run's order
    fp32, bf16 = measured["vllm"][0], measured["vllm-bf16"][0]
    assert (fp32.dtype, bf16.dtype) == ("fp32", "bf16")
    assert "dtype bfloat16" in bf16.notes and "dtype float32" in fp32.notes
    bytes_per_token = {r.backend: r.bandwidth_gb_s * 1e9 / r.decode_tok_s for r in (fp32, bf16)}
    assert bytes_per_token["vllm-bf16"] == pytest.approx(bytes_per_token["vllm"] / 2)
    assert all(
        r.reference == "vllm" and r.agree_tokens == 6 and r.first_divergence is None for r in measured["vllm-bf16"]
    )
    found = verdict(result.runs)
    assert found.reference == "vllm" and found.engines["vllm-bf16"].group is PrecisionGroup.HALF
    assert found.engines["vllm-bf16"].agree_tokens == 6 and found.engines["vllm"].group is PrecisionGroup.FP32
    pids = pids_in(fake_env)
    assert len(pids) == 4 and _wait_gone(pids) == []


def test_cancel_stops_the_server(h32_model, fake_env):
    config = BenchConfig(model=MODEL, backends=("vllm",), prompt_tokens=8, new_tokens=1000, repeats=3)
    first_token = threading.Event()

    def on_event(event) -> None:
        if isinstance(event, BackendEvent) and isinstance(event.event, Token):
            first_token.set()

    session = BenchSession(config, on_event=on_event)
    done: list = []
    thread = threading.Thread(target=lambda: done.append(session.run()), daemon=True)
    thread.start()
    assert first_token.wait(120)
    session.cancel()
    thread.join(60)
    assert done and done[0].cancelled
    pids = pids_in(fake_env)
    assert pids and _wait_gone(pids) == []


def test_killed_worker_takes_its_server_down(h32_model, fake_env):
    worker = Worker(registry.get("vllm"), h32_model, EngineOptions(threads=1))
    worker.start()
    pids = pids_in(fake_env)
    assert len(pids) == 2 and all(alive(p) for p in pids)
    os.kill(worker.pid, signal.SIGKILL)  # a crash: no close(), no Shutdown
    assert _wait_gone(pids) == []
    worker.close()


def test_ctrl_c_stops_the_server(h32_model, fake_env, tmp_path):
    """Ctrl+C in a terminal: SIGINT to the whole foreground process group, as a shell sends it."""
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen(
        [
            sys.executable,
            str(root / "main.py"),
            "bench",
            "--model",
            MODEL,
            "--backends",
            "vllm",
            "--new-tokens",
            "900",
            "--repeats",
            "5",
            "--no-harness-calibration",
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=tmp_path,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        seen = []
        for raw in iter(proc.stderr.readline, b""):  # the CLI's own progress: the engine is up once loaded
            seen.append(raw.decode(errors="replace"))
            if "vllm: loaded" in seen[-1]:
                break
        pids = pids_in(fake_env)
        assert len(pids) == 2, "".join(seen[-5:]) or "the CLI printed nothing"
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _wait_gone(pids) == []


def test_a_server_that_dies_while_starting_is_one_clear_line(h32_model, fake_env):
    with environ(FAKE_VLLM_EXIT_AT_START="1"):
        worker = Worker(registry.get("vllm"), h32_model, EngineOptions(threads=1))
        with pytest.raises(WorkerError, match=r"vLLM server exited while starting .*no engine for you"):
            worker.start()


@pytest.mark.skipif(FLAVOUR != "cpu", reason="the head-size limit is vLLM's CPU attention's")
def test_unsupported_head_size_is_refused_before_anything_is_built(tiny_model, fake_env):
    worker = Worker(registry.get("vllm"), tiny_model, EngineOptions(threads=1))
    with pytest.raises(WorkerError, match="head sizes"):
        worker.start()


def test_cpu_binding_uses_the_first_usable_cpus():
    usable = sorted(os.sched_getaffinity(0))
    assert cpu_binding(1) == str(usable[0])
    if len(usable) >= 2 and usable[1] == usable[0] + 1:
        assert cpu_binding(2) == f"{usable[0]}-{usable[1]}"


@pytest.mark.slow
@pytest.mark.vllm
def test_real_vllm_cpu_server(h32_model, hf_reference_h32, monkeypatch):
    """The real vLLM CPU build: greedy fp32 tokens equal transformers', and a concurrency sweep
    1,2,4 completes. Its environment is the user's if `vllm` made one already (this session's cache
    is a fresh one), else it is made here (minutes, ~3.5 GB)."""
    from platformdirs import user_cache_dir

    from whistle_stop.backends.engines.vllm.environment import KIND

    made = Path(user_cache_dir("whistle-stop")) / KIND / "cpu" / "venv"
    if (made / "installed.json").exists():
        monkeypatch.setenv(OVERRIDE_VARIABLE, str(made))
    ids = list(range(300, 316))
    config = BenchConfig(
        model=MODEL, backends=("vllm",), prompt="x", new_tokens=12, repeats=1, threads=2, concurrency=(1, 2, 4)
    )
    session = BenchSession(config)
    result = session.run(h32_model, ids)
    measured = [r for r in result.runs if not r.is_warmup]
    assert measured and measured[0].status == RunStatus.OK, measured[0].error if measured else result.runs
    tokens = [t.token_id for t in result.tokens if t.run_id == measured[0].run_id]
    assert tokens == hf_reference_h32(ids, 12)
    assert {r.concurrency for r in result.load if r.status == RunStatus.OK and not r.is_warmup} == {2, 4}


@pytest.fixture(scope="module")
def hf_reference_h32(h32_model):
    import torch
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(str(h32_model.folder)).eval()
    model.generation_config.eos_token_id = None  # N tokens, end-of-text not masked (as the engines)

    def greedy(ids, new_tokens):
        with torch.inference_mode():
            out = model.generate(
                torch.tensor([list(ids)]),
                max_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=50256,
            )
        return out[0, len(ids) :].tolist()

    return greedy


def test_an_environment_that_cannot_be_made_is_one_clear_line(monkeypatch, isolated_cache):
    from whistle_stop.backends.engines.vllm import environment

    monkeypatch.delenv(OVERRIDE_VARIABLE, raising=False)
    monkeypatch.setattr(environment, "CPU_PACKAGES", ("whistle-stop-no-such-package==0.0",))
    messages: list[str] = []
    with pytest.raises(environment.VllmEnvironmentError, match="could not install vLLM .exit code"):
        environment.ensure_environment("cpu", lambda message, fraction=None: messages.append(message))
    assert messages and "creating vLLM's own environment" in messages[0]
    folder = isolated_cache / environment.KIND / "cpu"
    assert not (folder / "venv").exists()  # the half-made environment is gone; the next use starts afresh


def test_ngram_speculation_reaches_the_server_and_its_bursts_are_timed_per_token(h32_model, fake_env):
    """--vllm-ngram-tokens passes vLLM's speculative config on its command line (the fake server refuses
    one it does not know, as vLLM would), tokens then come several per step, so ms/token is the TPOT, and
    the run's acceptance comes from the server's spec_decode counters. The real vLLM was not run here."""
    from whistle_stop.backends.engines.vllm.environment import VllmEnvironment
    from whistle_stop.backends.engines.vllm.server_command import server_command
    from whistle_stop.backends.engines.vllm_options import VllmOptions

    options = VllmOptions(ngram_tokens=3)
    assert options.speculative_config() == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
    assert VllmOptions(ngram_tokens="x").problem() and VllmOptions().speculative_config() is None
    assert "from 1 to 32" in VllmOptions(ngram_tokens=10**8).problem()  # a typo, not passed on to vLLM
    environment = VllmEnvironment(Path(sys.executable), "cpu", "0.0-fake")
    argv = server_command(
        h32_model, environment, h32_model.folder, "cpu", "fp32", 1, 8000, None, {"method": "ngram"}
    ).argv
    assert argv[argv.index("--speculative-config") + 1] == '{"method": "ngram"}'
    assert (
        "--speculative-config"
        not in server_command(h32_model, environment, h32_model.folder, "cpu", "fp32", 1, 8000, None).argv
    )
    config = BenchConfig(
        model=MODEL, backends=("vllm",), prompt_tokens=8, new_tokens=13, repeats=2, engine_options={"vllm": options}
    )
    result = BenchSession(config).run()
    measured = [r for r in result.runs if not r.is_warmup]
    assert [r.status for r in measured] == [RunStatus.OK, RunStatus.OK]
    for record in measured:
        assert record.multi_token_steps and record.ms_per_token == record.tpot_ms
        assert '"num_speculative_tokens": 3' in record.notes
        assert record.spec_tokens_per_pass == pytest.approx(4.0) and record.spec_acceptance == 1.0
    gaps = [t.itl_ms for t in result.tokens if t.itl_ms is not None and not t.is_warmup]
    assert sum(g < 1.0 for g in gaps) >= len(gaps) // 2  # three of every four tokens come with the step's first


def test_ngram_counters_are_not_read_while_a_load_run_streams(h32_model, fake_env, tmp_path, monkeypatch):
    """Each run alone reads the server's speculation counters after its last token; a load round's
    streams read none (another stream's tokens would count, and the read would land in its timed span)."""
    from whistle_stop.backends.engines.vllm_options import VllmOptions

    scrapes = tmp_path / "scrapes.txt"
    monkeypatch.setenv("FAKE_VLLM_SCRAPES", str(scrapes))
    monkeypatch.setenv("FAKE_VLLM_STAGGER_MS", "40")  # the round's streams end apart
    config = BenchConfig(
        model=MODEL,
        backends=("vllm",),
        prompt_tokens=8,
        new_tokens=13,
        repeats=1,
        concurrency=(4,),
        engine_options={"vllm": VllmOptions(ngram_tokens=3)},
    )
    result = BenchSession(config).run()
    assert [r.status for r in result.load if not r.is_warmup] == [RunStatus.OK] * 4
    assert [r.spec_acceptance for r in result.runs if not r.is_warmup] == [1.0]
    read_while_streaming = [int(line) for line in scrapes.read_text().split()]
    assert read_while_streaming and not any(read_while_streaming)
