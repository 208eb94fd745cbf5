"""The worker with scripted engines: metrics, crashes, hangs, failures, cancel."""

import sys
import threading
import time
from dataclasses import replace

import psutil
import pytest

from tests import fake_engines
from tests.conftest import live_workers, wait_for
from whistle_stop.backends import registry
from whistle_stop.backends.engine import Capabilities, EngineOptions
from whistle_stop.backends.runs.bench import BenchConfig, BenchSession
from whistle_stop.backends.sampling import SamplingParams
from whistle_stop.backends.worker.events import Progress, RunRequest, Token
from whistle_stop.backends.worker.process import Worker, WorkerError, WorkerState
from whistle_stop.backends.worker.timeouts import Timeouts


def _session(tiny_model, specs, on_event=None, **config):
    names = tuple(specs)
    cfg = BenchConfig(
        model="random:tiny",
        backends=names,
        prompt_tokens=8,
        new_tokens=config.pop("new_tokens", 5),
        repeats=config.pop("repeats", 1),
        warmup=config.pop("warmup", 0),
        threads=1,
        **config,
    )
    with registry.use(specs.values()):  # the session takes its engines' specs now
        return BenchSession(cfg, on_event=on_event)


def test_metrics_of_a_scripted_engine(tiny_model):
    specs = {"slow": fake_engines.spec("slow", prefill_s=0.08, decode_s=0.02)}
    result = _session(tiny_model, specs, new_tokens=6).run()
    (run,) = result.runs
    assert run.status == "ok" and run.tokens_generated == 6
    assert 80 <= run.ttft_ms < 800  # lower bounds are exact; upper ones only catch nonsense
    assert 20 <= run.itl_p50_ms < 200 and 20 <= run.tpot_ms < 200
    assert run.decode_tok_s <= 50
    tokens = [t for t in result.tokens if t.run_id == run.run_id]
    assert [t.token_id for t in tokens] == [100, 101, 102, 103, 104, 105]
    assert tokens[0].itl_ms is None and tokens[0].phase == "prefill"
    assert all(t.itl_ms >= 20 for t in tokens[1:])
    assert run.bandwidth_gb_s == pytest.approx(1e6 * run.decode_tok_s / 1e9)
    assert run.peak_rss_mb > 10 and run.cold_start_s > run.ttft_ms / 1000


def test_a_crashing_engine_does_not_take_the_others_down(tiny_model):
    specs = {"crashy": fake_engines.spec("crashy", crash_at=2), "fine": fake_engines.spec("fine")}
    result = _session(tiny_model, specs, repeats=2).run()
    crashy = [r for r in result.runs if r.backend == "crashy"]
    fine = [r for r in result.runs if r.backend == "fine"]
    assert crashy[0].status == "crashed" and "exit code 3" in crashy[0].error
    assert len(crashy) == 1  # a lost worker gets no further runs
    assert [r.status for r in fine] == ["ok", "ok"]
    assert result.failed


def test_a_hanging_engine_is_killed_after_its_timeout(tiny_model):
    specs = {"hangs": fake_engines.spec("hangs", hang_at=1), "fine": fake_engines.spec("fine")}
    result = _session(tiny_model, specs, timeouts=Timeouts(token_s=1.5)).run()
    hung = next(r for r in result.runs if r.backend == "hangs")
    assert hung.status == "timeout" and "no answer" in hung.error
    assert hung.tokens_generated == 1  # the token before the hang is kept
    assert next(r for r in result.runs if r.backend == "fine").status == "ok"


def test_failures_at_load_and_mid_run_are_recorded(tiny_model):
    specs = {
        "noload": fake_engines.spec("noload", fail_load=True),
        "midway": fake_engines.spec("midway", fail_at=3),
        "fine": fake_engines.spec("fine"),
    }
    result = _session(tiny_model, specs).run()
    by_name = {r.backend: r for r in result.runs}
    assert by_name["noload"].status == "error" and "scripted load failure" in by_name["noload"].error
    assert by_name["midway"].status == "error" and "scripted failure mid-run" in by_name["midway"].error
    assert by_name["midway"].tokens_generated == 3
    assert by_name["fine"].status == "ok"


