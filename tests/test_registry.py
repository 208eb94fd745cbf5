"""The registry holds every engine fact the rest of the code needs: nothing outside an engine's module names one."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from tests import fake_engines
from tests.engine_process import in_child
from whistle_stop.backends import registry
from whistle_stop.backends.engine import Capabilities, Engine, EngineOptions, ServerEngine
from whistle_stop.backends.registry import BUILT_IN, EngineSpec, Role
from whistle_stop.backends.runs.config import BenchConfig

ROOT = Path(__file__).resolve().parent.parent
# Where engines are used, never named: the run code, records, the command line, profiles, the window.
NAME_FREE = (
    "backends/runs",
    "backends/results",
    "backends/cli",
    "backends/profile",
    "backends/profilers",
    "backends/machine",
    "backends/worker",
    "backends/report",
    "backends/storage",
    "backends/sources",
    "gui",
)
# A literal that is an engine's name by coincidence only: (file, literal) -> what it is there.
COINCIDENCES = {("backends/results/environment.py", "numpy"): "the numpy distribution, whose version is recorded"}


def _engine_literals(path: Path) -> list[tuple[int, str]]:
    """(line, literal) of every string literal in the file that is a built-in engine's name (f-strings' parts too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in BUILT_IN
    ]


def test_no_engine_is_named_outside_its_own_module():
    found = []
    for folder in NAME_FREE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            found += [
                f"{relative}:{line}: {literal!r}"
                for line, literal in _engine_literals(path)
                if (relative, literal) not in COINCIDENCES
            ]
    assert not found, "engine names outside their modules (put the fact on the registry entry):\n" + "\n".join(found)


def test_the_name_check_sees_quoted_names_in_any_form(tmp_path):
    source = tmp_path / "x.py"
    source.write_text("a = 'null'\nb = f\"{a}\" + \"hf\"\nc = ['vllm-bf16', 'hf-int8x']\n")
    assert _engine_literals(source) == [(1, "null"), (2, "hf"), (3, "vllm-bf16")]


def test_one_reference_one_calibration_engine_and_the_servers():
    assert [s.name for s in BUILT_IN.values() if s.role is Role.REFERENCE] == [registry.reference()]
    assert [s.name for s in BUILT_IN.values() if s.role is Role.CALIBRATION] == [registry.with_role(Role.CALIBRATION)]
    servers = registry.serving_concurrently()
    assert servers and all(BUILT_IN[n].serves_concurrently for n in servers)
    assert BenchConfig().backends == (registry.reference(),)
    assert BenchConfig(backends=("x", "y")).reference_backend == "x"
    assert BenchConfig(backends=("x", registry.reference())).reference_backend == registry.reference()


def test_without_the_reference_a_run_is_compared_with_its_first_fp32_engine():
    """A quantised engine first in the run's order (onnx-int8 before native in the registry, as the
    window orders them) is not the baseline while a full-precision engine runs beside it."""
    by_precision: dict[str, list[str]] = {}
    for spec in BUILT_IN.values():
        if spec.role is Role.NONE:
            by_precision.setdefault(spec.precision, []).append(spec.name)
    int8, fp32, bf16 = by_precision["int8"][0], by_precision["fp32"][-1], by_precision["bf16"][0]
    assert BenchConfig(backends=(int8, bf16, fp32)).reference_backend == fp32
    assert BenchConfig(backends=(int8, fp32), reference=int8).reference_backend == int8  # --reference wins
    assert BenchConfig(backends=(int8, bf16)).reference_backend == int8  # no fp32 engine: the first
    calibration = registry.with_role(Role.CALIBRATION)
    assert BenchConfig(backends=(int8, calibration, fp32)).reference_backend == fp32
    assert BenchConfig(backends=(calibration, int8)).reference_backend == int8
    assert BenchConfig(backends=(calibration,)).reference_backend == calibration
    assert BenchConfig(backends=(fp32, registry.reference())).reference_backend == registry.reference()


def test_the_cli_defaults_and_help_come_from_the_registry(capsys):
    from whistle_stop.backends.cli.common import config_from_args
    from whistle_stop.backends.cli.parser import build_parser

    assert config_from_args(build_parser().parse_args(["bench"])).backends == (registry.reference(),)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert all(name in help_text for name in registry.serving_concurrently())
    assert f"(see `main.py backends`; default: {registry.reference()})" in help_text


