"""Presets resolve to available engines only and name the ones they skip, with why."""

import pytest

from whistle_stop.backends import presets, registry
from whistle_stop.backends.cli.main import main
from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.families import families, family, precision_group


def _only(available: set[str]):
    """registry.available as on a machine where only `available` can run."""
    return lambda name: (True, "") if name in available else (False, f"{name} is not installed here")


def test_every_family_is_declared_and_every_declared_name_is_an_engine():
    for key in families():
        assert key in presets.FAMILY_BEST or key in presets.FAMILY_LEFT_OUT, key
    declared = [n for names in presets.FAMILY_BEST.values() for n in names]
    declared += [n for names in presets.PRECISION_BEST.values() for n in names] + list(presets.FOUNDING)
    assert set(declared) <= set(registry.names())
    for key, names in presets.FAMILY_BEST.items():  # a family's picks are its own engines
        assert all(family(registry.get(n)) == key for n in names)
    for group, names in presets.PRECISION_BEST.items():
        assert {precision_group(registry.get(n).precision) for n in names} == {precision_group(group)}


@pytest.mark.parametrize("preset", presets.preset_names())
def test_presets_resolve_to_available_engines_only_and_say_what_they_skip(monkeypatch, preset):
    here = {"hf", "onnx", "onnx-int8", "numpy", "native", "native-int8", "torch-static-compile", "torch-static"}
    monkeypatch.setattr(registry, "available", _only(here))
    choice = presets.resolve(preset)
    assert choice.engines and set(choice.engines) <= here and choice.engines[0] == "hf"
    for skip in choice.skipped:
        assert skip.name not in here and f"{skip.name} is not installed here" in skip.line()
    lines = choice.lines()
    assert lines[0].startswith(f"preset {preset}: hf") and len(lines) == 1 + len(choice.skipped)


def test_founding_and_best_of_family_skip_by_name_and_stand_in_where_a_family_can(monkeypatch):
    monkeypatch.setattr(registry, "available", _only({"hf", "onnx", "numpy", "torch-static"}))
    founding = presets.resolve("founding")
    assert founding.engines == ("hf", "onnx", "numpy")
    assert {s.name for s in founding.skipped} == set(presets.FOUNDING) - {"hf", "onnx", "numpy"}
    best = presets.resolve("best-of-family")
    assert best.engines == ("hf", "torch-static", "onnx", "numpy")
    onnx_int8 = next(s for s in best.skipped if s.name == "onnx-int8")
    assert onnx_int8.instead == "onnx" and "(onnx instead)" in onnx_int8.line()
    everything = presets.resolve("all-available")
    assert "null" not in everything.engines and "remote" not in everything.engines


def test_one_per_precision_keeps_the_reference_first(monkeypatch):
    monkeypatch.setattr(registry, "available", _only({"hf", "native", "native-bf16", "onnx-int8", "onnx-int4"}))
    assert presets.resolve("one-per-precision").engines == ("hf", "native", "native-bf16", "onnx-int8", "onnx-int4")


def test_unknown_preset_is_one_clear_error():
    with pytest.raises(UsageError, match="unknown preset 'fastest'; presets: founding, best-of-family"):
        presets.resolve("fastest")


def test_cli_preset_combines_with_backends_and_names_the_skips(monkeypatch, capsys, tmp_path):
    from tests import fake_engines

    monkeypatch.setattr(registry, "available", _only({"hf", "calm"}))
    monkeypatch.setitem(registry.ENGINES, "calm", fake_engines.spec("calm"))
    captured = {}

    def fake_bench(args):
        from whistle_stop.backends.cli.common import config_from_args

        captured["config"] = config_from_args(args)
        return 0

    monkeypatch.setattr("whistle_stop.backends.cli.main.COMMANDS", {"bench": fake_bench})
    assert main(["bench", "--preset", "founding", "--backends", "calm", "--out", str(tmp_path)]) == 0
    assert captured["config"].backends == ("hf", "calm")
    err = capsys.readouterr().err
    assert (
        "preset founding: hf (+ calm from --backends)" in err
        and "skipped nanogpt: nanogpt is not installed here" in err
    )
    assert main(["bench", "--preset", "fastest", "--out", str(tmp_path)]) == 2
    assert "unknown preset 'fastest'" in capsys.readouterr().err


def test_without_a_c_compiler_the_native_engines_are_unavailable_and_presets_stand_in(monkeypatch):
    """The own C runtime has no fallback kernel: `backends` says so, and a preset takes its next
    candidate rather than four engines that would each fail at load."""
    monkeypatch.setenv("CC", "/nonexistent/cc")
    ok, why = registry.available("native-int8")
    assert not ok and why.startswith("needs a C compiler")
    assert not registry.available("native-spec")[0] and registry.available("numpy")[0]
    choice = presets.resolve("one-per-precision")
    assert not any(name.startswith("native") for name in choice.engines)
    assert "onnx-int8" in choice.engines
    native_int8 = next(s for s in choice.skipped if s.name == "native-int8")
    assert native_int8.instead == "onnx-int8" and "needs a C compiler" in native_int8.line()