def test_cancel_stops_within_one_token(tiny_model):
    seen: list[int] = []
    session_box = {}

    def on_event(event):
        inner = getattr(event, "event", None)
        if isinstance(inner, Token) and inner.run_id.startswith("long/"):
            seen.append(inner.t_ns)
            if inner.index == 4:  # (a measured run's tokens reach the parent in batches: later than made)
                session_box["at_ns"] = time.perf_counter_ns()  # the child's clock too (events.py)
                session_box["session"].cancel()

    specs = {"long": fake_engines.spec("long", decode_s=0.02), "never": fake_engines.spec("never")}
    session = _session(tiny_model, specs, new_tokens=1000, on_event=on_event)
    session_box["session"] = session
    result = session.run()
    (run,) = [r for r in result.runs if r.backend == "long"]
    assert run.status == "cancelled" and result.cancelled
    made_after_cancel = [t_ns for t_ns in seen if t_ns > session_box["at_ns"]]
    assert len(made_after_cancel) <= 2  # the token in flight when Cancel came, at most one more
    assert not [r for r in result.runs if r.backend == "never"]  # nothing starts after Cancel
    assert not live_workers()


def test_cancel_during_a_load_ends_it_at_once_and_is_no_error(tiny_model):
    """A load keeps nothing and most runtimes cannot be told to stop one: Cancel ends the loading worker at
    once (it waited out the 5 s cancel grace, then read "killed: did not stop within the cancel grace
    period", an error), and its row says cancelled, with no error."""
    from whistle_stop.backends.worker.events import Progress

    session_box = {}

    def on_event(event):  # the engine said it is loading ("pretending to build something")
        if isinstance(getattr(event, "event", None), Progress) and "cancelled_at" not in session_box:
            session_box["cancelled_at"] = time.monotonic()
            session_box["session"].cancel()

    specs = {"slow_load": fake_engines.spec("slow_load", load_s=60.0), "never": fake_engines.spec("never")}
    session = _session(tiny_model, specs, on_event=on_event)
    session_box["session"] = session
    result = session.run()
    assert time.monotonic() - session_box["cancelled_at"] < 3.0  # not the 5 s grace, nor the 60 s load
    (row,) = result.runs
    assert row.backend == "slow_load" and row.status == "cancelled" and row.error == ""
    assert "cancelled while loading" in row.notes and result.cancelled
    assert not live_workers()


class DeafEngine(fake_engines.ScriptedEngine):
    """Its own loop, which never looks at cancel: two tokens, then it hangs (a runtime that cannot be told)."""

    capabilities = Capabilities(own_loop=True)

    def stream(self, token_ids, new_tokens, sampler, cancel=None):
        yield from (100, 101)
        time.sleep(3600)


def test_a_worker_that_ignores_cancel_is_killed(tiny_model):
    spec = replace(fake_engines.spec("stuck"), target="tests.test_worker:DeafEngine")

    def cancel_once_hung(event) -> None:  # its second token is out: the engine hangs from here on
        if isinstance(event, Token) and event.index == 1:
            worker.cancel()

    worker = Worker(
        spec,
        tiny_model,
        EngineOptions(threads=1),
        cancel_once_hung,
        timeouts=Timeouts(token_s=60, cancel_grace_s=0.5),
    )
    worker.start()
    outcome = worker.run(RunRequest("stuck/r1", (1, 2, 3), 10, SamplingParams()))
    assert outcome.status == "killed" and len(outcome.tokens) == 2
    assert not worker.alive
    worker.close()


