"""The one artefact cache every converting engine builds into (ONNX's behaviour is in test_onnx)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from whistle_stop.backends.storage import artifact_cache


def _write(out: Path, text: str = "data") -> dict:
    (out / "sub").mkdir()
    (out / "sub" / "file.bin").write_text(text)
    return {"tool": "test"}


def test_built_once_then_hit_with_details(isolated_cache):
    first = artifact_cache.ensure("test", "k1", "v", _write, meta={"format": "t1"})
    second = artifact_cache.ensure("test", "k1", "v", lambda out: 1 / 0, meta={"format": "t1"})
    assert first.built and not second.built and second.folder == first.folder
    assert second.details == {"tool": "test"} and "sub/file.bin" in second.manifest["files"]
    assert not [p for p in first.folder.parent.iterdir() if p.name.startswith(".")]  # no staging, no lock


def test_rebuilt_when_corrupt_or_built_with_other_settings(isolated_cache):
    folder = artifact_cache.ensure("test", "k2", "v", _write, meta={"format": "t1"}).folder
    (folder / "sub" / "file.bin").write_text("dat")  # shorter
    messages: list[str] = []
    again = artifact_cache.ensure(
        "test", "k2", "v", _write, lambda m, f=None: messages.append(m), meta={"format": "t1"}
    )
    assert again.built and any("rebuilding cached test/v: sub/file.bin has 3 bytes" in m for m in messages)
    assert artifact_cache.check(folder, {"format": "t2"}).startswith("built with other settings")
    assert artifact_cache.ensure("test", "k2", "v", _write, meta={"format": "t2"}).built


@pytest.mark.parametrize(
    "key, edit",
    [
        ("meta", lambda m: {**m, "meta": "t1"}),  # valid JSON of the wrong shape, as a hand edit leaves it
        ("entries", lambda m: {**m, "files": {name: 5 for name in m["files"]}}),
        ("files", lambda m: {**m, "files": list(m["files"])}),
        ("list", lambda m: [m]),
    ],
)
def test_a_manifest_of_the_wrong_shape_is_rebuilt_not_a_crash(isolated_cache, key, edit):
    folder = artifact_cache.ensure("test", f"shape-{key}", "v", _write, meta={"format": "t1"}).folder
    manifest = folder / artifact_cache.MANIFEST
    manifest.write_text(json.dumps(edit(json.loads(manifest.read_text()))))
    assert artifact_cache.check(folder, {"format": "t1"})
    assert artifact_cache.ensure("test", f"shape-{key}", "v", _write, meta={"format": "t1"}).built
    assert not artifact_cache.check(folder, {"format": "t1"})


def test_failed_build_leaves_nothing(isolated_cache):
    def broken(out: Path) -> None:
        (out / "half").write_text("x")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):  # the build's own error reaches the caller
        artifact_cache.ensure("test", "k3", "v", broken)
    parent = artifact_cache.cache_dir("test", "k3")
    assert list(parent.iterdir()) == []


def test_concurrent_builders_build_once(isolated_cache):
    calls: list[int] = []
    all_started = threading.Event()

    def slow(out: Path) -> None:
        calls.append(1)
        all_started.wait(10)  # the build is still going while the other builders arrive
        _write(out)

    results = []
    threads = [
        threading.Thread(target=lambda: results.append(artifact_cache.ensure("test", "k4", "v", slow)))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    all_started.set()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and sorted(r.built for r in results) == [False, False, True]
    assert artifact_cache.check(results[0].folder) == ""


def test_miss_is_timed_and_a_hit_costs_nothing(isolated_cache):
    def slow(out: Path) -> dict:
        time.sleep(0.05)
        return _write(out)

    first = artifact_cache.ensure("test", "timed", "v", slow, meta={"format": "t1"})
    second = artifact_cache.ensure("test", "timed", "v", slow, meta={"format": "t1"})
    assert first.cache_state == "miss" and first.build_s >= 0.05
    assert second.cache_state == "hit" and second.build_s == 0.0
    rebuilt = artifact_cache.rebuild("test", "timed", "v", slow, meta={"format": "t1"})
    assert rebuilt.cache_state == "miss" and rebuilt.build_s > 0


def test_engine_folders_without_importing_the_engine(tiny_model):
    from whistle_stop.backends import registry

    assert artifact_cache.engine_folders(registry.get("numpy"), tiny_model) == []
    for name, variant in [
        ("onnx", "fp32"),
        ("onnx-int8", "int8"),
        ("llamacpp-q4_0", "q4_0"),
        ("ctranslate2-int8", "int8"),
        ("openvino", "fp32"),
    ]:
        folders = artifact_cache.engine_folders(registry.get(name), tiny_model)
        assert len(folders) == 1 and folders[0].name == variant, (name, folders)


def test_sha256_of_a_file_matches_hashlib_and_needs_no_python_3_11(tmp_path):
    import hashlib

    from whistle_stop.backends.storage.digest import CHUNK, sha256_of

    data = bytes(range(256)) * (CHUNK // 256 * 2 + 3)  # over two chunks, and a part
    path = tmp_path / "blob"
    path.write_bytes(data)
    with path.open("rb") as handle:
        assert sha256_of(handle) == hashlib.sha256(data).hexdigest()


def test_a_lock_file_of_garbage_has_no_owner_and_is_broken_when_old(tmp_path):
    """'²' passes str.isdigit() but not int(): a garbled lock is no owner's, not a crash of the build."""
    import os

    from whistle_stop.backends.storage.artifact_cache import _build_lock

    folder = tmp_path / "artefact"
    lock = tmp_path / ".artefact.lock"
    lock.write_text("²")
    old = time.time() - 60
    os.utime(lock, (old, old))
    with _build_lock(folder, "a test artefact", lambda *args: None):
        assert lock.read_text().strip() == str(os.getpid())
