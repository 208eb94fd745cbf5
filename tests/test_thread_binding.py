"""Engines whose team of threads takes every CPU bind one thread to each (backends/machine/threads.py's
cpus_to_bind): unbound, a pool asleep between runs was woken onto its partner's busy CPU every other
run and the first token waited a scheduler tick (+7-15 ms on 2-15 ms; docs/methodology.md). Each
engine is loaded in a spawned child as a worker loads it (EngineOptions.owns_process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .engine_process import EngineProcess, in_child

# engine -> the module its runtime needs (skipped without it)
BOUND = {"native": None, "onnx": "onnxruntime", "torch-static": "torch"}


@pytest.mark.parametrize("name", list(BOUND))
def test_a_team_that_takes_every_cpu_is_bound_one_thread_a_cpu(name, tiny_model):
    if BOUND[name]:
        pytest.importorskip(BOUND[name])
    cpus = every_cpu_or_skip()
    with EngineProcess(name, tiny_model, threads=len(cpus)) as engine:
        listed = engine.apply(thread_cpus)
        notes = engine.info.notes
    assert "each bound to a CPU of its own" in notes
    assert listed[0] == cpus[:1]  # the calling thread runs the team's thread 0
    assert {t[0] for t in listed if len(t) == 1} == set(cpus)  # and one thread on each other CPU


def test_a_smaller_team_is_left_to_the_scheduler(tiny_model):
    """With fewer threads than CPUs the scheduler has an idle CPU to place a waking thread on."""
    cpus = every_cpu_or_skip()
    with EngineProcess("native", tiny_model, threads=len(cpus) - 1) as engine:
        listed = engine.apply(thread_cpus)
        notes = engine.info.notes
    assert all(t == cpus for t in listed) and "bound" not in notes


def test_an_engine_in_a_shared_process_binds_nothing(tiny_model):
    """Outside a worker (a test's, a library user's process) binding would narrow the caller's thread."""
    cpus = every_cpu_or_skip()
    assert in_child(_load_in_place, tiny_model, len(cpus)) == cpus


def _load_in_place(tiny_model, threads: int) -> list[int]:
    """In a child, as a library user would: the engine loaded without the worker's flag; the CPUs the
    calling thread may run on after a prefill."""
    import os

    from whistle_stop.backends.engine import EngineOptions
    from whistle_stop.backends.registry import create

    engine = create("native", EngineOptions(threads=threads))
    engine.load(tiny_model, lambda *args, **kwargs: None)
    engine.prefill([5, 17])
    return sorted(os.sched_getaffinity(0))


def thread_cpus(engine) -> list[list[int]]:
    """In an engine's child, after a prefill: the CPUs each of the process's threads may run on
    (Linux's /proc), the calling (main) thread first."""
    import os
    import threading

    engine.prefill([5, 17, 4000])
    main = threading.get_native_id()
    listed = {}
    for task in os.listdir("/proc/self/task"):
        status = Path(f"/proc/self/task/{task}/status").read_text()
        text = status.split("Cpus_allowed_list:")[1].split()[0]
        cpus = []
        for part in text.split(","):
            low, _, high = part.partition("-")
            cpus += range(int(low), int(high or low) + 1)
        listed[int(task)] = cpus
    return [listed.pop(main), *listed.values()]


def every_cpu_or_skip() -> list[int]:
    """This process's CPUs, or the test skipped where a team cannot be bound (one CPU, no affinity)."""
    import os

    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("CPU affinity is Linux's")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("one CPU: nothing to bind")
    return cpus