def test_measured_runs_send_their_tokens_in_batches(tiny_model):
    """A run that is not live reaches the parent in a few TokenBatch events (the engine's thread
    never wakes the parent mid-run) and yields the same tokens, in order, as a live one."""
    from whistle_stop.backends.worker.events import TokenBatch

    received: list[object] = []
    spec = fake_engines.spec("batched", decode_s=0.005)
    worker = Worker(spec, tiny_model, EngineOptions(threads=1))
    original = worker._next_event

    def spy(*args, **kwargs):
        received.append(original(*args, **kwargs))
        return received[-1]

    worker._next_event = spy
    worker.start()
    try:
        live = worker.run(RunRequest("batched/w1", (1, 2, 3), 40, SamplingParams()))
        sends_live = sum(isinstance(e, Token) for e in received)
        received.clear()
        batched = worker.run(RunRequest("batched/r1", (1, 2, 3), 40, SamplingParams(), live=False))
    finally:
        worker.close()
    batches = [e for e in received if isinstance(e, TokenBatch)]
    assert sends_live == 40 and not any(isinstance(e, Token) for e in received)
    assert 1 <= len(batches) < 10 and sum(len(b.tokens) for b in batches) == 40
    assert [t.token_id for t in batched.tokens] == [t.token_id for t in live.tokens]
    assert [t.index for t in batched.tokens] == list(range(40)) and batched.status == "ok"


def test_load_failure_raises_worker_error(tiny_model):
    worker = Worker(fake_engines.spec("bad", fail_load=True), tiny_model, EngineOptions(threads=1))
    with pytest.raises(WorkerError, match="scripted load failure"):
        worker.start()
    assert not worker.alive


def _open_fds() -> int:
    return psutil.Process().num_fds()


@pytest.fixture
def fds_at_rest(tiny_model) -> int:
    """This process's open fds once one worker has come and gone (multiprocessing's resource tracker,
    imports that open files: what the first spawn leaves for good)."""
    worker = Worker(fake_engines.spec("first"), tiny_model, EngineOptions(threads=1))
    worker.start()
    worker.close()
    return _open_fds()


def test_every_worker_a_session_ends_has_its_pipes_closed_at_once(tiny_model, fds_at_rest):
    """A worker closed at the session's end, one lost mid-run and one that failed to load: each held its
    pipe and its Process's sentinel until the session was collected (a window keeps its last session
    until the next job), two fds a worker, more with each job."""
    specs = {
        "fine": fake_engines.spec("fine"),
        "crashy": fake_engines.spec("crashy", crash_at=1),
        "noload": fake_engines.spec("noload", fail_load=True),
    }
    kept = []  # as the window keeps them
    for _ in range(2):
        session = _session(tiny_model, specs)
        statuses = {r.backend: r.status for r in session.run().runs}
        assert statuses == {"fine": "ok", "crashy": "crashed", "noload": "error"}
        kept.append(session)
        assert _open_fds() == fds_at_rest
    assert not live_workers()


def _loading_worker(tiny_model) -> tuple[Worker, threading.Thread, list]:
    """A worker whose `start` runs on a thread, returned once its engine is in its (minute-long) load."""
    loading, raised = threading.Event(), []
    worker = Worker(
        fake_engines.spec("loady", load_s=60),
        tiny_model,
        EngineOptions(threads=1),
        lambda event: isinstance(event, Progress) and loading.set(),
    )

    def start() -> None:
        try:
            worker.start()
        except WorkerError as exc:
            raised.append(exc)

    thread = threading.Thread(target=start)
    thread.start()
    assert loading.wait(60)
    return worker, thread, raised


def _running_worker(tiny_model) -> tuple[Worker, threading.Thread, list]:
    """A worker whose 1000-token run (20 s) is under way on a thread."""
    running, outcomes = threading.Event(), []
    worker = Worker(
        fake_engines.spec("long", decode_s=0.02),
        tiny_model,
        EngineOptions(threads=1),
        lambda event: isinstance(event, Token) and running.set(),
    )
    worker.start()
    thread = threading.Thread(
        target=lambda: outcomes.append(worker.run(RunRequest("long/r1", (1, 2, 3), 1000, SamplingParams())))
    )
    thread.start()
    assert running.wait(60)
    return worker, thread, outcomes


