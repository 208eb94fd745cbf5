"""The pieces the sessions share: the fair order, the context sent with each run, the scoring maths."""

import math

import numpy as np

from tests import fake_engines
from whistle_stop.backends import registry
from whistle_stop.backends.runs.bench import BenchConfig
from whistle_stop.backends.runs.orchestrator import fair_order
from whistle_stop.backends.runs.sweep import SweepGrid, SweepSession
from whistle_stop.backends.status import RunStatus
from whistle_stop.backends.worker.events import BackendEvent, RunContext, RunRequest
from whistle_stop.backends.worker.scoring import nll_of, top_logits


def test_fair_order_rotates_and_never_runs_an_engine_twice_in_a_row():
    """Back to back, an engine's second run would find its weights still in the caches."""
    assert [fair_order(("a", "b", "c"), r) for r in (1, 2, 3, 4)] == [
        ("a", "b", "c"),
        ("b", "c", "a"),
        ("c", "a", "b"),
        ("a", "b", "c"),
    ]
    for n in range(2, 7):
        engines = tuple("abcdef"[:n])
        sequence = [name for r in range(1, 2 * n + 2) for name in fair_order(engines, r)]
        assert all(x != y for x, y in zip(sequence, sequence[1:])), sequence
        for r in range(1, n + 1):  # every engine in every round
            assert sorted(fair_order(engines, r)) == list(engines)


def test_nll_of_is_the_summed_negative_log_softmax():
    logits = np.array([[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]], np.float32)
    labels = np.array([2, 1])
    expected = sum(
        math.log(sum(math.exp(float(v)) for v in row)) - float(row[label]) for row, label in zip(logits, labels)
    )
    assert math.isclose(nll_of(logits, labels, chunk=1), expected, rel_tol=1e-12)


def test_top_logits_best_first_with_log_probabilities():
    answer = top_logits("x", np.array([0.0, 2.0, 1.0]), 2)
    assert answer.token_ids == (1, 2) and answer.logits == (2.0, 1.0)
    assert math.isclose(sum(math.exp(p) for p in top_logits("x", np.array([0.0, 2.0, 1.0]), 3).logprobs), 1.0)


def test_sweep_requests_carry_their_cell(tiny_model):
    contexts = []

    def on_event(event):
        if isinstance(event, BackendEvent) and isinstance(event.event, RunRequest):
            contexts.append((event.event.run_id, event.context))

    specs = {"a": fake_engines.spec("a")}
    config = BenchConfig(model="random:tiny", backends=("a",), threads=1, repeats=1, warmup=1)
    with registry.use(specs.values()):
        result = SweepSession(config, SweepGrid((4,), (3,)), on_event=on_event, measure_bandwidth=False).run()
    assert contexts == [
        ("a/p4n3/w1", RunContext(1, True, "p4n3", 4, 3)),
        ("a/p4n3/r1", RunContext(1, False, "p4n3", 4, 3)),
    ]
    assert all(r.status is RunStatus.OK for r in result.runs) and not result.failed
