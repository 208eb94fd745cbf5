"""Shared fixtures: an isolated cache, the tiny random model, and HF's own greedy reference."""

from __future__ import annotations

import contextlib
import os
import time

import numpy as np
import pytest

from main import installed_here

# The tests import the installed `whistle_stop` (`make test` installs this checkout editable); one from
# another checkout would test other code, so say what to run instead.
_PROBLEM = installed_here()
if _PROBLEM:
    pytest.exit(_PROBLEM, returncode=2)

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach for the hub


# Tests that measure wall or CPU time, race a deadline, or interrupt pytest's main thread (file -> its
# tests; "*": every test of the file).
# They carry the `timing` marker: `make test` runs them alone, after the parallel run of the others
# (pytest-xdist), so no other test takes their cores while they measure.
TIMING = {
    "test_build_time.py": {"test_cold_start_excludes_the_build_and_build_s_shows_it"},
    # a healthy engine beside the hung one must answer within --timeout 1; Ctrl+C is raised in pytest's
    # main thread (_thread.interrupt_main), which an xdist worker's test does not own
    "test_cli.py": {
        "test_timeout_ends_a_hang_at_load_and_while_scoring",
        "test_ctrl_c_keeps_the_finished_runs_says_how_many_and_exits_130",
        "test_a_sweep_cancelled_before_its_first_cell_finished_prints_no_empty_table",
    },
    # the cancel must land while the first measured run is being timed
    "test_gui.py": {"test_fair_mode_keeps_still_while_a_measured_run_is_timed"},
    "test_idle_workers.py": "*",
    "test_load.py": {
        "test_load_levels_follow_the_servers_batching",
        "test_a_round_whose_server_went_silent_ends_after_the_timeout",
    },
    "test_null_engine.py": {
        "test_null_runs_and_its_split_adds_up_to_the_itl",
        "test_an_engine_with_its_own_stream_has_no_engine_time",
    },
    "test_profile.py": {
        "test_known_costs_land_in_their_categories",
        "test_an_engine_with_its_own_loop_gets_its_ttft_as_prefill",
        "test_a_speculative_engine_is_judged_per_decoded_token_and_says_how_it_beats_the_single_token_floor",
        "test_the_profiled_ms_per_token_of_an_engine_whose_first_step_makes_several_is_bench_s",
    },
    "test_remote.py": {"test_a_server_streaming_several_tokens_an_event_is_timed_per_decoded_token"},
    "test_serve.py": {
        "test_a_client_that_goes_away_cancels_its_generation",
        "test_a_client_that_hangs_up_mid_stream_is_quiet_and_stops_its_generation",
        "test_a_shutdown_while_the_engine_loads_ends_the_load_at_once",
        "test_two_workers_serve_two_streams_at_once",
    },
    "test_serve_cold_start.py": {"test_bench_serve_cold_start_writes_the_table_and_csv"},
    "test_serve_process.py": {"test_past_the_shutdown_timeout_the_request_is_cancelled"},
    "test_worker.py": {
        "test_a_hanging_engine_is_killed_after_its_timeout",
        "test_cancel_during_a_load_ends_it_at_once_and_is_no_error",
        "test_close_ends_a_worker_in_every_state_and_releases_it",
    },
}


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by marker
def pytest_collection_modifyitems(items):
    for item in items:
        names = TIMING.get(item.path.name)
        if names is not None and (names == "*" or getattr(item, "originalname", "") in names):
            item.add_marker(pytest.mark.timing)


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory):
    """Each test session builds its models and artefacts in its own cache (spawned workers inherit it).
    Under pytest-xdist its workers share one folder of C kernel builds (the artefact cache's lock makes
    one of them build each, as for the app's own workers), so a kernel compiles once per run."""
    path = tmp_path_factory.mktemp("whistle-stop-cache")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        from whistle_stop.backends.kernels import native

        shared = tmp_path_factory.getbasetemp().parent / "whistle-stop-kernels"  # the run's, not this worker's
        shared.mkdir(exist_ok=True)
        (path / native.KIND).symlink_to(shared, target_is_directory=True)
    previous = os.environ.get("WHISTLE_STOP_CACHE")
    os.environ["WHISTLE_STOP_CACHE"] = str(path)
    yield path
    if previous is None:
        os.environ.pop("WHISTLE_STOP_CACHE", None)
    else:
        os.environ["WHISTLE_STOP_CACHE"] = previous


@pytest.fixture
def use_engines():
    """`use_engines(*specs)`: test engines in the registry (`registry.use`) until the test ends."""
    from whistle_stop.backends import registry

    with contextlib.ExitStack() as stack:
        yield lambda *specs: stack.enter_context(registry.use(specs))


