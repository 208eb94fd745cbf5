"""The engine room's layers: module-level imports between backends/'s rooms point one way only.

A room is a top-level module or sub-package of backends/ (`engine.py`, `results/`, ...). The graph holds
the imports every reader of a module pays for: its top-level statements, not imports inside functions
and not those under `if TYPE_CHECKING:`. The test reads the source with `ast` and imports nothing.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ROOT / "backends"
GUI = ROOT / "gui"
# The one module of backends/ that may import gui/: the CLI's launcher of the window.
GUI_LAUNCHER = BACKENDS / "cli" / "main.py"

# backends/'s rooms from the bottom up (docs/architecture.md draws the same): a module-level import
# goes to a room of its own layer or of one below. Rooms of one layer may import each other, without
# a cycle.
LAYERS = (
    # plain types: the settings, statuses, errors, configs and captures everything else passes around
    (
        "errors.py",
        "status.py",
        "progress.py",
        "speculation.py",
        "gpt2_config.py",
        "sampling.py",
        "engine_settings.py",
        "engine_spec.py",
        "engine_table.py",
        "server_metrics.py",
        "profilers/",
    ),
    ("storage/", "sources/"),  # files, caches, models, prompts
    ("machine/",),  # the CPU, its threads and BLAS, the bandwidth and compute-peak probes
    ("engine.py", "kernels/"),  # the engine interface; the C kernels
    ("registry.py", "families.py"),  # every engine by name, and what its row says
    ("engines/",),
    ("worker/",),  # one engine in a spawned process, and the events it sends
    ("results/",),  # records, statistics, files, the verdict
    ("profile/",),  # where an engine's time goes
    ("runs/",),  # sessions: bench, sweep, quality, profile
    ("presets.py", "serve/"),
    ("report/",),
    ("cli/",),
)
LAYER_OF = {room: level for level, rooms in enumerate(LAYERS) for room in rooms}


@dataclass(frozen=True)
class Import:
    """One module-level import from one room to another, where it is written."""

    source: str
    target: str
    file: Path
    line: int

    def where(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports run when the module is imported: top level, inside if/try blocks, not under TYPE_CHECKING."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(statements: list[ast.stmt]) -> None:
        for statement in statements:
            if isinstance(statement, (ast.Import, ast.ImportFrom)):
                found.append(statement)
            elif isinstance(statement, ast.If):
                if not _is_type_checking(statement.test):
                    visit(statement.body)
                visit(statement.orelse)
            elif isinstance(statement, ast.Try):
                visit(statement.body)
                for handler in statement.handlers:
                    visit(handler.body)
                visit(statement.orelse)
                visit(statement.finalbody)
            elif isinstance(statement, ast.With):
                visit(statement.body)

    visit(tree.body)
    return found


def _package_parts(file: Path) -> list[str]:
    """The dotted package of a file, as a list of names from the checkout's root (backends/x/y.py -> backends, x)."""
    parts = list(file.relative_to(ROOT).with_suffix("").parts)
    return parts[:-1]


def _targets(statement: ast.Import | ast.ImportFrom, file: Path) -> list[list[str]]:
    """Each imported module as checkout-relative names (whistle_stop.backends.x -> backends, x)."""
    if isinstance(statement, ast.Import):
        names = [alias.name.split(".") for alias in statement.names]
    else:
        if statement.level:
            base = _package_parts(file)
            base = base[: len(base) - statement.level + 1]
        else:
            base = []
        module = statement.module.split(".") if statement.module else []
        prefix = base + module
        # `from . import x` imports the module x; `from .x import y` imports module x.
        names = [prefix + [alias.name] for alias in statement.names] if not module else [prefix]
    resolved = []
    for name in names:
        if name[:1] == ["whistle_stop"]:
            name = name[1:]
        resolved.append(name)
    return resolved


def _room(parts: list[str]) -> str | None:
    """The room of backends/ a dotted name falls in, or None outside backends/."""
    if len(parts) < 2 or parts[0] != "backends":
        return None
    name = parts[1]
    if (BACKENDS / name).is_dir():
        return name + "/"
    if (BACKENDS / f"{name}.py").is_file():
        return name + ".py"
    return None


