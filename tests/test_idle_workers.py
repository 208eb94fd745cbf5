"""Idle workers' CPU during another engine's run (fair mode): recorded per run, and small."""

from __future__ import annotations

import pytest

from tests import fake_engines
from whistle_stop.backends import registry
from whistle_stop.backends.runs.bench import BenchConfig, BenchSession
from whistle_stop.backends.runs.orchestrator import cpu_seconds


def _run(backends, specs=None, mode="fair", **config):
    cfg = BenchConfig(model="random:tiny", backends=tuple(backends), new_tokens=config.pop("new_tokens", 8),
                      repeats=config.pop("repeats", 2), warmup=config.pop("warmup", 1), threads=1, mode=mode,
                      **config)
    return BenchSession(cfg, specs=specs).run()


def test_idle_cpu_is_recorded_for_every_run_when_two_engines_run(tiny_model):
    specs = {"a": fake_engines.spec("a", decode_s=0.002), "b": fake_engines.spec("b", decode_s=0.002)}
    result = _run(["a", "b"], specs)
    measured = [r for r in result.runs if not r.is_warmup]
    assert len(measured) == 4 and all(r.status == "ok" for r in measured)
    for record in measured:
        assert isinstance(record.idle_cpu_pct, float) and record.idle_cpu_pct >= 0


def test_one_engine_or_a_race_has_no_idle_worker(tiny_model):
    alone = _run(["a"], {"a": fake_engines.spec("a")})
    assert all(r.idle_cpu_pct is None for r in alone.runs)
    specs = {"a": fake_engines.spec("a"), "b": fake_engines.spec("b")}
    race = _run(["a", "b"], specs, mode="race")
    assert all(r.idle_cpu_pct is None for r in race.runs)


@pytest.mark.skipif(not (registry.available("numpy")[0] and registry.available("null")[0]),
                    reason="numpy or null engine unavailable")
def test_idle_null_and_numpy_workers_use_almost_no_cpu(tiny_model):
    result = _run(["numpy", "null"], new_tokens=40, repeats=2)
    measured = [r for r in result.runs if not r.is_warmup and r.status == "ok"]
    assert len(measured) == 4
    # Generous bound (a shared test machine): the target is < 1% of the run's wall time.
    assert all(r.idle_cpu_pct is not None and r.idle_cpu_pct < 10 for r in measured), \
        [(r.run_id, r.idle_cpu_pct) for r in measured]


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
