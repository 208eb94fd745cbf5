"""The engines whistle-stop knows, imported lazily by path, and what the rest of the code may know of them.

Listing engines or asking whether one is available never imports its heavy packages, so an
optional engine that is not installed costs nothing. Whatever the CLI, the window or the run
code needs to know about an engine before running it (the reference, the calibration engine,
which ones serve concurrently, its runtime packages) is a field of its row (an EngineSpec, engine_spec.py;
the shipped rows are engine_table.py's): nothing outside an engine's own module names it.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence

from .engine import Engine, EngineOptions
from .engine_spec import EngineSpec, Role
from .engine_table import BUILT_IN_SPECS
from .errors import UsageError
from .machine.gpu import cuda_available

BUILT_IN: dict[str, EngineSpec] = {spec.name: spec for spec in BUILT_IN_SPECS}
# The engines this process knows: the built-in ones, plus any a test installs with `use`.
ENGINES: dict[str, EngineSpec] = dict(BUILT_IN)


@contextlib.contextmanager
def use(specs: Iterable[EngineSpec]) -> Iterator[None]:
    """Add these engines (a test's scripted ones) to the registry of this whole process while the
    block runs; a spawned worker receives its EngineSpec itself, so it needs nothing more."""
    saved = dict(ENGINES)
    ENGINES.update({spec.name: spec for spec in specs})
    try:
        yield
    finally:
        ENGINES.clear()
        ENGINES.update(saved)


def names() -> list[str]:
    return list(ENGINES)


def get(name: str) -> EngineSpec:
    try:
        return ENGINES[name]
    except KeyError:
        raise UsageError(f"unknown backend {name!r}; known backends: {', '.join(ENGINES)}") from None


def with_role(role: Role) -> str:
    """The one engine with this role (the reference, the calibration engine)."""
    found = [spec.name for spec in ENGINES.values() if spec.role is role]
    if len(found) != 1:
        raise LookupError(f"the registry needs exactly one {role.value} engine, not {found}")
    return found[0]


def reference() -> str:
    """The engine ticked by default and compared with when selected: the baseline."""
    return with_role(Role.REFERENCE)


def reference_among(backends: Sequence[str], lowered: Iterable[str] = ()) -> str:
    """The engine a run's tokens are compared with: the reference where it runs, else the first fp32
    engine (agreement then still means agreement with full precision, whatever order the engines
    run in) that its settings leave at fp32 (`lowered`: those whose settings do not, e.g. an 8-bit
    KV cache), else the first engine. The calibration engine's tokens are a baseline only alone."""
    if reference() in backends:
        return reference()
    specs = {name: ENGINES.get(name) for name in backends}
    usable = [name for name, spec in specs.items() if spec is None or spec.role is not Role.CALIBRATION]
    fp32 = [name for name in usable if (spec := specs[name]) is not None and spec.precision == "fp32"]
    full = [name for name in fp32 if name not in set(lowered)]
    return (full or fp32 or usable or list(backends))[0]


def serving_concurrently() -> list[str]:
    """The engines that serve several streams at once (servers): the only ones with load levels above 1."""
    return [spec.name for spec in ENGINES.values() if spec.serves_concurrently]


def available(name: str) -> tuple[bool, str]:
    """(True, "") or (False, why not) without importing the engine's packages."""
    spec = get(name)
    missing = [m for m in spec.requires if importlib.util.find_spec(m) is None]
    if missing:
        return False, f"{', '.join(missing)} not installed: {spec.install}"
    if spec.needs == "cuda" and not cuda_available():
        return False, "needs a CUDA GPU (none found)"
    if spec.needs == "linux" and not sys.platform.startswith("linux"):
        return False, "needs Linux (its runtime publishes Linux wheels only)"
    if spec.needs == "cc" and not c_compiler_found():
        return False, "needs a C compiler to build its kernel (none found: install gcc, or set $CC)"
    try:
        module_spec = importlib.util.find_spec(spec.target.split(":")[0])
    except ModuleNotFoundError:
        module_spec = None
    if module_spec is None:
        return False, "not built into this version yet"
    why = unmet_requirement(spec)
    return not why, why


def unmet_requirement(spec: EngineSpec) -> str:
    """Why the engine's own module says it cannot run here ("" when it can, or declares nothing)."""
    if not spec.requirement:
        return ""
    module_name, function_name = spec.requirement.split(":")
    check: Callable[..., str] = getattr(importlib.import_module(module_name), function_name)
    return check(**spec.engine_args)


def c_compiler_found() -> bool:
    """Whether the compiler the own kernels are built with ($CC, else cc or gcc on PATH) exists. A
    preset then takes its next candidate instead of an engine that would fail at load."""
    import shutil  # here: a worker imports the registry before Ready, and shutil is in its cold start

    from .kernels.native import compiler  # imports no engine package

    cc = compiler()
    return cc is not None and shutil.which(cc) is not None


def create(name: str, options: EngineOptions) -> Engine:
    return create_from_spec(get(name), options)


def create_from_spec(spec: EngineSpec, options: EngineOptions) -> Engine:
    """Import the engine's module (the measured import cost) and construct it."""
    module_name, class_name = spec.target.split(":")
    cls: Callable[..., Engine] = getattr(importlib.import_module(module_name), class_name)
    return cls(spec.name, options, **spec.engine_args)
