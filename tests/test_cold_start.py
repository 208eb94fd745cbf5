"""Cold starts that say their state: artefact cache hit/miss and build time, page-cache state, --cold."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from tests import fake_engines
from tests.conftest import CRASH_PRONE, load_engine_in_worker
from whistle_stop.backends import registry
from whistle_stop.backends.engine import EngineOptions
from whistle_stop.backends.kernels import native as native_kernels
from whistle_stop.backends.runs.bench import BenchConfig
from whistle_stop.backends.runs.sweep import SweepGrid, SweepSession
from whistle_stop.backends.status import RunStatus
from whistle_stop.backends.storage import artifact_cache, page_cache

# (engine, the modules it needs): onnx always runs, the peers when installed.
ARTEFACT_ENGINES = [
    ("onnx", ("onnxruntime", "onnx", "torch")),
    ("llamacpp", ("llama_cpp", "gguf")),
    ("ctranslate2", ("ctranslate2", "transformers", "torch")),
    ("openvino", ("openvino",)),
    ("ortgenai", ("onnxruntime_genai", "onnxruntime", "onnx", "torch")),
    ("openvino-genai", ("openvino_genai", "openvino_tokenizers", "openvino")),
    ("native-int4", ("numpy",)),  # its weights' layout (and its kernel) are built once, then read
    ("native-spec", ("numpy",)),  # the target's layout and the draft's
]


def _quiet(*_args, **_kwargs) -> None:
    pass


@pytest.mark.parametrize("name,modules", ARTEFACT_ENGINES, ids=[e[0] for e in ARTEFACT_ENGINES])
def test_artefact_engine_reports_a_miss_then_a_hit(name, modules, tiny_model, tmp_path, monkeypatch):
    for module in modules:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} not installed")
    if name.startswith("native") and native_kernels.compiler() is None:
        pytest.skip("needs a C compiler")
    monkeypatch.setenv("WHISTLE_STOP_CACHE", str(tmp_path))  # an empty cache: the first load must build
    infos = []
    for _ in range(2):
        if name.startswith(CRASH_PRONE):  # native code: in a spawned child, which inherits the cache above
            with load_engine_in_worker(name, tiny_model) as worker:
                infos.append(worker.info)
            continue
        engine = registry.create(name, EngineOptions(threads=1))
        try:
            infos.append(engine.load(tiny_model, _quiet))
        finally:
            engine.close()
    first, second = infos
    assert first.artifact_cache == "miss" and first.build_s > 0
    assert second.artifact_cache == "hit" and second.build_s == 0.0
    assert first.kv_bytes_per_position > 0 and first.weight_bytes_per_token > 0
    # The parent finds the folder it loaded from without importing the engine.
    folders = artifact_cache.engine_folders(registry.get(name), tiny_model)
    assert folders and all(f.is_dir() and str(f).startswith(str(tmp_path)) for f in folders)
    assert artifact_cache.files_of(folders)


def test_engines_that_build_nothing_say_none(tiny_model):
    engine = registry.create("numpy", EngineOptions(threads=1))
    info = engine.load(tiny_model, _quiet)
    engine.close()
    assert info.artifact_cache == "none" and info.build_s == 0.0
    assert info.kv_bytes_per_position == tiny_model.gpt2_config.kv_bytes_per_position(4)


def _disk_file(size: int) -> Path:
    """A file on a real disk (tmpfs ignores fadvise): the user cache folder if /tmp is tmpfs."""
    import tempfile

    candidates = [Path(tempfile.gettempdir()), Path.home() / ".cache"]
    for folder in candidates:
        if folder.is_dir() and _fs_type(folder) not in ("tmpfs", "ramfs", "overlay"):
            path = folder / f"whistle-stop-page-cache-{os.getpid()}.bin"
            path.write_bytes(os.urandom(size))
            os.sync()  # clean pages only: DONTNEED does not drop dirty ones
            return path
    pytest.skip("no folder on a real disk to test eviction on")


def _fs_type(folder: Path) -> str:
    """The file system type of the mount holding `folder` (Linux: /proc/mounts)."""
    best, kind = "", ""
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            _, mount, fs = line.split()[:3]
            if str(folder.resolve()).startswith(mount) and len(mount) > len(best):
                best, kind = mount, fs
    except OSError:
        return ""
    return kind


@pytest.mark.skipif(not page_cache.measurable(), reason="mincore page-cache state is Linux only")
def test_resident_share_after_read_and_after_eviction():
    path = _disk_file(4 << 20)
    try:
        path.read_bytes()
        read = page_cache.resident_fraction(path)
        assert read is not None and read > 0
        assert page_cache.evict(path)
        after = page_cache.resident_fraction(path)
        if after >= read:
            pytest.skip("this file system does not honour POSIX_FADV_DONTNEED")
        assert after < read
        state = page_cache.before_start(path, [], cold=True)
        assert "evicted" in state.notes and state.weights_page_cached is not None
        assert 0.0 <= state.weights_page_cached < read
    finally:
        path.unlink(missing_ok=True)


def test_resident_fraction_of_nothing_is_unknown(tmp_path):
    assert page_cache.resident_fraction(tmp_path / "missing.bin") is None
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    assert page_cache.resident_fraction(empty) is None


def test_unsupported_eviction_is_said(monkeypatch, tmp_path):
    path = tmp_path / "w.bin"
    path.write_bytes(b"x" * 4096)
    monkeypatch.setattr(page_cache, "evictable", lambda: False)
    state = page_cache.before_start(path, [], cold=True)
    assert "not supported" in state.notes


def test_records_carry_the_page_cache_state_and_cold_note(tiny_model):
    specs = {"a": fake_engines.spec("a")}
    config = BenchConfig(model="random:tiny", backends=("a",), threads=1, repeats=1, warmup=0, cold=True)
    with registry.use(specs.values()):
        result = SweepSession(config, SweepGrid((4,), (3,)), measure_bandwidth=False).run()
    assert result.runs and all(r.status is RunStatus.OK for r in result.runs)
    for record in result.runs:
        assert "--cold" in record.notes
        if page_cache.measurable():
            assert record.weights_page_cached is not None and 0.0 <= record.weights_page_cached <= 1.0


def test_cold_flag_reaches_the_config():
    from whistle_stop.backends.cli.common import config_from_args
    from whistle_stop.backends.cli.parser import build_parser

    args = build_parser().parse_args(["bench", "--backends", "numpy", "--cold"])
    assert config_from_args(args).cold
    assert not config_from_args(build_parser().parse_args(["bench", "--backends", "numpy"])).cold


def test_a_worker_imports_only_what_serving_needs_before_ready():
    """Every import between spawn and Ready is in each engine's cold start: a worker with the numpy
    engine loads nothing for profiling, scoring, load levels, the user cache folder, psutil or
    temporary files (together ~55 ms of its start on a 2-core EPYC)."""
    import subprocess
    import sys

    heavy = [
        "psutil",
        "platformdirs",
        "_hashlib",
        "tempfile",
        "shutil",
        "whistle_stop.backends.profilers.capture",
        "whistle_stop.backends.worker.load_runner",
        "whistle_stop.backends.worker.scoring",
        "torch",
    ]
    # What numpy itself imports is not the app's (numpy 2.5 imports tempfile and shutil, 2.4 does not)
    code = (
        "import sys, numpy; before = set(sys.modules); "
        "import whistle_stop.backends.worker.child, whistle_stop.backends.engines.numpy_runtime.engine; "
        f"print([m for m in {heavy!r} if m in sys.modules and m not in before])"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"


def test_bytecode_check_sees_missing_stale_and_current_modules(tmp_path, monkeypatch):
    """storage/bytecode: what the import system would compile again, by its own header check."""
    import compileall
    import sys

    from whistle_stop.backends.storage import bytecode

    package = tmp_path / "room"
    package.mkdir()
    (package / "a.py").write_text("A = 1\n")
    (package / "b.py").write_text("B = 2\n")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    missing = bytecode.check(package)
    assert (missing.uncompiled, missing.modules) == (2, 2) and missing.compiles_in_every_worker
    assert "2 of the engine room's 2 modules" in bytecode.warning(missing)
    assert compileall.compile_dir(str(package), quiet=1)
    current = bytecode.check(package)
    assert current.uncompiled == 0 and bytecode.warning(current) is None
    (package / "a.py").write_text("A = 10  # edited: another size\n")
    assert bytecode.check(package).uncompiled == 1
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # the interpreter writes it on import: nothing to say
    assert bytecode.warning(bytecode.check(package)) is None


def test_environment_records_the_bytecode_state():
    from whistle_stop.backends.results.environment import collect_environment

    state = collect_environment()["bytecode"]
    assert set(state) == {"writes_bytecode", "uncompiled_modules", "modules"} and state["modules"] > 50
