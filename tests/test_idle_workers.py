"""Idle workers' CPU during another engine's run (fair mode): recorded per run, and small."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest

from tests import fake_engines
from whistle_stop.backends import registry
from whistle_stop.backends.runs import orchestrator as orchestrator_module
from whistle_stop.backends.runs.bench import BenchConfig, BenchSession
from whistle_stop.backends.runs.orchestrator import SETTLE_MAX_S, Orchestrator, cpu_seconds


def _run(backends, specs=None, mode="fair", **config):
    cfg = BenchConfig(
        model="random:tiny",
        backends=tuple(backends),
        new_tokens=config.pop("new_tokens", 8),
        repeats=config.pop("repeats", 2),
        warmup=config.pop("warmup", 1),
        threads=1,
        mode=mode,
        **config,
    )
    with registry.use((specs or {}).values()):
        return BenchSession(cfg).run()


class IdleSpinEngine(fake_engines.ScriptedEngine):
    """From its load on, a thread of its worker burns half a core (10 ms busy, 10 ms asleep), idle or not."""

    def load(self, model, progress):
        threading.Thread(target=_half_a_core, daemon=True).start()
        return super().load(model, progress)


def _half_a_core() -> None:
    while True:
        end = time.perf_counter() + 0.01
        while time.perf_counter() < end:
            pass
        time.sleep(0.01)


def test_idle_cpu_is_what_the_idle_worker_used(tiny_model, monkeypatch):
    """Each run records the other worker's CPU over its span: half a core from the spinning one,
    next to nothing from the quiet one."""
    monkeypatch.setattr(orchestrator_module, "SETTLE_MAX_S", 0.3)  # the spinner never settles: wait less for it
    spinner = replace(fake_engines.spec("spins", decode_s=0.02), target="tests.test_idle_workers:IdleSpinEngine")
    specs = {"quiet": fake_engines.spec("quiet", decode_s=0.02), "spins": spinner}
    result = _run(["quiet", "spins"], specs, new_tokens=10)
    measured = [r for r in result.runs if not r.is_warmup]
    assert len(measured) == 4 and all(r.status == "ok" for r in measured)
    idle = {r.run_id: r.idle_cpu_pct for r in measured}
    assert all(8 < idle[f"quiet/r{i}"] < 80 for i in (1, 2)), idle  # the spinner's 50% (a busy machine: less)
    assert all(idle[f"spins/r{i}"] < 3 for i in (1, 2)), idle


def test_one_engine_or_a_race_has_no_idle_worker(tiny_model):
    alone = _run(["a"], {"a": fake_engines.spec("a")})
    assert all(r.idle_cpu_pct is None for r in alone.runs)
    specs = {"a": fake_engines.spec("a"), "b": fake_engines.spec("b")}
    race = _run(["a", "b"], specs, mode="race")
    assert all(r.idle_cpu_pct is None for r in race.runs)


@pytest.mark.skipif(
    not (registry.available("numpy")[0] and registry.available("null")[0]), reason="numpy or null engine unavailable"
)
def test_idle_null_and_numpy_workers_use_almost_no_cpu(tiny_model):
    result = _run(["numpy", "null"], new_tokens=40, repeats=2)
    measured = [r for r in result.runs if not r.is_warmup and r.status == "ok"]
    assert len(measured) == 4
    # Generous bound (a shared test machine): the target is < 1% of the run's wall time.
    assert all(r.idle_cpu_pct is not None and r.idle_cpu_pct < 10 for r in measured), [
        (r.run_id, r.idle_cpu_pct) for r in measured
    ]


def test_cpu_seconds_of_gone_processes_is_zero():
    assert cpu_seconds([2**22 + 12345]) == 0.0


def test_a_worker_spawns_only_once_the_live_ones_are_quiet(tiny_model, monkeypatch):
    """A cold start is timed too: each spawn after the first waits, as each run does, until the live
    workers stop spinning down their thread pools (Orchestrator.settle)."""
    from whistle_stop.backends.runs.orchestrator import Orchestrator
    from whistle_stop.backends.worker.process import Worker

    order: list[tuple[str, object]] = []
    settle, start = Orchestrator.settle, Worker.start

    def settle_noted(self, pids):
        order.append(("settle", tuple(pids)))
        return settle(self, pids)

    def start_noted(self):
        order.append(("spawn", self.spec.name))
        return start(self)

    monkeypatch.setattr(Orchestrator, "settle", settle_noted)
    monkeypatch.setattr(Worker, "start", start_noted)
    specs = {"a": fake_engines.spec("a"), "b": fake_engines.spec("b")}
    _run(["a", "b"], specs, repeats=1)
    spawns = [i for i, (kind, _) in enumerate(order) if kind == "spawn"]
    assert [order[i][1] for i in spawns] == ["a", "b"]
    assert spawns[0] == 0 or order[spawns[0] - 1][0] != "settle"  # nothing to wait for before the first
    kind, pids = order[spawns[1] - 1]
    assert kind == "settle" and len(pids) == 1  # b waited for a's worker


# Pure Python children (no native code): a duty cycle of ~30% of one core in 15 ms bursts, and one asleep.
_DUTY_CYCLE = """
import time
print("ready", flush=True)
while True:
    end = time.perf_counter() + 0.015
    while time.perf_counter() < end:
        pass
    time.sleep(0.035)
"""
_ASLEEP = 'import time\nprint("ready", flush=True)\ntime.sleep(600)'


def _started(code: str) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"  # its start-up's CPU is behind it
    return child


def test_settle_waits_for_a_duty_cycle_and_not_for_a_sleeper():
    """Quiet is judged over a window the CPU clock resolves: a process using ~30% of a core in bursts
    is never quiet (one 20 ms poll often fell between its bursts), one asleep is at once."""
    config = BenchConfig(model="random:tiny", backends=("a",), threads=1)
    with registry.use([fake_engines.spec("a")]):
        orchestrator = Orchestrator(config)
    busy, asleep = _started(_DUTY_CYCLE), _started(_ASLEEP)
    try:
        assert orchestrator.settle([busy.pid]) >= SETTLE_MAX_S
        assert orchestrator.settle([asleep.pid]) < SETTLE_MAX_S / 2
    finally:
        for child in (busy, asleep):
            child.kill()
            child.wait()
