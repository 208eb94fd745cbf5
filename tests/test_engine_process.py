"""The harness that keeps native crashes out of pytest's process (tests/engine_process.py), and the
app's own worker naming the signal that killed an engine."""

from __future__ import annotations

import pytest

from tests import fake_engines
from tests.engine_process import ChildCrashed, EngineProcess, in_child
from whistle_stop.backends import registry


def _segfault() -> None:
    import ctypes

    ctypes.string_at(0)


def test_a_segfaulting_engine_fails_one_test_naming_the_engine_and_its_signal(tiny_model, prompt_ids):
    spec = fake_engines.spec("crashy-native", segfault_at=2)
    with EngineProcess(spec, tiny_model) as engine:
        assert engine.prefill(prompt_ids)[100] == 1.0  # calls go through the pipe
        engine.decode(100)
        killed = r"engine 'crashy-native' was killed by SIGSEGV \(exit code -11\) during decode"
        with pytest.raises(ChildCrashed, match=killed):
            engine.decode(101)


def test_an_engine_that_fails_to_load_raises_its_own_error(tiny_model):
    with pytest.raises(RuntimeError, match="scripted load failure"):
        EngineProcess(fake_engines.spec("noload", fail_load=True), tiny_model)


def test_a_function_that_segfaults_in_a_child_is_one_clear_failure():
    with pytest.raises(ChildCrashed, match=r"_segfault was killed by SIGSEGV"):
        in_child(_segfault)
    assert in_child(sum, [1, 2, 3]) == 6


def test_the_apps_worker_names_the_signal(tiny_model):
    from whistle_stop.backends.runs.bench import BenchConfig, BenchSession

    specs = {"crashy-native": fake_engines.spec("crashy-native", segfault_at=1)}
    config = BenchConfig(
        model="random:tiny", backends=tuple(specs), prompt_tokens=8, new_tokens=4, repeats=1, warmup=0, threads=1
    )
    with registry.use(specs.values()):
        (run,) = BenchSession(config).run().runs
    assert run.status == "crashed" and "killed by SIGSEGV (exit code -11)" in run.error