@pytest.mark.parametrize("state", ["new", "loading", "ready", "running", "dead"])
def test_close_ends_a_worker_in_every_state_and_releases_it(tiny_model, fds_at_rest, state):
    """`close` from whatever state, from another thread than the one reading the pipe: the child ends, its
    pipe and Process are released, and the reading thread ends with a clear WorkerLost (a close during a
    load had closed the pipe under the read: an AttributeError, caught only by a broad except)."""
    thread, results = None, []
    if state == "loading":
        worker, thread, results = _loading_worker(tiny_model)
    elif state == "running":
        worker, thread, results = _running_worker(tiny_model)
    else:
        worker = Worker(fake_engines.spec(state), tiny_model, EngineOptions(threads=1))
        if state != "new":
            worker.start()
    pid = worker.pid
    if state == "dead":  # its process died while idle, unnoticed (a zombie: the worker reaps it)
        child = psutil.Process(pid)
        child.kill()
        wait_for(lambda: child.status() == psutil.STATUS_ZOMBIE)
    began = time.monotonic()
    worker.close(0.0)
    assert time.monotonic() - began < 5
    if thread is not None:
        thread.join(10)
        assert not thread.is_alive()
        (result,) = results
        lost = result.event if state == "loading" else result.failure
        assert (lost.reason, lost.detail) == ("killed", f"closed while {state}")
    assert worker.state is WorkerState.CLOSED and not worker.alive
    assert (pid is None) == (state == "new") and (pid is None or not psutil.pid_exists(pid))
    assert _open_fds() == fds_at_rest
    if state == "new":
        with pytest.raises(WorkerError, match="closed before it started"):
            worker.start()  # and never spawns
        assert worker.pid is None
    assert worker.run(RunRequest("x/r1", (1,), 2, SamplingParams())).failure is not None  # refused
    worker.close()  # a second close: nothing left to do


class BuildingEngine(fake_engines.ScriptedEngine):
    """Spends `build` seconds of its load building an artefact, and says so (as a cache miss)."""

    def load(self, model, progress):
        info = super().load(model, progress)
        fake_engines.busy_wait(0.2)
        info.build_s, info.artifact_cache, info.samples_natively, info.kv_bytes_per_position = 0.2, "miss", True, 123
        return info


def test_ready_passes_the_engines_context_into_every_record(tiny_model):
    spec = replace(fake_engines.spec("builds", load_s=0.05, decode_s=0.02), target="tests.test_worker:BuildingEngine")
    worker = Worker(spec, tiny_model, EngineOptions(threads=1))
    try:
        ready = worker.start()
    finally:
        worker.close()
    assert ready.build_s == 0.2 and ready.artifact_cache == "miss" and ready.samples_natively
    assert ready.kv_bytes_per_position == 123
    assert ready.load_s + ready.build_s >= 0.25  # the load's span, split in two: load_s excludes the build
    result = _session(tiny_model, {"builds": spec}, new_tokens=4, warmup=1).run()
    assert len(result.runs) == 2
    for run in result.runs:
        assert run.build_s == 0.2 and run.artifact_cache == "miss" and run.native_sampling
        assert run.load_s >= 0.05 and run.load_peak_rss_mb > 10 and run.peak_rss_mb > 10
        assert run.cpu_s_per_token is not None and run.cpu_s_per_token > 0
        assert run.harness_ms_per_token is not None and run.harness_ms_per_token >= 0
    tokens = [t for t in result.tokens if t.run_id == result.runs[-1].run_id]
    assert all(t.engine_ms is not None and t.harness_ms is not None for t in tokens)
    assert all(t.engine_ms >= 19 for t in tokens[1:])  # the scripted engine's decode_s is inside engine time


def test_serving_peak_is_reset_after_load_where_the_os_allows(tiny_model):
    result = _session(tiny_model, {"fine": fake_engines.spec("fine")}).run()
    (run,) = result.runs
    if sys.platform.startswith("linux"):
        assert "cannot reset the peak" not in run.notes
    else:
        assert "peak_rss_mb includes load" in run.notes


class HelperEngine(fake_engines.ScriptedEngine):
    """Its third token waits for a helper process that burns 0.3 s of CPU and exits (a compiler, a
    converter): the helper is gone, and reaped, before the run ends."""

    def decode(self, token_id):
        if self._position == 2:
            import subprocess

            burn = "import time\nwhile time.process_time() < 0.3:\n    pass"
            subprocess.run([sys.executable, "-c", burn], check=True)
        return super().decode(token_id)