def _files(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*.py") if "__pycache__" not in path.parts)


def room_imports() -> list[Import]:
    """Every module-level import from one room of backends/ to another."""
    imports = []
    for file in _files(BACKENDS):
        source = _room(list(file.relative_to(ROOT).with_suffix("").parts))
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
        for statement in _module_level_imports(tree):
            for target in _targets(statement, file):
                room = _room(target)
                if source and room and room != source:
                    imports.append(Import(source, room, file, statement.lineno))
    return imports


def find_cycle(imports: list[Import]) -> list[Import] | None:
    """One cycle in the rooms' graph, as the imports that make it (the last one closes it), or None."""
    edges: dict[str, dict[str, Import]] = {}
    for edge in imports:
        edges.setdefault(edge.source, {}).setdefault(edge.target, edge)
    state: dict[str, int] = {}  # 1: on the path being explored, 2: done
    path: list[Import] = []

    def visit(room: str) -> list[Import] | None:
        state[room] = 1
        for target, edge in sorted(edges.get(room, {}).items()):
            if state.get(target) == 1:
                start = next((i for i, step in enumerate(path) if step.source == target), len(path))
                return path[start:] + [edge]
            if target not in state:
                path.append(edge)
                found = visit(target)
                if found:
                    return found
                path.pop()
        state[room] = 2
        return None

    for room in sorted(edges):
        if room not in state:
            found = visit(room)
            if found:
                return found
    return None


def _describe(cycle: list[Import]) -> str:
    steps = "\n".join(f"  {edge.source} -> {edge.target}  ({edge.where()})" for edge in cycle)
    return f"the rooms of backends/ import in a circle; {cycle[-1].where()} closes it:\n{steps}"


def test_backends_rooms_import_without_a_cycle():
    cycle = find_cycle(room_imports())
    assert cycle is None, _describe(cycle)


def test_every_room_imports_its_own_layer_or_below():
    imports = room_imports()
    rooms = {edge.source for edge in imports} | {edge.target for edge in imports}
    unplaced = sorted(rooms - set(LAYER_OF))
    assert not unplaced, f"rooms of backends/ in no layer (add them to LAYERS and docs/architecture.md): {unplaced}"
    upward = [
        f"{edge.where()}: {edge.source} (layer {LAYER_OF[edge.source] + 1}) imports {edge.target} "
        f"(layer {LAYER_OF[edge.target] + 1})"
        for edge in imports
        if LAYER_OF[edge.target] > LAYER_OF[edge.source]
    ]
    assert not upward, "module-level imports pointing up:\n" + "\n".join(upward)


# Imports inside a function that point up a layer: only the machine's probes, which run kernels/'s C code
# (built with a compiler) in their own spawned process. Any other such import hides a dependency the
# layers forbid: move the code instead.
LATE_UPWARD = {("machine/bandwidth.py", "kernels/"), ("machine/compute_peak.py", "kernels/")}


def _type_checking_imports(tree: ast.Module) -> set[int]:
    return {
        id(node)
        for statement in tree.body
        if isinstance(statement, ast.If) and _is_type_checking(statement.test)
        for node in ast.walk(statement)
        if isinstance(node, (ast.Import, ast.ImportFrom))
    }


def test_imports_inside_functions_do_not_hide_an_upward_import():
    hidden = []
    for file in _files(BACKENDS):
        source = _room(list(file.relative_to(ROOT).with_suffix("").parts))
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
        skip = {id(node) for node in _module_level_imports(tree)} | _type_checking_imports(tree)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in skip:
                continue
            for target in _targets(node, file):
                room = _room(target)
                if not (source and room and room != source) or LAYER_OF[room] <= LAYER_OF[source]:
                    continue
                if (file.relative_to(BACKENDS).as_posix(), room) not in LATE_UPWARD:
                    hidden.append(f"{file.relative_to(ROOT)}:{node.lineno}: {source} imports {room} in a function")
    assert not hidden, "imports inside functions pointing up a layer:\n" + "\n".join(hidden)


def test_the_cycle_finder_names_the_import_that_closes_a_cycle():
    here = Path(__file__)
    a_b = Import("a/", "b/", here, 1)
    b_c = Import("b/", "c/", here, 2)
    c_a = Import("c/", "a/", here, 3)
    assert find_cycle([a_b, b_c]) is None
    assert find_cycle([a_b, b_c, c_a]) == [a_b, b_c, c_a]


def test_module_level_imports_skip_functions_and_type_checking():
    tree = ast.parse(
        "import a\nif TYPE_CHECKING:\n    import b\ntry:\n    import c\nexcept ImportError:\n    import d\n"
        "def f():\n    import e\n"
    )
    assert [statement.names[0].name for statement in _module_level_imports(tree)] == ["a", "c", "d"]


def test_backends_never_imports_gui_but_for_the_window_launcher():
    offenders = []
    for file in _files(BACKENDS):
        if file == GUI_LAUNCHER:
            continue
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(node, file):
                    if target[:1] == ["gui"]:
                        offenders.append(f"{file.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"backends/ imports gui/ (only {GUI_LAUNCHER.relative_to(ROOT)} may): {offenders}"
