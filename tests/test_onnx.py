"""ONNX Runtime engines on random:tiny: parity with transformers, and the artefact cache."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import engine_tokens
from whistle_stop.backends.engine import EngineOptions
from whistle_stop.backends.sampling import SamplingParams
from whistle_stop.backends.storage import artifact_cache

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from whistle_stop.backends.engines.onnx import cache as onnx_cache
from whistle_stop.backends.engines.onnx.engine import OnnxEngine  # noqa: E402

# fp32 logits vs transformers' eager fp32: same math, different kernels and summation order.
# Measured max |diff| ~5e-6 on random:tiny (logits of magnitude ~10); 1e-4 leaves headroom.
LOGIT_TOL = 1e-4


class Recorder:
    def __init__(self) -> None:
        self.messages: list[str] = []

    def __call__(self, message: str, fraction: float | None = None) -> None:
        assert fraction is None or 0.0 <= fraction <= 1.0, (message, fraction)
        self.messages.append(message)

    def built(self) -> bool:
        return any("exporting" in m or "quantising" in m for m in self.messages)


def load(model, variant: str = "fp32", threads: int = 1) -> tuple[OnnxEngine, Recorder, object]:
    engine = OnnxEngine("onnx", EngineOptions(threads=threads), variant)
    recorder = Recorder()
    info = engine.load(model, recorder)
    return engine, recorder, info


def greedy(engine: OnnxEngine, ids, new_tokens: int) -> list[int]:
    logits, out = engine.prefill(ids), []
    for _ in range(new_tokens):
        out.append(int(np.argmax(logits)))
        logits = engine.decode(out[-1])
    return out


@pytest.fixture(scope="module")
def fp32(tiny_model):
    """The fp32 engine, loaded once (building the cache if this session has not yet)."""
    engine, recorder, info = load(tiny_model)
    yield engine, recorder, info
    engine.close()


def valid(folder: Path, model, variant: str) -> bool:
    """Whole, unchanged and built for this model and variant."""
    return artifact_cache.check(folder, onnx_cache.meta(model, variant)) == ""


def model_files(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}


# --- parity with transformers -------------------------------------------------------------


def test_greedy_equals_hf(tiny_model, prompt_ids, hf_reference):
    tokens = engine_tokens("onnx", tiny_model, prompt_ids, 30)
    assert tokens == hf_reference.greedy(prompt_ids, 30)


def test_logits_match_hf_prefill_and_decode(fp32, prompt_ids, hf_reference):
    engine, _, _ = fp32
    ids = list(prompt_ids)
    steps = [engine.prefill(ids)]
    for _ in range(5):
        ids.append(int(np.argmax(steps[-1])))
        steps.append(engine.decode(ids[-1]))
    reference = hf_reference.logits(ids)  # [T, vocab]; row j predicts token j+1
    for step, logits in enumerate(steps):
        assert logits.dtype == np.float32 and logits.shape == (reference.shape[1],)
        np.testing.assert_allclose(logits, reference[len(prompt_ids) - 1 + step], rtol=LOGIT_TOL, atol=LOGIT_TOL)


def test_forward_logits_all_positions(fp32, prompt_ids, hf_reference):
    engine, _, _ = fp32
    logits = engine.forward_logits(prompt_ids)
    assert logits.shape == (len(prompt_ids), 50257) and logits.dtype == np.float32
    np.testing.assert_allclose(logits, hf_reference.logits(prompt_ids), rtol=LOGIT_TOL, atol=LOGIT_TOL)


def test_sampling_same_as_hf_with_one_seed(tiny_model, prompt_ids):
    params = SamplingParams(decoding="sample", temperature=0.9, top_k=40, top_p=0.95, seed=1234)
    ours = engine_tokens("onnx", tiny_model, prompt_ids, 25, sampling=params)
    assert ours == engine_tokens("hf", tiny_model, prompt_ids, 25, sampling=params)
    greedy_tokens = engine_tokens("onnx", tiny_model, prompt_ids, 25)
    assert ours != greedy_tokens  # the sampler really sampled


def test_context_limit(fp32, hf_reference):
    from whistle_stop.backends.sources.prompts import prompt_of_length

    engine, _, _ = fp32
    ids = prompt_of_length(1023)
    first = engine.prefill(ids)
    token = int(np.argmax(first))
    last = engine.decode(token)  # position 1023: the last one GPT-2 has
    reference = hf_reference.logits(ids + [token])
    np.testing.assert_allclose(first, reference[-2], rtol=LOGIT_TOL, atol=LOGIT_TOL)
    np.testing.assert_allclose(last, reference[-1], rtol=LOGIT_TOL, atol=LOGIT_TOL)
    with pytest.raises(ValueError, match="context"):
        engine.decode(int(np.argmax(last)))
    with pytest.raises(ValueError, match="context"):
        engine.prefill(prompt_of_length(1025))
    # The cache buffers still hold 1024 old positions: a new, short sequence must not see them.
    short = prompt_of_length(7)
    np.testing.assert_allclose(engine.prefill(short), hf_reference.logits(short)[-1], rtol=LOGIT_TOL, atol=LOGIT_TOL)


def test_info(fp32, tiny_model):
    _, _, info = fp32
    # The initializers as stored (read from the graph) agree with the shapes' count to within 1%.
    estimate = tiny_model.gpt2_config.weight_bytes(4, 4)
    assert abs(info.weight_bytes_per_token - estimate) < 0.01 * estimate
    assert info.kv_bytes_per_position == tiny_model.gpt2_config.kv_bytes_per_position(4)
    assert info.artifact_cache in ("hit", "miss") and info.build_s >= 0
    assert "providers=CPUExecutionProvider" in info.notes and "cache=" in info.notes


# --- quantised variants ---------------------------------------------------------------------


@pytest.mark.parametrize("variant,matrix_bytes", [("int8", 1), ("int4", 0.5)])
def test_quantised_runs_and_reports_agreement(variant, matrix_bytes, tiny_model, prompt_ids, hf_reference, fp32):
    engine, _, info = load(tiny_model, variant)
    try:
        # Stored size: the quantised matrices with their scales (int4: + 4 bytes per block of 32).
        config = tiny_model.gpt2_config
        assert config.weight_bytes(matrix_bytes, 4) * 0.99 <= info.weight_bytes_per_token
        assert info.weight_bytes_per_token <= config.weight_bytes(matrix_bytes + 0.125, 4) * 1.01
        assert info.weight_bytes_per_token < fp32[2].weight_bytes_per_token
        tokens = greedy(engine, prompt_ids, 30)
        reference = hf_reference.greedy(prompt_ids, 30)
        agree = next((i for i, (a, b) in enumerate(zip(tokens, reference)) if a != b), len(tokens))
        print(
            f"onnx-{variant}: first {agree} of 30 greedy tokens equal to hf fp32; "
            f"{sum(a == b for a, b in zip(tokens, reference))} equal in place"
        )
        # No exactness, but a working quantisation keeps the logits close to fp32's.
        quantised, exact = engine.forward_logits(prompt_ids), fp32[0].forward_logits(prompt_ids)
        correlation = np.corrcoef(quantised.ravel(), exact.ravel())[0, 1]
        print(f"onnx-{variant}: logit correlation with fp32 {correlation:.4f}")
        assert np.isfinite(quantised).all() and correlation > 0.9
        assert all(0 <= t < 50257 for t in tokens)
    finally:
        engine.close()


# --- the cache ----------------------------------------------------------------------------


def test_cache_reused_without_rebuild(fp32, tiny_model):
    folder = onnx_cache.variant_dir(tiny_model, "fp32")
    before = model_files(folder)
    engine, recorder, info = load(tiny_model)
    engine.close()
    assert not recorder.built(), recorder.messages
    assert "cache=hit" in info.notes
    assert model_files(folder) == before


def test_build_reports_progress_and_leaves_only_finished_files(tiny_model, fp32):
    artifact_cache.discard(onnx_cache.variant_dir(tiny_model, "int8"))
    fractions: list[float] = []
    recorder = Recorder()
    artefact = onnx_cache.ensure(
        tiny_model, "int8", lambda m, f=None: (recorder(m, f), f is not None and fractions.append(f))
    )
    assert artefact.built
    assert any("quantising int8" in m for m in recorder.messages), recorder.messages
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    manifest = json.loads((artefact.folder / artifact_cache.MANIFEST).read_text())
    assert set(manifest["files"]) == {p.name for p in artefact.folder.iterdir()} - {artifact_cache.MANIFEST}
    assert not [p for p in artefact.folder.parent.iterdir() if p.name.startswith(".")]


def test_rebuilt_after_truncation(tiny_model, fp32):
    load(tiny_model, "int8")[0].close()
    folder = onnx_cache.variant_dir(tiny_model, "int8")
    path = max(folder.iterdir(), key=lambda p: p.stat().st_size)  # the weights (.onnx.data)
    with path.open("r+b") as handle:
        handle.truncate(path.stat().st_size // 2)
    engine, recorder, info = load(tiny_model, "int8")
    engine.close()
    assert recorder.built() and "cache=built" in info.notes
    assert valid(folder, tiny_model, "int8")


def test_rebuilt_when_the_session_cannot_open(tiny_model, fp32):
    """Same size and mtime as recorded (so the manifest passes), but garbage inside."""
    load(tiny_model, "int8")[0].close()
    folder = onnx_cache.variant_dir(tiny_model, "int8")
    path = folder / onnx_cache.MODEL_FILE
    stat = path.stat()
    path.write_bytes(b"\x00" * stat.st_size)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    engine, recorder, info = load(tiny_model, "int8")
    engine.close()
    assert any("unusable" in m for m in recorder.messages) and "cache=built" in info.notes


@pytest.mark.parametrize("field", ["format", "weights_hash", "files"])
def test_rebuilt_when_the_manifest_disagrees(field, tiny_model, fp32):
    load(tiny_model, "int8")[0].close()
    path = onnx_cache.variant_dir(tiny_model, "int8") / artifact_cache.MANIFEST
    manifest = json.loads(path.read_text())
    if field == "weights_hash":  # what it was built for
        manifest["meta"][field] = "0" * 16
    else:
        manifest[field] = {"format": 0, "files": {}}[field]
    path.write_text(json.dumps(manifest))
    engine, recorder, info = load(tiny_model, "int8")
    engine.close()
    assert recorder.built() and "cache=built" in info.notes


def test_same_bytes_edited_in_place_are_caught(tiny_model, fp32):
    load(tiny_model, "int8")[0].close()
    folder = onnx_cache.variant_dir(tiny_model, "int8")
    path = folder / onnx_cache.MODEL_FILE
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF  # same size, new mtime: the sha256 is checked
    path.write_bytes(bytes(data))
    assert not valid(folder, tiny_model, "int8")


def test_separate_cache_for_different_weights(tmp_path, tiny_model, fp32, prompt_ids):
    from whistle_stop.backends.sources.model_files import resolve_model
    from whistle_stop.backends.sources.random_weights import write_random_model

    write_random_model(tiny_model.config, tmp_path / "other", seed=1)
    other = resolve_model(str(tmp_path / "other"))
    assert other.weights_hash != tiny_model.weights_hash
    assert onnx_cache.variant_dir(other, "fp32") != onnx_cache.variant_dir(tiny_model, "fp32")
    engine, recorder, _ = load(other)
    try:
        assert recorder.built()
        assert not np.allclose(engine.prefill(prompt_ids), fp32[0].prefill(prompt_ids))
    finally:
        engine.close()
    assert valid(onnx_cache.variant_dir(tiny_model, "fp32"), tiny_model, "fp32")


def test_abandoned_build_folders_are_removed(tiny_model, fp32):
    parent = onnx_cache.variant_dir(tiny_model, "fp32").parent
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    leftover = parent / f".int8.build-{dead.pid}-deadbeef"
    leftover.mkdir()
    (leftover / "model.onnx").write_bytes(b"half")
    artifact_cache.remove_abandoned(parent)
    assert not leftover.exists()


def test_builder_exits_when_its_parent_goes(tmp_path, tiny_model):
    """A worker killed mid-export closes the builder's stdin: the builder must stop, not finish."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "whistle_stop.backends.engines.onnx.build",
            "--variant",
            "fp32",
            "--out",
            str(tmp_path),
            "--weights",
            str(tiny_model.safetensors),
            "--config",
            str(tiny_model.folder / "config.json"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert "exporting" in child.stdout.readline().decode()  # sent before torch is even imported
    child.stdin.close()
    assert child.wait(timeout=60) == 3  # the watchdog's exit status, not a finished export (0)
    assert not (tmp_path / onnx_cache.MODEL_FILE).exists()


def test_failed_build_says_why_and_leaves_nothing(tiny_model, monkeypatch, tmp_path):
    monkeypatch.setenv("WHISTLE_STOP_CACHE", str(tmp_path))
    monkeypatch.setattr(onnx_cache, "ensure", lambda *a: artifact_cache.Artifact(tmp_path / "missing", {}, True))
    with pytest.raises(onnx_cache.OnnxBuildError, match="int8"):
        onnx_cache.rebuild(tiny_model, "int8", Recorder())
    folder = onnx_cache.variant_dir(tiny_model, "int8")
    assert not folder.exists() and not list(folder.parent.glob(".*"))  # no staging folder, no lock


def test_cache_hit_does_not_import_torch(fp32, tiny_model):
    code = (
        "import sys\n"
        "from whistle_stop.backends.sources.model_files import resolve_model\n"
        "from whistle_stop.backends.engine import EngineOptions\n"
        "from whistle_stop.backends.engines.onnx.engine import OnnxEngine\n"
        "info = OnnxEngine('onnx', EngineOptions(threads=1)).load(resolve_model('random:tiny'), lambda *a: None)\n"
        "print('cache=hit' in info.notes, 'torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
        env=dict(os.environ),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False"]


@pytest.mark.parametrize("holder_alive", [True, False])
def test_build_lock_waits_for_a_live_builder_and_breaks_a_dead_ones(holder_alive, tiny_model, fp32):
    folder = onnx_cache.variant_dir(tiny_model, "int8")
    artifact_cache.discard(folder)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    if not holder_alive:
        holder.kill()
        holder.wait()
    lock = folder.parent / ".int8.lock"
    lock.write_text(str(holder.pid))

    class ReleasingRecorder(Recorder):
        """The live holder "finishes" (frees the lock) once the builder is seen waiting for it."""

        def __call__(self, message: str, fraction: float | None = None) -> None:
            super().__call__(message, fraction)
            if "waiting for another process" in message:
                lock.unlink(missing_ok=True)

    try:
        recorder = ReleasingRecorder()
        artefact = onnx_cache.ensure(tiny_model, "int8", recorder)
    finally:
        holder.kill()
        holder.wait()
    assert artefact.built and not lock.exists()
    assert any("waiting for another process" in m for m in recorder.messages) == holder_alive


def test_cancelled_worker_leaves_no_half_cache(tmp_path, monkeypatch, tiny_model):
    """Kill the worker (what Cancel does after its grace period) while its builder exports."""
    import threading

    import psutil

    from whistle_stop.backends import registry
    from whistle_stop.backends.worker.events import Progress
    from whistle_stop.backends.worker.process import Worker, WorkerError

    monkeypatch.setenv("WHISTLE_STOP_CACHE", str(tmp_path))  # a cold cache; the worker inherits it
    exporting = threading.Event()
    builders: list[psutil.Process] = []

    def on_event(event) -> None:
        if isinstance(event, Progress) and "exporting" in event.message and not exporting.is_set():
            builders.extend(psutil.Process(worker.pid).children(recursive=True))
            exporting.set()
            os.kill(worker.pid, signal.SIGKILL)

    worker = Worker(registry.get("onnx"), tiny_model, EngineOptions(threads=1), on_event=on_event)
    with pytest.raises(WorkerError):
        worker.start()
    assert exporting.is_set() and builders
    gone, alive = psutil.wait_procs(builders, timeout=30)
    assert not alive, "the builder outlived its worker"
    folder = onnx_cache.variant_dir(tiny_model, "fp32")
    assert not folder.exists()  # only a hidden staging folder may remain, removed by the next build
    artifact_cache.remove_abandoned(folder.parent)
    assert not [p for p in folder.parent.iterdir() if ".build-" in p.name]


@pytest.mark.slow
def test_gpt2_size_greedy_equals_hf():
    """GPT-2 small's shapes (12 layers, 12 heads, 768 wide): 50 greedy tokens equal to HF's."""
    from whistle_stop.backends.sources.model_files import resolve_model
    from whistle_stop.backends.sources.prompts import prompt_of_length

    model = resolve_model("random:gpt2")
    ids = prompt_of_length(50)
    tokens = engine_tokens("onnx", model, ids, 50, threads=2)
    assert tokens == engine_tokens("hf", model, ids, 50, threads=2)