def test_cpu_of_a_helper_that_exits_mid_run_counts(tiny_model):
    from dataclasses import replace

    spec = replace(fake_engines.spec("helped"), target="tests.test_worker:HelperEngine")
    result = _session(tiny_model, {"helped": spec}, new_tokens=5).run()
    (run,) = result.runs
    assert run.status == "ok" and run.tokens_generated == 5
    assert run.cpu_s_per_token * run.tokens_generated >= 0.3  # the worker itself only waited for it


class _RecordingConn:
    """A pipe end for `_serve_run` in this process: keeps what is sent, in order; RunStarted's send takes 50 ms."""

    def __init__(self) -> None:
        self.sent: list[object] = []

    def send(self, event) -> None:
        from whistle_stop.backends.worker.events import RunStarted

        if isinstance(event, RunStarted):
            time.sleep(0.05)
        self.sent.append(event)


@pytest.mark.parametrize("live", [True, False])
def test_ttft_holds_none_of_the_workers_own_set_up(monkeypatch, live):
    """The run's clock starts once the worker is set up: a slow thread start (the batch sender) and a
    slow send of RunStarted fall outside TTFT, and RunStarted, carrying that clock, still comes first."""
    from whistle_stop.backends.worker import child
    from whistle_stop.backends.worker.events import RunDone, RunStarted, TokenBatch

    start_thread = threading.Thread.start

    def slow_start(thread) -> None:
        time.sleep(0.05)
        start_thread(thread)

    monkeypatch.setattr(threading.Thread, "start", slow_start)
    conn = _RecordingConn()
    engine = fake_engines.ScriptedEngine("scripted", EngineOptions(threads=1))  # its first token is instant
    request = RunRequest("instant/r1", (1, 2, 3), 4, SamplingParams(), live=live)
    child._serve_run(conn, threading.Event(), engine, request)
    started, *middle, done = conn.sent
    tokens = [t for e in middle for t in (e.tokens if isinstance(e, TokenBatch) else (e,))]
    assert isinstance(started, RunStarted) and isinstance(done, RunDone)
    assert [t.token_id for t in tokens] == [100, 101, 102, 103] and all(isinstance(t, Token) for t in tokens)
    assert tokens[0].t_ns - started.t_ns < 20e6  # without the 50 ms thread start and the 50 ms send


def test_a_worker_whose_parent_was_killed_ends_too():
    """A parent killed while its worker hung (SIGKILL, a crash) left the worker running for good."""
    import subprocess
    from pathlib import Path

    import psutil

    code = (
        "from tests.fake_engines import spec\n"
        "from whistle_stop.backends.engine import EngineOptions\n"
        "from whistle_stop.backends.sampling import SamplingParams\n"
        "from whistle_stop.backends.sources.model_files import resolve_model\n"
        "from whistle_stop.backends.worker.events import RunRequest\n"
        "from whistle_stop.backends.worker.process import Worker\n"
        "from whistle_stop.backends.worker.events import Token\n"
        "def say_pid_once_hung(event):  # its first token is out: the engine now hangs before the second\n"
        "    if isinstance(event, Token):\n"
        "        print(worker.pid, flush=True)\n"
        "if __name__ == '__main__':\n"
        "    model, options = resolve_model('random:tiny'), EngineOptions(threads=1)\n"
        "    worker = Worker(spec('hung', hang_at=1), model, options, say_pid_once_hung)\n"
        "    worker.start()\n"
        "    worker.run(RunRequest('hung/r1', (1, 2, 3), 5, SamplingParams()))\n"
    )
    root = Path(__file__).resolve().parents[1]
    # `-c` from the checkout: `tests` is importable there, in the parent and in its spawned worker
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=root)
    try:
        child = psutil.Process(int(parent.stdout.readline()))
    finally:
        parent.kill()  # SIGKILL: the parent says nothing to its worker
        parent.wait(10)
    _, alive = psutil.wait_procs([child], timeout=10)
    for orphan in alive:
        orphan.kill()  # not left behind by a failing run of this test
    assert not alive, "the worker outlived its killed parent"