def test_rows_are_typed_and_short():
    for spec in BUILT_IN.values():
        assert spec.name and spec.description and ":" in spec.target and isinstance(spec.engine_args, dict)
    long_lines = [
        n for n, line in enumerate((ROOT / "backends" / "registry.py").read_text().splitlines(), 1) if len(line) > 120
    ]
    assert not long_lines


def test_availability_imports_no_engine_nor_its_packages():
    """`backends`, presets and the window ask every engine (the requirements of its own module too)
    without importing the engine or the packages it needs."""
    import subprocess
    import sys

    code = (
        "import sys; from whistle_stop.backends import registry; "
        "[registry.available(name) for name in registry.names()]; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'onnxruntime') "
        "or m.endswith('.engine') and 'engines' in m))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
    assert all(spec.requirement.count(":") == 1 for spec in BUILT_IN.values() if spec.requirement)


def test_use_installs_test_engines_for_the_process_and_restores_the_registry():
    before = dict(registry.ENGINES)
    with registry.use([fake_engines.spec("scripted-a"), fake_engines.spec("scripted-b")]):
        assert registry.names()[-2:] == ["scripted-a", "scripted-b"]
        assert registry.get("scripted-a").engine_args == {}
        with registry.use([fake_engines.spec("scripted-c")]):
            assert "scripted-c" in registry.names()
        assert "scripted-c" not in registry.names()
        assert registry.available("scripted-a") == (True, "")
    assert before == registry.ENGINES and registry.ENGINES == BUILT_IN


def _capabilities() -> dict[str, Capabilities]:
    """Each available built-in engine's declared Capabilities (imports its class: in a child)."""
    import importlib

    out = {}
    for spec in BUILT_IN.values():
        if registry.available(spec.name)[0]:
            module, name = spec.target.split(":")
            out[spec.name] = getattr(importlib.import_module(module), name).capabilities
    return out


def test_the_registry_says_what_each_engine_class_declares():
    capabilities = in_child(_capabilities, timeout_s=300)
    for name, declared in capabilities.items():
        assert declared.serves_concurrently == BUILT_IN[name].serves_concurrently, name
        assert not declared.serves_concurrently or declared.own_loop, name  # a server streams its tokens


def test_an_engine_is_named_at_construction_and_keeps_its_own_run_notes():
    first = registry.create(registry.with_role(Role.CALIBRATION), EngineOptions(threads=1))
    second = registry.create_from_spec(fake_engines.spec("scripted"), EngineOptions(threads=1))
    assert first.name == registry.with_role(Role.CALIBRATION) and second.name == "scripted"
    first.run_notes = "only mine"
    assert second.run_notes == "" and "run_notes" in vars(first)


def test_an_engine_that_streams_must_declare_it():
    with pytest.raises(TypeError, match="own_loop"):

        class Undeclared(fake_engines.ScriptedEngine):
            def stream(self, token_ids, new_tokens, sampler, cancel=None):
                yield 0

    class Declared(fake_engines.ScriptedEngine):
        capabilities = Capabilities(own_loop=True)

        def stream(self, token_ids, new_tokens, sampler, cancel=None):
            yield 0

    assert Declared.capabilities.own_loop and not fake_engines.ScriptedEngine.capabilities.own_loop


def test_only_server_engines_have_server_metrics():
    assert not hasattr(Engine, "server_metrics") and not hasattr(fake_engines.ScriptedEngine, "server_metrics")
    assert ServerEngine.capabilities == Capabilities(own_loop=True, serves_concurrently=True)

    class Server(ServerEngine):
        def load(self, model, progress):
            raise NotImplementedError

        def prefill(self, token_ids):
            return np.zeros(1, np.float32)

        def decode(self, token_id):
            return np.zeros(1, np.float32)

        def server_metrics(self):
            return None

    assert Server("server", EngineOptions()).server_metrics() is None


def test_a_spec_names_its_fields():
    with pytest.raises(TypeError):
        EngineSpec("x", "m:C", "positional")  # type: ignore[misc]


def test_an_fp32_engine_whose_settings_lower_its_precision_is_no_reference_while_another_is():
    """native with an 8-bit KV cache stayed the fp32 baseline of the others' agreement."""
    from whistle_stop.backends.engines.native_options import NativeOptions

    eight_bit = {"native": NativeOptions(kv="int8")}
    assert BenchConfig(backends=("native", "numpy"), engine_options=eight_bit).reference_backend == "numpy"
    assert BenchConfig(backends=("native", "numpy")).reference_backend == "native"
    assert BenchConfig(backends=("native", "native-int8"), engine_options=eight_bit).reference_backend == "native"
