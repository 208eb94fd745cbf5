"""Build a kernel of this folder with the machine's C compiler, cache it, open it with ctypes.

The shared library goes through the one artefact cache (kernels/<key>/<name>), keyed by the
source and the headers it includes, the compiler, the CPU's flags and the instruction-set level it is
built for (machine/isa.py): `-march=native` code must never run on another CPU. An AMX build links a
second translation unit (AMX_UNITS), the only one compiled with -mamx-*. A build is quick; a machine
without a C compiler gets KernelUnavailable and the caller falls back to a library kernel (and says so in its notes).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..machine.cpu import cpuinfo_field
from ..machine.isa import AMX_UNIT_FLAGS, Isa, compile_flags, resolve
from ..storage import artifact_cache

KIND = "kernels"
# Compiled for speed, fast maths included; linked without -ffast-math: GCC before 13 then links
# crtfastmath.o, whose constructor sets flush-to-zero and denormals-are-zero (MXCSR) for the
# process that loads the library, the sampler's numpy included. The kernels' code is the same.
COMPILE_FLAGS = ("-O3", "-march=native", "-ffast-math", "-fopenmp", "-fPIC")
LINK_FLAGS = ("-shared", "-fopenmp")
LIBS = ("-lm",)  # with -ffast-math, glibc's libm also brings libmvec (vectorised expf)
FLAGS = COMPILE_FLAGS + ("-shared",)  # one command's flags (a test's variant build): not what `load` links
_HERE = Path(__file__).parent
# kernel -> its AMX translation unit, linked into the kernel's AMX (and tile-model) builds only
AMX_UNITS = {"gpt2_step": "amx_prefill.c", "peak": "peak_amx.c"}
TILE_MODEL_DEFINE = "-DWS_TILE_MODEL=1"  # the AMX unit against tiles.h's plain-C model of the tiles


@dataclass(frozen=True)
class Recipe:
    """How one build of a kernel is compiled: the main unit's flags, and the AMX unit with its own."""

    level: Isa
    main_flags: tuple[str, ...]
    amx_unit: str | None = None
    amx_flags: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The recipe as its cache key and build record see it."""
        unit = f"\namx unit {self.amx_unit}: {' '.join(self.amx_flags)}" if self.amx_unit else ""
        link = " ".join(LINK_FLAGS + LIBS)
        return f"level: {self.level.value}\ncompile: {' '.join(self.main_flags)}{unit}\nlink: {link}"


def recipe(name: str, isa: Isa = Isa.AUTO, tile_model: bool = False) -> Recipe:
    """The build of kernel `name` at `isa` (IsaUnavailable for a level this CPU cannot execute).
    `tile_model` (tests only, no user's choice) links the AMX unit built against the plain-C model of
    the tiles, on any CPU, over the level's own build."""
    level = resolve(isa)
    base = tuple(f for f in COMPILE_FLAGS if f != "-march=native")
    main = base + compile_flags(level)
    unit = AMX_UNITS.get(name)
    if unit is None or not (level == Isa.AMX or tile_model):
        return Recipe(level, main)
    main += ("-DWS_AMX=1",)
    if tile_model:
        return Recipe(level, main + (TILE_MODEL_DEFINE,), unit, main + (TILE_MODEL_DEFINE,))
    return Recipe(level, main, unit, base + AMX_UNIT_FLAGS + ("-DWS_AMX=1",))


class KernelUnavailable(RuntimeError):
    """No C compiler, or the kernel did not build: the caller uses its fallback. `compiler_output`
    keeps the compiler's whole stderr; the message has its error lines."""

    def __init__(self, message: str, compiler_output: str = "") -> None:
        super().__init__(message)
        self.compiler_output = compiler_output


_BUILD_S: dict[str, float] = {}  # kernel name -> seconds this process's `load` spent building it (0.0: cached)


def build_report(name: str) -> tuple[float, str]:
    """(build_s, artifact_cache) for an engine's EngineInfo: what `load(name)` spent building (or
    waiting for another process's build of) the kernel in this process, told once (later calls say
    0.0: one engine counts the build), and "miss", "hit", or "none" when it was not loaded. So a first
    use after a change of source, compiler or CPU is build time, not load."""
    seconds = _BUILD_S.get(name)
    if seconds is None:
        return 0.0, "none"
    _BUILD_S[name] = 0.0
    return seconds, "miss" if seconds > 0 else "hit"


def compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def _identity(cc: str) -> str:
    """The compiler as a cache key without running it (a `cc --version` per engine load cost a
    process start): its resolved path, size and mtime change when it is replaced or upgraded."""
    path = shutil.which(cc) or cc
    try:
        stat = os.stat(os.path.realpath(path))
    except OSError as exc:
        raise KernelUnavailable(f"no C compiler at {path}: {exc.strerror}") from exc
    return f"{os.path.realpath(path)}:{stat.st_size}:{stat.st_mtime_ns}"


def _version(cc: str) -> str:
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


@cache
def load(name: str, isa: Isa = Isa.AUTO, tile_model: bool = False) -> ctypes.CDLL:
    """The compiled `<name>.c` of this folder at instruction-set level `isa` (AUTO: the best this CPU
    executes), built on first use on this machine. IsaUnavailable for a level this CPU cannot execute;
    KernelUnavailable without a compiler or when the build fails. `tile_model`: see `recipe`."""
    how = recipe(name, isa, tile_model)
    cc = compiler()
    if cc is None:
        raise KernelUnavailable("no C compiler (cc/gcc) on PATH")
    files = sources(name)
    library = f"lib{name}.so"

    def build(folder: Path) -> dict:
        for file_name, text in files.items():  # the headers beside the source: its #include "..." finds them
            (folder / file_name).write_text(text)
        units = [(folder / f"{name}.c", how.main_flags)]
        if how.amx_unit:
            units.append((folder / how.amx_unit, how.amx_flags))
        compile_and_link(cc, units, folder / library)
        return {
            "compiler": _version(cc),
            "isa": how.level.value,
            "tile_model": tile_model,
            "compile_flags": " ".join(how.main_flags),  # only when building
            "amx_unit_flags": " ".join(how.amx_flags),
            "link_flags": " ".join(LINK_FLAGS + LIBS),
        }

    try:
        artefact = artifact_cache.ensure(KIND, cache_key("\n".join(files.values()), cc, how), name, build)
    except (OSError, artifact_cache.ArtifactError, subprocess.SubprocessError) as exc:
        raise KernelUnavailable(f"{name}.c could not be built: {exc}") from exc
    _BUILD_S[name] = artefact.build_s
    return ctypes.CDLL(str(artefact.folder / library))


def sources(name: str) -> dict[str, str]:
    """`<name>.c`, its AMX unit if it has one, and every header of this folder (what their
    #include "..." reads): file name -> text."""
    headers = {path.name: path.read_text() for path in sorted(_HERE.glob("*.h"))}
    unit = AMX_UNITS.get(name)
    extra = {unit: (_HERE / unit).read_text()} if unit else {}
    return {f"{name}.c": (_HERE / f"{name}.c").read_text(), **extra, **headers}


def cache_key(source: str, cc: str, how: Recipe | None = None) -> str:
    """The build's artefact key: the source (headers included), the compiler, the recipe (level,
    every unit's flags, the link's; default: the best level's) and the CPU's flags."""
    how = how or recipe("", Isa.AUTO)
    return hashlib.sha256("\n".join([source, _identity(cc), how.text, cpuinfo_field("flags")]).encode()).hexdigest()[
        :16
    ]


def compile_and_link(cc: str, units: Path | list[tuple[Path, tuple[str, ...]]], library: Path) -> None:
    """Each unit (a source and its compile flags; a lone source: COMPILE_FLAGS) -> an object file beside
    it (removed after) -> the shared `library` (LINK_FLAGS)."""
    units = [(units, COMPILE_FLAGS)] if isinstance(units, Path) else units
    objects = [source.with_suffix(".o") for source, _ in units]
    try:
        steps = [
            (f"compile {source.name}", [cc, *flags, "-c", str(source), "-o", str(obj)])
            for (source, flags), obj in zip(units, objects)
        ]
        steps.append((f"link {library.name}", [cc, *LINK_FLAGS, *map(str, objects), "-o", str(library), *LIBS]))
        for step, command in steps:
            done = subprocess.run(command, capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                raise KernelUnavailable(f"{cc} could not {step}: {compiler_errors(done.stderr)}", done.stderr)
    finally:
        for obj in objects:
            obj.unlink(missing_ok=True)


def compiler_errors(stderr: str) -> str:
    """Every line of the compiler's output that reports an error ("error:", "fatal error:"; its warnings
    come first and would hide them), or the whole output when none does."""
    errors = [line.strip() for line in stderr.splitlines() if re.search(r"\berror:", line)]
    return "; ".join(errors) if errors else stderr.strip()


def gemv(dtype: str) -> Callable[..., None]:
    """`dtype` "f32" or "bf16": void <dtype>_gemv(const W *, const float *x, const float *b, float *y,
    int64 M, int64 N, int64 K), y = x W^T + b for M rows (gemv.c)."""
    fn = getattr(load("gemv"), f"{dtype}_gemv")
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 3
    return fn


def set_threads(threads: int) -> None:
    """OpenMP's thread count for the kernels of this process (libgomp is one library per process)."""
    if threads > 0:
        load("gemv").gemv_set_threads(ctypes.c_int(threads))


def bind_team(threads: int, bind: Callable[..., int] | None = None) -> bool:
    """Bind this process's OpenMP team of `threads` (a PyTorch process's: torch's own libgomp) one
    thread to a CPU where the rule says so (threads.cpus_to_bind), with `bind(cpus, n)` (a kernel's
    affinity.h export; default gemv.c's); whether it was bound. Call it once the team's work is set
    up and before anything that should keep every CPU starts: the caller's thread is narrowed to the
    first CPU, and what it starts later inherits that. False without a C compiler for gemv.c."""
    from ..machine.threads import cpus_to_bind

    cpus = cpus_to_bind(threads)
    if not cpus:
        return False
    if bind is None:
        try:
            bind = load("gemv").gemv_bind_threads
        except KernelUnavailable:  # no compiler: the team stays where the OS puts it
            return False
        bind.restype = ctypes.c_int
        bind.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    return bind((ctypes.c_int * len(cpus))(*cpus), len(cpus)) == len(cpus)
