"""Peak memory is the worker's own: a parent that touched a lot of memory does not leak into it.

On Linux `ru_maxrss` is carried across fork + exec, so a worker spawned by a parent that had
touched 600 MB used to report at least 600 MB. The worker now reads its own high-water mark.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.fake_engines import ScriptedEngine
from whistle_stop.backends import registry
from whistle_stop.backends.engine import EngineOptions
from whistle_stop.backends.registry import EngineSpec
from whistle_stop.backends.runs.bench import BenchConfig, BenchSession
from whistle_stop.backends.sampling import SamplingParams
from whistle_stop.backends.worker.child import peak_rss_mb, reset_peak_rss
from whistle_stop.backends.worker.events import RunRequest
from whistle_stop.backends.worker.process import Worker

BUFFER_MB = 600

pytestmark = pytest.mark.skipif(
    sys.platform == "darwin", reason="macOS: the peak is ru_maxrss, whose inheritance the OS decides"
)


@pytest.fixture
def big_parent():
    """This (the parent) process holds and has touched BUFFER_MB of memory while workers start."""
    buffer = np.empty(BUFFER_MB * 2**20 // 8, np.float64)
    buffer.fill(1.0)  # touched: resident, and the parent's high-water mark is at least this
    assert peak_rss_mb() >= BUFFER_MB
    yield buffer
    del buffer


@pytest.mark.parametrize("engine", ["null", "numpy"])
def test_a_workers_peaks_are_its_own_not_its_parents(tiny_model, big_parent, engine):
    worker = Worker(registry.get(engine), tiny_model, EngineOptions(threads=1))
    try:
        ready = worker.start()
        outcome = worker.run(RunRequest(f"{engine}/r1", (1, 2, 3, 4), 5, SamplingParams()))
    finally:
        worker.close()
    assert outcome.status == "ok"
    assert 0 < ready.load_peak_rss_mb < BUFFER_MB / 2
    assert 0 < outcome.done.peak_rss_mb < BUFFER_MB / 2


def test_the_records_carry_both_peaks(tiny_model, big_parent):
    config = BenchConfig(
        model="random:tiny", backends=("null",), prompt_tokens=8, new_tokens=5, repeats=1, warmup=0, threads=1
    )
    (run,) = BenchSession(config).run().runs
    assert run.status == "ok"
    assert 0 < run.load_peak_rss_mb < BUFFER_MB / 2
    assert 0 < run.peak_rss_mb < BUFFER_MB / 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="only Linux can reset the high-water mark")
def test_the_high_water_mark_resets_to_the_current_rss():
    buffer = np.ones(200 * 2**20 // 8)  # at least 200 MB over whatever this process holds now
    high = peak_rss_mb()
    del buffer
    assert reset_peak_rss()
    assert peak_rss_mb() < high - 100


def test_a_child_process_counts_with_its_parent():
    """Peak memory and CPU time include a worker's children (a managed server runs the model in them)."""
    import subprocess

    from whistle_stop.backends.worker import usage

    code = "import sys; b = b'x' * (150 * 2**20); print('touched', flush=True); sys.stdin.read()"
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "touched"  # its 150 MB are resident
        assert child.pid in [p.pid for p in usage._descendants()]
        if sys.platform.startswith("linux"):
            assert usage._has_children_linux() is True
            assert peak_rss_mb() >= usage._vm_hwm_kb("self") / 1024 + 150
    finally:
        child.stdin.close()
        child.wait()
        child.stdout.close()
    assert child.pid not in [p.pid for p in usage._descendants()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux lists a process's children in /proc")
def test_a_worker_without_children_does_not_import_psutil():
    """psutil takes ~17 ms to import, and every worker measures its peak before Ready."""
    import subprocess

    code = (
        "import sys; from whistle_stop.backends.worker import usage; "
        "assert usage.peak_rss_mb() > 0 and usage.cpu_seconds() > 0 and usage.reset_peak_rss(); "
        "assert 'psutil' not in sys.modules, 'psutil imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


class BalloonEngine(ScriptedEngine):
    """Touches BUFFER_MB of memory during its first run only, and frees it."""

    def prefill(self, token_ids):
        if not self._runs:
            balloon = np.ones(BUFFER_MB * 2**20 // 8, np.float64)
            del balloon
        return super().prefill(token_ids)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="only Linux can reset the high-water mark")
def test_each_run_s_peak_is_its_own(tiny_model):
    """The mark was reset once, after load: every later record carried the first run's peak (a sweep's
    short cell the peak of a longer one before it)."""
    spec = EngineSpec(name="balloon", target="tests.test_memory:BalloonEngine", description="balloon")
    worker = Worker(spec, tiny_model, EngineOptions(threads=1))
    try:
        worker.start()
        peaks = [
            worker.run(RunRequest(f"balloon/r{i}", (1, 2, 3, 4), 3, SamplingParams())).done.peak_rss_mb for i in (1, 2)
        ]
    finally:
        worker.close()
    assert peaks[0] > BUFFER_MB and peaks[1] < peaks[0] - BUFFER_MB / 2
