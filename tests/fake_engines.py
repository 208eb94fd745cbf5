"""Scripted engines for tests: known delays, crashes, hangs and load failures.

They are plain engines loaded in real spawned workers (their EngineSpec travels to the child),
so the tests exercise the same worker, records and statistics as real engines.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import numpy as np

from whistle_stop.backends.engine import Capabilities, Engine, EngineInfo, EngineOptions, StampedToken
from whistle_stop.backends.registry import EngineSpec

VOCAB = 50257


class ScriptedEngine(Engine):
    """Emits tokens 100, 101, ... with `prefill_s` before the first and `decode_s` between the rest.
    Greedily: its logits are flat but for one 1.0, so a sampled run draws nearly any token, end-of-text
    included (test_quality's scores count on those logits)."""

    def __init__(
        self,
        name: str,
        options: EngineOptions,
        prefill_s: float = 0.0,
        decode_s: float = 0.0,
        crash_at: int | None = None,
        hang_at: int | None = None,
        fail_at: int | None = None,
        fail_load: bool = False,
        load_s: float = 0.0,
        device: str = "cpu",
        segfault_at: int | None = None,
        build_s: float = 0.0,
        odd_run: int | None = None,
        odd_decode_s: float = 0.0,
    ) -> None:
        super().__init__(name, options)
        self.device = device  # what its Ready says (a "cuda" one: whose memory the profile probes)
        self.prefill_s, self.decode_s = prefill_s, decode_s
        self.crash_at, self.hang_at, self.fail_at = crash_at, hang_at, fail_at
        self.segfault_at = segfault_at
        self.fail_load, self.load_s = fail_load, load_s
        self.build_s = build_s  # a first export's time: spent in load, reported as EngineInfo.build_s
        # the odd run (1-based, warm-ups counted): `odd_decode_s` a token, and `fail_at` only there
        self.odd_run, self.odd_decode_s = odd_run, odd_decode_s
        self._position = self._runs = 0

    def load(self, model, progress) -> EngineInfo:
        if self.fail_load:
            raise RuntimeError("scripted load failure")
        if self.load_s:
            progress("pretending to build something", 0.5)
            time.sleep(self.load_s)
        if self.build_s:
            progress("pretending to export something", None)
            time.sleep(self.build_s)
        return EngineInfo(
            device=self.device,
            dtype="fp32",
            weight_bytes_per_token=1_000_000,
            notes="scripted",
            build_s=self.build_s,
            artifact_cache="miss" if self.build_s else "none",
        )

    def _logits(self) -> np.ndarray:
        logits = np.zeros(VOCAB, np.float32)
        logits[100 + self._position] = 1.0
        return logits

    def _step(self, delay: float) -> np.ndarray:
        if self.crash_at is not None and self._position == self.crash_at:
            os._exit(3)  # a hard crash: no exception, no goodbye
        if self.segfault_at is not None and self._position == self.segfault_at:
            import ctypes

            ctypes.string_at(0)  # a real native crash: reading address 0 (SIGSEGV), as a broken kernel would
        if self.hang_at is not None and self._position == self.hang_at:
            time.sleep(3600)
        odd = self.odd_run is not None and self._runs == self.odd_run
        if self.fail_at is not None and self._position == self.fail_at and (self.odd_run is None or odd):
            raise ValueError("scripted failure mid-run")
        busy_wait(self.odd_decode_s if odd and self._position else delay)
        logits = self._logits()
        self._position += 1
        return logits

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        self._position = 0
        self._runs += 1
        return self._step(self.prefill_s)

    def decode(self, token_id: int) -> np.ndarray:
        return self._step(self.decode_s)


def busy_wait(seconds: float) -> None:
    """Sleep precisely enough for metric tests (time.sleep can overshoot by a scheduler tick)."""
    end = time.perf_counter() + seconds
    if seconds > 0.003:
        time.sleep(seconds - 0.002)
    while time.perf_counter() < end:
        pass


def _spec(engine_class: str, description: str, name: str, engine_args: dict) -> EngineSpec:
    """A registry entry for one of this module's engines."""
    return EngineSpec(
        name=name, target=f"tests.fake_engines:{engine_class}", description=description, engine_args=engine_args
    )


def spec(name: str, **kwargs) -> EngineSpec:
    return _spec("ScriptedEngine", "scripted test engine", name, kwargs)


# --- A profiled engine with known costs per phase (tests/test_profile.py) -----------------------
# Module-level functions named like the numpy runtime's, so the numpy family's categories apply:
# `linear` is a matmul, `attention` attention; the busy wait between them is "Python".


def linear(seconds: float) -> None:
    busy_wait(seconds)


def attention(seconds: float) -> None:
    busy_wait(seconds)


class PhasedEngine(ScriptedEngine):
    """Decode: linear 4 ms, attention 2 ms, 1 ms of plain Python; prefill: linear 8 ms, attention 2 ms."""

    DECODE = {"linear": 0.004, "attention": 0.002, "python": 0.001}
    PREFILL = {"linear": 0.008, "attention": 0.002, "python": 0.0}

    def _phase(self, costs: dict) -> None:
        import tests.fake_engines as module  # through the module: the profiler's wrappers are there

        module.linear(costs["linear"])
        module.attention(costs["attention"])
        busy_wait(costs["python"])

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        self._position = 0
        self._phase(self.PREFILL)
        return self._step(0.0)

    def decode(self, token_id: int) -> np.ndarray:
        self._phase(self.DECODE)
        return self._step(0.0)

    def profiler(self):
        import tests.fake_engines as module
        from whistle_stop.backends.profilers.categories import OpFamily
        from whistle_stop.backends.profilers.timers import FunctionTimers

        return FunctionTimers(module, ["linear", "attention"], OpFamily.NUMPY_FUNCTIONS)


def phased_spec(name: str = "phased") -> EngineSpec:
    return EngineSpec(
        name=name, target="tests.fake_engines:PhasedEngine", description="scripted engine with known costs per phase"
    )


# --- An engine that generates in its own loop (tests/test_profile.py) ---------------------------


class OwnLoopEngine(ScriptedEngine):
    """ScriptedEngine's tokens from its own `stream`, as ctranslate2, the GenAI runtimes or a server
    generate: the worker relays them and cannot time its prefill and decode calls apart."""

    capabilities = Capabilities(own_loop=True)

    def __init__(self, name: str, options: EngineOptions, stops_after: int | None = None, **kwargs) -> None:
        super().__init__(name, options, **kwargs)
        self.stops_after = stops_after  # a server that stops at end-of-text, though asked for more

    def stream(self, token_ids, new_tokens, sampler, cancel=None):
        count = new_tokens if self.stops_after is None else min(new_tokens, self.stops_after)
        yield from super().stream(token_ids, count, sampler, cancel)


def own_loop_spec(name: str = "own-loop", **kwargs) -> EngineSpec:
    return _spec("OwnLoopEngine", "scripted engine with its own loop", name, kwargs)


# --- An engine whose runtime makes tokens on a thread of its own, handed over late ---------------


class LateHandoverEngine(ScriptedEngine):
    """A token every `step_s` on the runtime's own thread, each stamped as made (StampedToken), while
    the consumer gets none until all are made: the worker's thread waiting for a core (CTranslate2's
    threads on both of 2 cores) at its worst. Its times must be the runtime's, not the handover's."""

    capabilities = Capabilities(own_loop=True)

    def __init__(self, name: str, options: EngineOptions, step_s: float = 0.01) -> None:
        super().__init__(name, options)
        self.step_s = step_s

    def stream(self, token_ids, new_tokens, sampler, cancel=None):
        import threading

        made = []

        def runtime() -> None:
            for index in range(new_tokens):
                busy_wait(self.step_s)  # the runtime's step
                made.append(StampedToken.now(100 + index))

        thread = threading.Thread(target=runtime)
        thread.start()
        thread.join()  # every token made before the first is handed over
        yield from made


def late_handover_spec(name: str = "late", **kwargs) -> EngineSpec:
    return _spec("LateHandoverEngine", "scripted engine whose tokens are handed over late", name, kwargs)


# --- An engine whose steps make several tokens (speculative decoding; tests/test_speculation_records.py)


class BurstEngine(ScriptedEngine):
    """Tokens in bursts of `burst`: one `step_s` wait per burst, then its tokens back to back, as a
    speculative engine's target pass decides several at once; it reports its counts as one would.
    `first`: the tokens the prefill's step makes (transformers' assisted generation checks its first
    drafts with the prompt)."""

    capabilities = Capabilities(own_loop=True)

    def __init__(self, name: str, options: EngineOptions, burst: int = 4, step_s: float = 0.02, first: int = 1) -> None:
        super().__init__(name, options)
        self.burst, self.step_s, self.first = burst, step_s, first

    def load(self, model, progress) -> EngineInfo:
        info = super().load(model, progress)
        info.multi_token_steps = True
        return info

    def stream(self, token_ids, new_tokens, sampler, cancel=None):
        from whistle_stop.backends.speculation import SpeculationStats

        busy_wait(self.step_s)  # the prefill
        first = min(self.first, new_tokens)
        for index in range(first):
            yield StampedToken.now(100 + index, 0)
        passes = 0
        for start in range(first, new_tokens, self.burst):
            busy_wait(self.step_s)
            passes += 1
            for index in range(start, min(start + self.burst, new_tokens)):
                yield StampedToken.now(100 + index, passes)
        decoded = new_tokens - first
        self.speculation = SpeculationStats(
            tokens=decoded,
            target_passes=passes,
            drafted=passes * self.burst,
            accepted=decoded - passes,
            draft_ns=int(0.3 * passes * self.step_s * 1e9),
            verify_ns=int(0.7 * passes * self.step_s * 1e9),
            bytes_read=decoded * 250_000,
        )


def burst_spec(name: str = "burst", **kwargs) -> EngineSpec:
    return _spec("BurstEngine", "scripted engine with bursts", name, kwargs)