@pytest.fixture(scope="session")
def tiny_model(isolated_cache):
    from whistle_stop.backends.sources.model_files import resolve_model

    return resolve_model("random:tiny")


@pytest.fixture(scope="session")
def prompt_ids():
    from whistle_stop.backends.sources.prompts import prompt_of_length

    return prompt_of_length(12)


@pytest.fixture(scope="session")
def hf_reference(tiny_model):
    """transformers' own model, for greedy tokens (`generate`) and logits to compare with."""
    import torch
    from transformers import GPT2LMHeadModel
    from transformers.utils import logging

    logging.disable_progress_bar()
    model = GPT2LMHeadModel.from_pretrained(str(tiny_model.folder)).eval()
    # Exactly N greedy tokens with end-of-text a candidate, as every engine (min_new_tokens would mask it)
    model.generation_config.eos_token_id = None

    class Reference:
        def greedy(self, ids, new_tokens):
            with torch.inference_mode():
                out = model.generate(
                    torch.tensor([list(ids)]),
                    max_new_tokens=new_tokens,
                    do_sample=False,
                    pad_token_id=50256,
                )
            return out[0, len(ids) :].tolist()

        def logits(self, ids):
            """[T, vocab] float32 numpy logits of every position."""
            with torch.inference_mode():
                return model(torch.tensor([list(ids)])).logits[0].float().numpy()

    return Reference()


# Engines whose native code could crash the test process: they are tested in a spawned child
# (tests/engine_process.py), as the app runs them, so a crash fails one test and not the suite.
CRASH_PRONE = ("llamacpp", "ctranslate2", "openvino", "ortgenai", "tf", "native", "torch-static")


def load_engine_in_process(name, model, threads=1):
    """One pure-Python engine created and loaded in this process (no worker), for tests that call it directly."""
    from whistle_stop.backends import registry
    from whistle_stop.backends.engine import EngineOptions

    assert not name.startswith(CRASH_PRONE), f"{name} runs native code: use load_engine_in_worker"
    engine = registry.create(name, EngineOptions(threads=threads))
    engine.load(model, lambda *a: None)
    return engine


def engine_tokens(name, model, ids, new_tokens, sampling=None, threads=1):
    """Load one engine (in a spawned child where it runs native code) and return its tokens: for parity tests."""
    from whistle_stop.backends.sampling import Sampler, SamplingParams

    if name.startswith(CRASH_PRONE):
        with load_engine_in_worker(name, model, threads) as engine:
            return engine.tokens(ids, new_tokens, sampling)
    engine = load_engine_in_process(name, model, threads)
    try:
        return list(engine.stream(ids, new_tokens, Sampler(sampling or SamplingParams())))
    finally:
        engine.close()


def load_engine_in_worker(name, model, threads=1):
    """One engine loaded in a spawned child (tests/engine_process.py): a crash fails this test only."""
    from tests.engine_process import EngineProcess

    return EngineProcess(name, model, threads)


def wait_for(condition, timeout_s: float = 30.0) -> None:
    """Poll `condition` until it holds; fail after `timeout_s` (for threads and processes, not Qt: qtbot.waitUntil)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def live_workers():
    """Child processes of this test process, except multiprocessing's own resource tracker."""
    import psutil

    children = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "resource_tracker" not in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                children.append(child)
        except psutil.NoSuchProcess:
            continue
    return children


def greedy_logits(engine, ids: list[int], steps: int) -> tuple[list[int], np.ndarray]:
    """Greedy tokens and the logits [steps + 1, V] of prefill and each decode step."""
    logits = [engine.prefill(ids)]
    tokens: list[int] = []
    for _ in range(steps):
        tokens.append(int(np.argmax(logits[-1])))
        logits.append(engine.decode(tokens[-1]))
    return tokens, np.stack(logits)


@pytest.fixture(scope="module")
def engines(tiny_model):
    """`engines(name, threads=1)`: an engine in a spawned child shared by one module's tests, started
    on first use (a child that imports torch costs seconds), and again after a crash, which fails only
    the test it happened in. A test that uses one starts a new sequence."""
    from tests.engine_process import EngineProcess

    started: dict[tuple[str, int], EngineProcess] = {}

    def engine(name: str, threads: int = 1) -> EngineProcess:
        process = started.get((name, threads))
        if process is None or not process.alive:
            if process is not None:
                process.close()
            process = started[name, threads] = EngineProcess(name, tiny_model, threads)
        return process

    yield engine
    for process in started.values():
        process.close()
