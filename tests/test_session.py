"""Run order, warm-ups, race mode and agreement, with scripted engines."""

from tests import fake_engines
from whistle_stop.backends import registry
from whistle_stop.backends.results.summary import summarize_backends
from whistle_stop.backends.runs.bench import BenchConfig, BenchSession
from whistle_stop.backends.status import RunStatus
from whistle_stop.backends.worker.events import BackendEvent, RunRequest


def _run(specs, **kwargs):
    requests = []

    def on_event(event):
        if isinstance(event, BackendEvent) and isinstance(event.event, RunRequest):
            requests.append(event.event.run_id)

    config = BenchConfig(
        model="random:tiny",
        backends=tuple(specs),
        prompt_tokens=4,
        new_tokens=kwargs.pop("new_tokens", 3),
        threads=1,
        **kwargs,
    )
    with registry.use(specs.values()):
        return BenchSession(config, on_event=on_event).run(), requests


def test_fair_order_interleaves_repeats_and_warms_up_first(tiny_model):
    specs = {n: fake_engines.spec(n) for n in ("a", "b", "c")}
    result, order = _run(specs, repeats=3, warmup=1)
    assert order == ["a/w1", "b/w1", "c/w1", "a/r1", "b/r1", "c/r1", "b/r2", "c/r2", "a/r2", "c/r3", "a/r3", "b/r3"]
    warmups = [r for r in result.runs if r.is_warmup]
    assert len(warmups) == 3 and all(r.cold_start_s is not None for r in warmups)
    assert all(r.cold_start_s is None for r in result.runs if not r.is_warmup)
    assert [s.runs for s in summarize_backends(result.runs)] == [3, 3, 3]  # warm-ups excluded
    assert not any(r.concurrent for r in result.runs)


def test_race_mode_runs_everything_and_flags_it(tiny_model):
    specs = {n: fake_engines.spec(n, decode_s=0.005) for n in ("a", "b")}
    result, order = _run(specs, repeats=2, warmup=0, mode="race")
    assert sorted(order) == ["a/r1", "a/r2", "b/r1", "b/r2"]
    assert all(r.concurrent and r.status == "ok" for r in result.runs)


def test_agreement_with_the_reference(tiny_model):
    specs = {"ref": fake_engines.spec("ref"), "same": fake_engines.spec("same")}
    result, _ = _run(specs, repeats=1, warmup=0, new_tokens=5, reference="ref")
    assert {r.backend: (r.reference, r.agree_tokens, r.first_divergence) for r in result.runs} == {
        "ref": ("ref", 5, None),
        "same": ("ref", 5, None),
    }
    assert result.environment["reference"] == "ref"
    assert result.environment["model"]["weights"] == "random"
    assert result.environment["settings"]["new_tokens"] == 5


def test_a_run_that_stops_short_counts_in_no_figure(tiny_model):
    # A server that ignores "no early stop" made 3 of 5 tokens: less work than every other engine's.
    specs = {"ref": fake_engines.spec("ref"), "short": fake_engines.own_loop_spec("short", stops_after=3)}
    result, _ = _run(specs, repeats=2, warmup=0, new_tokens=5, reference="ref")
    short = [r for r in result.runs if r.backend == "short"]
    assert [(r.status, r.tokens_generated) for r in short] == [(RunStatus.ERROR, 3)] * 2
    assert "3 of 5 tokens" in short[0].error
    assert [s.runs for s in summarize_backends(result.runs)] == [2, 0]
    assert result.failed  # exit status 1


def test_the_session_records_the_cached_probes_whoever_runs_it(tiny_model, monkeypatch):
    """The machine's cached bandwidth and peaks went into environment.json only when the CLI ran the
    bench: a folder the window wrote lacked them, and its report its floor and roofline lines."""
    from whistle_stop.backends.machine import bandwidth, compute_peak

    probe = bandwidth.Bandwidth(42.0, 41.0, 1 << 28, 1, 5, "cpu", "2026-11-27T12:00:00")
    monkeypatch.setattr(bandwidth, "cached_bandwidth", lambda threads: probe)
    monkeypatch.setattr(compute_peak, "cached_compute_peaks", lambda threads: None)
    result, _ = _run({"a": fake_engines.spec("a")})
    assert result.environment["bandwidth"]["gb_s"] == 42.0 and "compute_peaks" not in result.environment
