"""`--native-isa`: the native engines at every instruction-set level this CPU executes.

Each level is a build of its own (machine/isa.py's flags) in a spawned worker: fp32 greedy equal to
transformers', every stored type's logits within its tolerance, `native-spec` exact against `native`
at the same level. Which levels run is the dispatch's own answer (`executable_levels`); the others
are skipped with its reason, so the output says which ran here and why the rest did not. A level
this CPU lacks is refused in one line (the CLI exits 2); that is checked with another CPU's flags.
"""

from __future__ import annotations

import numpy as np
import pytest

from whistle_stop.backends.cli.main import main
from whistle_stop.backends.engine import EngineOptions
from whistle_stop.backends.engines.native_options import ISA_CHOICES, NativeOptions
from whistle_stop.backends.kernels import native
from whistle_stop.backends.machine import isa
from whistle_stop.backends.machine.isa import LEVELS, Isa

from .conftest import greedy_logits
from .engine_process import EngineProcess
from .test_native_engine import TOLERANCE

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="needs a C compiler")

# An AVX2 machine without AVX-512 (a Zen 2/3 EPYC's flags, shortened)
AVX2_ONLY = "fpu sse2 avx avx2 fma f16c bmi1 bmi2 movbe abm"


def _level(level: Isa) -> Isa:
    """`level` where this CPU executes it; else the test is skipped with the dispatch's reason."""
    reason = isa.why_not(level)
    if reason is not None:
        pytest.skip(f"--native-isa {level.value} cannot run here: {reason}")
    return level


def _options(level: Isa, threads: int = 2) -> EngineOptions:
    return EngineOptions(threads=threads, settings=NativeOptions(isa=level.value))


@pytest.fixture(scope="module")
def at_level(tiny_model):
    """`at_level(name, level)`: the engine in a child at that level, shared by this module's tests."""
    started: dict[tuple[str, Isa], EngineProcess] = {}

    def engine(name: str, level: Isa) -> EngineProcess:
        process = started.get((name, level))
        if process is None or not process.alive:
            process = started[name, level] = EngineProcess(name, tiny_model, options=_options(level))
        return process

    yield engine
    for process in started.values():
        process.close()


def test_the_options_choices_are_the_dispatchs_levels():
    assert tuple(i.value for i in Isa) == ISA_CHOICES
    assert NativeOptions().level == "auto" and NativeOptions(isa="avx2").level == "avx2"
    assert NativeOptions(isa="sse").problem() == "--native-isa must be one of auto, amx, avx512, avx2, c, not 'sse'"
    assert NativeOptions(isa="c").problem() == ""  # every CPU runs the plain-C paths


def test_a_level_this_cpu_lacks_is_refused_in_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(isa, "cpuinfo_field", lambda field: AVX2_ONLY)
    problem = NativeOptions(isa="avx512").problem()
    assert problem.startswith("--native-isa avx512: the avx512 instruction-set level cannot run here: this CPU lacks")
    assert "this CPU runs: avx2, c" in problem and "\n" not in problem
    assert NativeOptions(isa="avx2").problem() == ""
    code = main(
        ["bench", "--model", "random:tiny", "--backends", "native", "--native-isa", "amx"] + ["--out", str(tmp_path)]
    )
    err = capsys.readouterr().err
    assert code == 2 and "native: --native-isa amx: " in err and err.count("\n") == 1, err
    assert not any(tmp_path.iterdir())  # nothing ran, nothing written


def test_the_window_form_hint_names_the_levels_here():
    hint = NativeOptions().hint()
    assert hint == "instruction sets this CPU executes: " + ", ".join(i.value for i in isa.executable_levels())


@pytest.mark.parametrize("level", LEVELS, ids=lambda i: i.value)
def test_fp32_greedy_equals_transformers_at_each_level(level, at_level, prompt_ids, hf_reference):
    engine = at_level("native", _level(level))
    assert engine.info.isa == level.value
    assert f"instruction set {level.value} (as asked (--native-isa)" in engine.info.notes
    assert engine.tokens(prompt_ids, 24) == hf_reference.greedy(prompt_ids, 24)


@pytest.mark.parametrize("level", LEVELS, ids=lambda i: i.value)
@pytest.mark.parametrize("name", [n for n in TOLERANCE if n != "native"])
def test_each_precisions_logits_stay_within_tolerance_at_each_level(name, level, at_level, prompt_ids, hf_reference):
    """Prefill's products (AMX tiles, AVX-512, AVX2 or plain C) and decode's, against transformers."""
    engine = at_level(name, _level(level))
    tokens, logits = greedy_logits(engine, prompt_ids, 8)
    reference = hf_reference.logits(prompt_ids + tokens)[len(prompt_ids) - 1 :]
    assert np.abs(logits - reference).max() < TOLERANCE[name], level


@pytest.mark.parametrize("level", LEVELS, ids=lambda i: i.value)
def test_native_spec_is_exact_at_each_level(level, at_level, tiny_model, prompt_ids):
    """The verify pass's products at the level equal a one-token decode's: greedy output is native's."""
    expected = at_level("native", _level(level)).tokens(prompt_ids, 24)
    with EngineProcess("native-spec", tiny_model, options=_options(level)) as spec:
        assert spec.info.isa == level.value
        assert spec.tokens(prompt_ids, 24) == expected


def test_auto_runs_the_best_level_and_says_why(tiny_model):
    with EngineProcess("native", tiny_model, options=EngineOptions(threads=1)) as engine:
        best = isa.best_level().value
        assert engine.info.isa == best
        assert f"instruction set {best} (auto: the best level this CPU executes" in engine.info.notes
