"""Which buffers llama.cpp keeps the weights in, and whether its extra ones are safe on this CPU.

llama.cpp's CPU backend can move quantised weights into "extra buffer types": CPU_REPACK
(interleaved layouts for the CPU's SIMD products, e.g. q4_0 as q4_0_8x8) and, on CPUs with AMX
tiles, an AMX buffer. On some AMX CPUs the AMX path segfaults in ggml_backend_amx_mul_mat
(llama.cpp issue 20824, open upstream, machine-dependent: the same build runs on other AMX CPUs).
Whether it crashes here is not guessed from the CPU's name: a child process loads the GGUF with
the extra buffers and decodes a few tokens, once per CPU, llama.cpp build and quantisation, and
the answer is cached like a kernel. Where the child dies, the engine loads with plain buffers
(`use_extra_bufts = false`, as llama.cpp's `--no-repack`): no AMX and no repacking, and says so.

Light on purpose: the engine's process imports llama_cpp; this module's probe runs it elsewhere.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from importlib import metadata
from pathlib import Path

from ...errors import describe_exit
from ...machine.cpu import cpuinfo_field
from ...storage import artifact_cache

PROBE_KIND = "llamacpp-probe"
PROBE_FORMAT = 1  # bump when the probe's test changes: older answers no longer count
PROBE_TIMEOUT_S = 120.0
RESULT_FILE = "result.json"
UPSTREAM_BUG = "llama.cpp issue 20824: segfault in ggml_backend_amx_mul_mat"
# Why it crashes with GCC 12 (its `_tile_loadconfig` drops the tile configuration's stores), and the
# rebuild that keeps them: verified on an AMX Xeon (docs/engines.md, "Slow on some CPUs")
AMX_FIX = (
    "on an AMX CPU, a GCC 12 build drops the tile configuration's stores (llama.cpp PR 26954); for AMX "
    "rebuild llama-cpp-python with CMAKE_ARGS=\"-DCMAKE_CXX_FLAGS='-fno-tree-dse -fno-dse'\""
)
_BUFFER_LINE = re.compile(r"load_tensors:\s+(\S+) model buffer size =\s+([\d.]+) MiB")


class WeightBuffers(str, Enum):
    """What the user asks for (`--llamacpp-weight-buffers`)."""

    AUTO = "auto"  # the extra buffers where the probe ran them on this CPU, else plain
    EXTRA = "extra"  # llama.cpp's default: repacked (and AMX) buffers where it has them
    PLAIN = "plain"  # use_extra_bufts = false: weights as stored in the GGUF, mapped


@dataclass(frozen=True)
class BufferChoice:
    extra: bool  # load with llama.cpp's extra buffer types
    reason: str  # for the engine's notes
    probe_s: float = 0.0  # seconds this load spent probing (a one-time build, 0.0 when cached)


def choose(gguf: Path, quant: str, threads: int, wanted: WeightBuffers) -> BufferChoice:
    """Whether to load `gguf` with the extra buffers, and why."""
    if wanted is WeightBuffers.PLAIN:
        return BufferChoice(False, "plain weight buffers as asked (no repacking, no AMX)")
    if wanted is WeightBuffers.EXTRA:
        return BufferChoice(True, "llama.cpp's extra weight buffers as asked (not probed)")
    started = time.perf_counter()
    artefact = artifact_cache.ensure(
        PROBE_KIND, probe_key(), quant, lambda folder: _probe(gguf, threads, folder), meta={"format": PROBE_FORMAT}
    )
    result = json.loads((artefact.folder / RESULT_FILE).read_text())
    probe_s = time.perf_counter() - started if artefact.built else 0.0
    if result["extra_ok"]:
        return BufferChoice(True, "llama.cpp's extra weight buffers allowed (a probe ran them on this CPU)", probe_s)
    return BufferChoice(
        False,
        f"extra weight buffers off: a probe of them on this CPU {result['detail']} "
        f"({UPSTREAM_BUG}); plain buffers, so no AMX and no repacking ({AMX_FIX})",
        probe_s,
    )


def probe_key() -> str:
    """This CPU (its flags) and this llama.cpp build (its version and its libraries' files: pip builds
    it from source with the machine's features, so a rebuild of the same version counts as another)."""
    parts = [cpuinfo_field("flags"), _llama_version(), *_library_stamps(), str(PROBE_FORMAT)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _llama_version() -> str:
    try:
        return metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        return "unknown"


def _library_stamps() -> list[str]:
    """Name, size and mtime of llama_cpp's shared libraries, found without importing (loading) them."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        return []
    stamps = []
    for library in sorted(p for p in (Path(spec.origin).parent / "lib").glob("*") if p.is_file()):
        stat = library.stat()
        stamps.append(f"{library.name}:{stat.st_size}:{stat.st_mtime_ns}")
    return stamps


def probe_argv(gguf: Path, threads: int) -> list[str]:
    return [sys.executable, "-m", __name__, str(gguf), str(threads)]


def _probe(gguf: Path, threads: int, folder: Path) -> dict:
    """Run the extra buffers in a child; a death by signal or a hang means they are not safe here."""
    try:
        done = subprocess.run(probe_argv(gguf, threads), capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        extra_ok, detail = False, f"hung for {PROBE_TIMEOUT_S:g} s"
    else:
        if done.returncode > 0:  # not a crash of the buffers: an error this load would hit too
            raise RuntimeError(f"the llama.cpp buffer probe failed: {done.stderr.strip()[-500:]}")
        extra_ok = done.returncode == 0
        detail = "ran" if extra_ok else describe_exit(done.returncode)
    (folder / RESULT_FILE).write_text(json.dumps({"extra_ok": extra_ok, "detail": detail}))
    return {"llama_cpp_python": _llama_version(), "extra_ok": extra_ok}


# --- in the engine's process (llama_cpp imported) ---------------------------------------------------


@contextmanager
def plain_buffers(enabled: bool = True) -> Iterator[None]:
    """Llama() takes no use_extra_bufts argument: its model params start from
    llama_model_default_params(), wrapped here for the one construction."""
    import llama_cpp.llama_cpp as native

    if not enabled:
        yield
        return
    default = native.llama_model_default_params

    def without_extra():
        params = default()
        params.use_extra_bufts = False
        return params

    native.llama_model_default_params = without_extra
    try:
        yield
    finally:
        native.llama_model_default_params = default


@contextmanager
def buffer_sizes() -> Iterator[dict[str, float]]:
    """MiB of weights per buffer type (CPU_Mapped, CPU_REPACK, AMX...), from llama.cpp's load log."""
    import llama_cpp
    from llama_cpp import _logger

    sizes: dict[str, float] = {}

    @llama_cpp.llama_log_callback
    def collect(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        match = _BUFFER_LINE.search(text.decode(errors="replace"))
        if match:
            sizes[match.group(1)] = sizes.get(match.group(1), 0.0) + float(match.group(2))

    llama_cpp.llama_log_set(collect, ctypes.c_void_p(0))
    try:
        yield sizes
    finally:
        llama_cpp.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))


def describe_sizes(sizes: dict[str, float]) -> str:
    return ", ".join(f"{name} {mib:.1f} MiB" for name, mib in sorted(sizes.items(), key=lambda x: -x[1])) or "unknown"


def _run_probe(gguf: str, threads: int) -> None:
    """The child: a batched prompt (the products' GEMM path) and a few single-token steps."""
    import llama_cpp

    llm = llama_cpp.Llama(
        model_path=gguf, n_ctx=64, n_batch=64, n_ubatch=64, n_threads=threads, n_threads_batch=threads, verbose=False
    )
    llm.eval(list(range(100, 116)))
    for token in (11, 262, 290):
        llm.eval([token])
    llm.close()


if __name__ == "__main__":
    _run_probe(sys.argv[1], int(sys.argv[2]))
